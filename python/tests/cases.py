"""SPMD test cases shared by the emulator suite (test_emu.py, ranks as threads of fusedcoll.run)
and the MPI suite (mpi_suite.py, ranks as processes): each ``case_*(rank, size)`` makes
distributed calls and checks every output's bytes against ``ref/``.

Every rank regenerates the inputs of every rank from seeds (``fusedcoll.testing.seeded``), runs
the oracle over the whole world locally (``fusedcoll.ref`` for the collectives,
``fusedcoll.testing.problem_*`` for the operators, which build their inputs and results with
fusedcoll's C++ generators), and compares its own output with ``same_bits``. Inputs are drawn
with random mantissas and exponents, so a wrong summation order shows in the bits.
"""

import io
import sys
import unittest

import torch

import fusedcoll
import fusedcoll.ref as ref
from fusedcoll.testing import problem_embedding, problem_gemm, problem_gemv, same_bits, seeded


def _expect_same(what, got, expected, rank):
    if not same_bits(got, expected):
        diff = ""
        if got.shape == expected.shape and got.dtype == expected.dtype and got.numel():
            g = got.reshape(-1).view(torch.uint8 if got.element_size() == 1 else
                                     {2: torch.int16, 4: torch.int32, 8: torch.int64}[
                                         got.element_size()])
            e = expected.reshape(-1).view(g.dtype)
            bad = (g != e).nonzero().reshape(-1)[:4].tolist()
            diff = f"; first differing elements {bad}: got {[got.reshape(-1)[i].item() for i in bad]}" \
                   f", expected {[expected.reshape(-1)[i].item() for i in bad]}"
        raise AssertionError(f"rank {rank}: {what}: got {got.dtype}{list(got.shape)}, expected "
                             f"{expected.dtype}{list(expected.shape)}{diff}")


def _inputs(size, shape, dtype, seed, values="random"):
    return [seeded(shape, dtype, seed=seed, stream=11, rank=q, values=values) for q in range(size)]


# --- AllReduce -----------------------------------------------------------------------------------

ALL_REDUCE_GRID = [
    # (count, dtype, values, op, algo, wire)
    (1000, torch.float32, "random", "sum", "direct", None),
    (1000, torch.float32, "random", "sum", "ring", None),
    (7, torch.float32, "random", "avg", "direct", None),
    (7, torch.float32, "random", "avg", "ring", None),
    (333, torch.float32, "random", "min", "direct", None),
    (333, torch.float32, "random", "max", "ring", None),
    (0, torch.float32, "random", "sum", "direct", None),
    (1, torch.float32, "random", "sum", "ring", None),
    (77, torch.int32, "integer", "sum", "direct", None),
    (77, torch.int64, "integer", "avg", "ring", None),
    (1000, torch.float32, "random", "sum", "direct", fusedcoll.Wire("f16")),
    (1000, torch.float32, "random", "avg", "ring", fusedcoll.Wire("bf16")),
    (1000, torch.float32, "random", "avg", "direct", fusedcoll.Wire("fp8_e4m3", predivide=True)),
    (999, torch.float32, "random", "sum", "ring",
     fusedcoll.Wire("fp8_e5m2", scaling="per_block", block=64, pow2_scale=True)),
    (1000, torch.float32, "random", "sum", "chain", None),
]

# Compressed chain (the running value encoded at every rank): a grid of its own, so that a
# backend's suite states that it runs it (test_emu.py, mpi_suite.py).
ALL_REDUCE_CHAIN_WIRE_GRID = [
    (7, torch.float32, "random", "avg", "chain", fusedcoll.Wire("f16")),
    (1000, torch.float32, "random", "sum", "chain", fusedcoll.Wire("bf16")),
    (1000, torch.float32, "random", "avg", "chain", fusedcoll.Wire("fp8_e4m3", predivide=True)),
    (999, torch.float32, "random", "sum", "chain",
     fusedcoll.Wire("fp8_e5m2", scaling="per_block", block=64, pow2_scale=True)),
]


def case_all_reduce_chain_wire(rank, size):
    _all_reduce_grid(rank, size, ALL_REDUCE_CHAIN_WIRE_GRID, 170)


def _all_reduce_grid(rank, size, grid, seed0):
    for i, (count, dtype, values, op, algo, wire) in enumerate(grid):
        xs = _inputs(size, (count,), dtype, seed=seed0 + i, values=values)
        expected = ref.all_reduce(xs, op, algo=algo, wire=wire)[rank]
        what = f"all_reduce #{i} ({count} x {dtype}, {op}, {algo}, {wire})"
        mine = xs[rank].clone()
        _expect_same(what, fusedcoll.all_reduce(mine, op, algo=algo, wire=wire), expected, rank)
        _expect_same(what + " left its input alone", mine, xs[rank], rank)
        out = torch.empty_like(mine)
        got = fusedcoll.all_reduce(mine, op, algo=algo, wire=wire, out=out)
        assert got is out, "all_reduce(out=) returns out"
        _expect_same(what + " out=", out, expected, rank)
        inplace = fusedcoll.all_reduce_(mine, op, algo=algo, wire=wire)
        assert inplace is mine, "all_reduce_ returns its argument"
        _expect_same(what + " in place", mine, expected, rank)


def case_all_reduce(rank, size):
    _all_reduce_grid(rank, size, ALL_REDUCE_GRID, 100)
    # A 2-D tensor reduces element-wise, like its flat view.
    xs = _inputs(size, (6, 5), torch.float32, seed=150)
    _expect_same("all_reduce 2-D", fusedcoll.all_reduce(xs[rank]),
                 ref.all_reduce(xs)[rank], rank)
    # Integer-valued inputs: the sum is exact in any order, so torch's own sum must agree.
    xs = _inputs(size, (64,), torch.float32, seed=151, values="integer")
    _expect_same("all_reduce vs torch.sum on integers", fusedcoll.all_reduce(xs[rank]),
                 torch.stack(xs).sum(0), rank)


# --- All-to-All(v) -------------------------------------------------------------------------------

def _uneven_counts(size, seed):
    return [[(r * 3 + q * 2 + seed) % 4 for q in range(size)] for r in range(size)]


def case_all_to_all(rank, size):
    # Even split, several dtypes (bytes move unread), a 3-D tensor.
    for i, dtype in enumerate([torch.float32, torch.int64, torch.float16, torch.bfloat16]):
        xs = _inputs(size, (size * 3, 2, 5), dtype, seed=200 + i)
        _expect_same(f"all_to_all even {dtype}", fusedcoll.all_to_all(xs[rank]),
                     ref.all_to_all(xs)[rank], rank)
    u8 = [torch.arange(size * 4, dtype=torch.uint8) * 7 + q for q in range(size)]
    _expect_same("all_to_all uint8", fusedcoll.all_to_all(u8[rank]), ref.all_to_all(u8)[rank],
                 rank)
    # Uneven: counts exchanged by the call itself, or given on both sides.
    counts = _uneven_counts(size, 1)
    xs = [seeded((sum(counts[q]), 3), seed=210, rank=q) for q in range(size)]
    expected = ref.all_to_all(xs, counts)[rank]
    _expect_same("all_to_all uneven (exchanged counts)",
                 fusedcoll.all_to_all(xs[rank], counts[rank]), expected, rank)
    recv = [counts[q][rank] for q in range(size)]
    out = torch.empty_like(expected)
    fusedcoll.all_to_all(xs[rank], counts[rank], recv, out=out)
    _expect_same("all_to_all uneven out=", out, expected, rank)
    # Compressed wire: every segment arrives as decode(encode(x)).
    xs = _inputs(size, (size * 40,), torch.float32, seed=220)
    wire = fusedcoll.Wire("fp8_e4m3", scaling="per_block", block=16)
    _expect_same("all_to_all fp8 wire", fusedcoll.all_to_all(xs[rank], wire=wire),
                 ref.all_to_all(xs, wire=wire)[rank], rank)


# --- ReduceScatter -------------------------------------------------------------------------------

def case_reduce_scatter(rank, size):
    xs = _inputs(size, (size * 4, 3), torch.float32, seed=300)
    expected = ref.reduce_scatter(xs)[rank]
    _expect_same("reduce_scatter even", fusedcoll.reduce_scatter(xs[rank]), expected, rank)
    # In place: out is this rank's slice of the input.
    mine = xs[rank].clone()
    got = fusedcoll.reduce_scatter(mine, out=mine.narrow(0, rank * 4, 4))
    _expect_same("reduce_scatter in place", got, expected, rank)
    counts = [(q * 5 + 1) % 4 for q in range(size)]
    xs = _inputs(size, (sum(counts),), torch.float32, seed=301)
    for op in ("sum", "avg", "max"):
        _expect_same(f"reduce_scatter uneven {op}", fusedcoll.reduce_scatter(xs[rank], counts, op),
                     ref.reduce_scatter(xs, counts, op)[rank], rank)
    xs = _inputs(size, (size * 50,), torch.float32, seed=302)
    wire = fusedcoll.Wire("fp8_e5m2", predivide=True)
    _expect_same("reduce_scatter fp8 avg", fusedcoll.reduce_scatter(xs[rank], op="avg", wire=wire),
                 ref.reduce_scatter(xs, op="avg", wire=wire)[rank], rank)
    ints = _inputs(size, (size * 2,), torch.int64, seed=303, values="integer")
    _expect_same("reduce_scatter int64", fusedcoll.reduce_scatter(ints[rank]),
                 ref.reduce_scatter(ints)[rank], rank)


# --- AllGather -----------------------------------------------------------------------------------

def case_all_gather(rank, size):
    xs = _inputs(size, (3, 4), torch.float32, seed=400)
    expected = ref.all_gather(xs)[rank]
    _expect_same("all_gather even", fusedcoll.all_gather(xs[rank]), expected, rank)
    out = torch.empty_like(expected)
    out.narrow(0, rank * 3, 3).copy_(xs[rank])
    got = fusedcoll.all_gather(out.narrow(0, rank * 3, 3), out=out)
    _expect_same("all_gather in place", got, expected, rank)
    # Uneven: rank q contributes q + 1 rows (a rank with 0 rows too, when size > 2).
    rows = [(q + 1) if q != 2 else 0 for q in range(size)]
    xs = [seeded((rows[q], 2), seed=401, rank=q) for q in range(size)]
    _expect_same("all_gather uneven", fusedcoll.all_gather(xs[rank], rows),
                 ref.all_gather(xs)[rank], rank)
    scalars = [torch.tensor(q * 1.5 + 0.25) for q in range(size)]
    _expect_same("all_gather 0-dim", fusedcoll.all_gather(scalars[rank]),
                 ref.all_gather(scalars)[rank], rank)
    flags = [torch.tensor([q % 2 == 0, True]) for q in range(size)]
    _expect_same("all_gather bool", fusedcoll.all_gather(flags[rank]),
                 ref.all_gather(flags)[rank], rank)
    xs = _inputs(size, (70,), torch.float32, seed=402)
    _expect_same("all_gather bf16 wire", fusedcoll.all_gather(xs[rank], wire="bf16"),
                 ref.all_gather(xs, wire="bf16")[rank], rank)


# --- Broadcast -----------------------------------------------------------------------------------

def case_broadcast(rank, size):
    for root in sorted({0, size - 1}):
        xs = _inputs(size, (5, 3), torch.float32, seed=500 + root)
        expected = ref.broadcast(xs, root)[rank]
        _expect_same(f"broadcast root {root}", fusedcoll.broadcast(xs[rank], root), expected,
                     rank)
        mine = xs[rank].clone()
        assert fusedcoll.broadcast_(mine, root) is mine
        _expect_same(f"broadcast_ root {root}", mine, expected, rank)
    halves = _inputs(size, (9,), torch.bfloat16, seed=510)
    _expect_same("broadcast bf16", fusedcoll.broadcast(halves[rank], size - 1),
                 ref.broadcast(halves, size - 1)[rank], rank)
    doubles = [torch.arange(4, dtype=torch.float64) / (q + 3) for q in range(size)]
    _expect_same("broadcast float64 (moved as 8-byte elements)",
                 fusedcoll.broadcast(doubles[rank]), doubles[0], rank)


# --- The fused operators -------------------------------------------------------------------------

MODES = ("unfused", "scale_up", "scale_out")


def case_gemv(rank, size):
    shapes = [dict(m=4, n=96, k_splits=[37 + 5 * q for q in range(size)]),
              dict(m=1, n=33, k_splits=[0 if q == size - 1 and size > 1 else 16
                                        for q in range(size)])]
    for s, shape in enumerate(shapes):
        p = problem_gemv(size, rank, seed=20 + s, **shape)
        for mode in MODES:
            _expect_same(f"gemv_allreduce {shape} {mode}",
                         fusedcoll.gemv_allreduce(p.w, p.x, shape["k_splits"], mode), p.expected,
                         rank)


def case_embedding(rank, size):
    tables = 2 * size + 1
    configs = [
        dict(dim=8, pooling="sum", weighted=False, i32_indices=False),
        dict(dim=5, pooling="sum", weighted=True, i32_indices=True),
        dict(dim=4, pooling="mean", weighted=False, i32_indices=True),
    ]
    for c, config in enumerate(configs):
        # Rank 0 owns no table when there are several ranks; batch sizes differ per rank.
        owner = [(t % (size - 1)) + 1 if size > 1 else 0 for t in range(tables)]
        batch = [3 + q for q in range(size)]
        rows = [10 + 3 * t for t in range(tables)]
        p = problem_embedding(size, rank, table_rows=rows, owner=owner, batch_sizes=batch,
                              min_bag=0, max_bag=5, seed=30 + c, **config)
        psw = p.per_sample_weights if config["weighted"] else None
        for mode in MODES:
            got = fusedcoll.embedding_alltoall(p.weights, p.offsets, p.indices,
                                               dim=config["dim"], owner=owner, batch_sizes=batch,
                                               per_sample_weights=psw,
                                               pooling=config["pooling"], mode=mode)
            _expect_same(f"embedding_alltoall {config} {mode}", got, p.expected, rank)


def case_gemm(rank, size):
    experts = size + 1
    host = [(e + 1) % size for e in range(experts)]
    counts = [[(s * 7 + e * 3) % 5 for e in range(experts)] for s in range(size)]
    p = problem_gemm(size, rank, k=24, n=10, host=host, counts=counts, seed=40)
    for mode in MODES:
        got = fusedcoll.gemm_alltoall(p.a, p.w, k=24, n=10, host=host, counts=counts, mode=mode)
        _expect_same(f"gemm_alltoall {mode}", got, p.expected, rank)


BIT_EXACT_CASES = [case_all_reduce, case_all_to_all, case_reduce_scatter, case_all_gather,
                   case_broadcast, case_gemv, case_embedding, case_gemm]


# --- Errors that every rank sees ---------------------------------------------------------------

def _raises(what, exc_type, fn, *mentions):
    try:
        fn()
    except exc_type as exc:
        message = str(exc)
        for m in mentions:
            if m not in message:
                raise AssertionError(f"{what}: the message {message!r} does not mention {m!r}")
        return exc
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{what}: raised {type(exc).__name__} ({exc}), expected "
                             f"{exc_type.__name__}") from exc
    raise AssertionError(f"{what}: did not raise {exc_type.__name__}")


def case_errors(rank, size):
    """Bad input raises a Python exception with fusedcoll's message on every rank, and the
    communicator stays usable (each check is followed by a good call)."""
    good = torch.ones(4)

    def still_works():
        _expect_same("a good call after an error", fusedcoll.all_reduce(good),
                     torch.full((4,), float(size)), rank)

    _raises("float64 reduction", TypeError, lambda: fusedcoll.all_reduce(good.double()),
            "torch.float64", "reductions run on")
    _raises("float16 reduction", TypeError, lambda: fusedcoll.all_reduce(good.half()),
            "torch.float16")
    _raises("non-CPU tensor", TypeError,
            lambda: fusedcoll.all_reduce(torch.empty(4, device="meta")), "must be a CPU tensor",
            "meta")
    _raises("non-contiguous", ValueError,
            lambda: fusedcoll.all_reduce(torch.ones(4, 3).t()), "must be contiguous")
    _raises("sparse", TypeError, lambda: fusedcoll.all_reduce(torch.ones(2, 2).to_sparse()),
            "dense")
    _raises("bad op", ValueError, lambda: fusedcoll.all_reduce(good, "mean"), "'mean'")
    _raises("bad wire", ValueError, lambda: fusedcoll.all_reduce(good, wire="fp9"), "'fp9'")
    _raises("wire on int32", fusedcoll.InvalidArgument,
            lambda: fusedcoll.all_reduce(good.int(), wire="f16"), "needs f32")
    _raises("out of another dtype", TypeError,
            lambda: fusedcoll.all_reduce(good, out=torch.empty(4, dtype=torch.int32)), "out")
    if size > 1:
        _raises("uneven split", ValueError,
                lambda: fusedcoll.all_to_all(torch.ones(size * 2 + 1)), "do not split evenly")
    _raises("gemv float64", TypeError,
            lambda: fusedcoll.gemv_allreduce(torch.ones(2, 2, dtype=torch.float64),
                                             torch.ones(1, 2), [2] * size), "w", "torch.float64")
    _raises("bad mode", ValueError,
            lambda: fusedcoll.gemv_allreduce(torch.ones(2, 2), torch.ones(1, 2), [2] * size,
                                             "fused"), "'fused'")
    still_works()
    # Mismatches across ranks: fusedcoll's agreement check rejects them on every rank before any
    # data moves.
    if size > 1:
        _raises("all_reduce counts differ", fusedcoll.InvalidArgument,
                lambda: fusedcoll.all_reduce(torch.ones(3 + (rank == size - 1))),
                "disagree on the AllReduce count")
        still_works()
        _raises("all_gather shapes differ", fusedcoll.InvalidArgument,
                lambda: fusedcoll.all_gather(torch.ones(2 + (rank == 0), 3)))
        still_works()
        _raises("all_reduce ops differ", ValueError,
                lambda: fusedcoll.all_reduce(good, "sum" if rank else "max"), "op")
        still_works()
        _raises("gemv k_splits differ", ValueError,
                lambda: fusedcoll.gemv_allreduce(torch.ones(2, 2), torch.ones(1, 2),
                                                 [2] * (size - 1) + [2 + (rank == 0)]))
        still_works()
    _raises("gemv k_splits of the wrong length", ValueError,
            lambda: fusedcoll.gemv_allreduce(torch.ones(2, 2), torch.ones(1, 2), [2] * (size + 1)),
            "k_splits")
    still_works()
    # Each rank owns one table of 3 rows; its only index, 7, is out of range.
    _raises("embedding index out of range", fusedcoll.InvalidArgument,
            lambda: fusedcoll.embedding_alltoall(
                [torch.ones(3, 2)], [torch.tensor([0] + [1] * size)], [torch.tensor([7])],
                dim=2, owner=list(range(size)), batch_sizes=[1] * size), "7")
    still_works()


def run_rank_suite(suite, rank):
    """Runs a unittest suite on this rank of an MPI job and returns whether it passed. Rank 0
    reports as it goes; the others stay quiet unless they fail, so mpiexec's merged output reads
    as one report."""
    stream = sys.stderr if rank == 0 else io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=2).run(suite)
    if not result.wasSuccessful() and rank != 0:
        sys.stderr.write(f"--- rank {rank} ---\n{stream.getvalue()}")
    sys.stderr.flush()
    return result.wasSuccessful()
