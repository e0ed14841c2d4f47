"""fusedcoll for PyTorch: the fused computation-collective operators and the collectives of
fusedcoll as torch operators on CPU tensors (docs/pytorch.md).

Two ways to run SPMD code:

- MPI, one rank per process under ``mpiexec``::

      import fusedcoll
      fusedcoll.init()                       # MPI_Init_thread(MPI_THREAD_MULTIPLE) if needed
      y = fusedcoll.all_reduce(x, op="avg")  # torch.ops.fusedcoll.all_reduce underneath

- The emulator, P virtual ranks in one process (notebooks, unit tests)::

      def step(rank):
          return fusedcoll.all_reduce(torch.full((4,), float(rank)))
      results = fusedcoll.run(step, world_size=4)   # step(rank) on 4 threads

Every function here is also a torch operator (``torch.ops.fusedcoll.<name>``); these wrappers add
keyword defaults and raise fusedcoll's exception classes (``fusedcoll.InvalidArgument``, ...),
which derive from the built-in ones the operators raise (``ValueError``, ...).
"""

import atexit
import sys
import threading

from . import _errors
from ._errors import (BackendError, Error, InternalError, InvalidArgument, NotInitializedError,
                      ProtocolError, TimeoutError, UnsupportedError)
from ._library import LIBRARY_PATH, ops
from ._wire import Wire
from ._wire import as_wire as _wire

__all__ = [
    "init", "finalize", "is_initialized", "rank", "size", "backend", "has_backend", "barrier",
    "run", "Wire",
    "all_reduce", "all_reduce_", "all_to_all", "reduce_scatter", "all_gather", "broadcast",
    "broadcast_",
    "embedding_alltoall", "gemv_allreduce", "gemm_alltoall",
    "encode", "decode", "scale_for", "block_amax", "wire_max",
    "Error", "InvalidArgument", "UnsupportedError", "TimeoutError", "BackendError",
    "InternalError", "ProtocolError", "NotInitializedError", "LIBRARY_PATH",
]

_translated = _errors.translated


# --- Initialisation -----------------------------------------------------------------------------

class _State:
    lock = threading.Lock()
    mpi = False
    hooks_installed = False
    emu_defaults = {}


def _excepthook(previous):
    def hook(exc_type, value, tb):
        previous(exc_type, value, tb)
        try:
            who = ops.rank()
        except Exception:  # noqa: BLE001 (the report must not fail)
            who = "?"
        sys.stderr.write(f"fusedcoll mpi: rank {who}: {exc_type.__name__}: {value}\n")
        sys.stderr.flush()
        # As fusedcoll::mpi::run: one rank's failure ends the whole job, so that no peer waits
        # for it until its timeout, and no rank hangs in the collective teardown of finalize().
        ops.abort(1)
    return hook


@_translated
def init(backend="mpi", *, world_size=None, compute_units=None, max_resident_wgs=0,
         timeout=0.0, fuzz_seed=0, check_protocol=False, link_gbps=0.0, link_us=0.0,
         workgroups=0, initial_window_bytes=1 << 20, abort_on_exception=True):
    """Initialises fusedcoll for this process.

    ``backend="mpi"``: initialises MPI (``MPI_THREAD_MULTIPLE``) unless it already is, and
    creates the process's communicator over ``MPI_COMM_WORLD`` (``workgroups``,
    ``initial_window_bytes``: ``fusedcoll::mpi::Options``). ``finalize()`` runs at interpreter
    exit. With ``abort_on_exception`` an uncaught exception prints
    ``fusedcoll mpi: rank R: ...`` and aborts the whole job (``MPI_Abort``), as
    ``fusedcoll::mpi::run`` does. Calling it again is a no-op.

    ``backend="emu"``: sets the defaults of ``run`` (world size and the emulator's
    ``WorldOptions``); nothing starts until ``run``.
    """
    if backend == "mpi":
        with _State.lock:
            ops.init_mpi(workgroups, initial_window_bytes)
            _State.mpi = True
            if not _State.hooks_installed:
                _State.hooks_installed = True
                atexit.register(finalize)
                if abort_on_exception:
                    sys.excepthook = _excepthook(sys.excepthook)
        return
    if backend == "emu":
        if not has_backend("emu"):
            raise UnsupportedError("this build of fusedcoll has no emulator (FUSEDCOLL_BUILD_EMU)")
        _State.emu_defaults = {k: v for k, v in dict(
            world_size=world_size, compute_units=compute_units, max_resident_wgs=max_resident_wgs,
            timeout=timeout, fuzz_seed=fuzz_seed, check_protocol=check_protocol,
            link_gbps=link_gbps, link_us=link_us).items() if v is not None}
        return
    raise InvalidArgument(f"fusedcoll.init: backend '{backend}' is not one of 'mpi', 'emu'")


@_translated
def finalize():
    """Frees the MPI communicator (collective: every rank calls it) and finalises MPI if
    fusedcoll initialised it. Runs at interpreter exit after ``init()``; later calls are no-ops."""
    ops.finalize()


def is_initialized():
    """True after ``init("mpi")`` until ``finalize()``; on an emulated rank, inside ``run``."""
    return ops.backend() != "none"


@_translated
def rank():
    """This rank: the MPI rank, or the emulated rank the calling thread of ``run`` stands for."""
    return ops.rank()


@_translated
def size():
    """Number of ranks of the calling thread's world."""
    return ops.size()


def backend():
    """``"emu"`` on a thread of ``run``, ``"mpi"`` after ``init()``, else ``"none"``."""
    return ops.backend()


def has_backend(name):
    """True when this build has the backend ``name`` (``"emu"`` or ``"mpi"``)."""
    return ops.has_backend(name)


@_translated
def barrier():
    """Returns once every rank has entered the barrier."""
    ops.barrier()


# --- The emulator: SPMD on threads --------------------------------------------------------------

_EMU_DEFAULTS = dict(world_size=4, compute_units=4, max_resident_wgs=0, timeout=0.0, fuzz_seed=0,
                     check_protocol=False, link_gbps=0.0, link_us=0.0)


def run(fn, world_size=None, **options):
    """Runs ``fn(rank)`` SPMD and returns the list of results, index = rank.

    Without an MPI communicator (or with ``world_size`` given), on the emulator: one
    ``emu::World`` of ``world_size`` virtual GPUs for this call, ``fn(rank)`` on one Python thread
    per rank, each thread's fusedcoll calls running on its rank (``rank()`` and ``size()`` answer
    for it). Options (defaults from ``init("emu", ...)``, else the emulator's): ``compute_units``,
    ``max_resident_wgs``, ``timeout`` (seconds; 0: ``FUSEDCOLL_TIMEOUT``), ``fuzz_seed``,
    ``check_protocol``, ``link_gbps``, ``link_us`` (docs/emulator.md).

    If a rank fails (a fusedcoll call or ``fn`` itself raises), the other ranks' waits are
    aborted, nothing hangs, and ``run`` raises the root cause: the exception of the first rank
    that failed.

    After ``init("mpi")`` and without ``world_size``: ``fn(rank())`` in this process; the list
    holds its result at this rank's index and None elsewhere.
    """
    unknown = set(options) - set(_EMU_DEFAULTS)
    if unknown:
        raise TypeError(f"fusedcoll.run: unknown options {sorted(unknown)}")
    if world_size is None and not options and _State.mpi and ops.backend() == "mpi":
        results = [None] * size()
        results[rank()] = fn(rank())
        return results
    return _run_emulated(fn, world_size, options)


@_translated
def _emu_start(o):
    ops._emu_start(int(o["world_size"]), int(o["compute_units"]), int(o["max_resident_wgs"]),
                   float(o["timeout"]), int(o["fuzz_seed"]), bool(o["check_protocol"]),
                   float(o["link_gbps"]), float(o["link_us"]))


def _run_emulated(fn, world_size, options):
    if not has_backend("emu"):
        raise UnsupportedError("fusedcoll.run: this build has no emulator (FUSEDCOLL_BUILD_EMU)")
    o = dict(_EMU_DEFAULTS)
    o.update(_State.emu_defaults)
    o.update(options)
    if world_size is not None:
        o["world_size"] = world_size
    _emu_start(o)
    count = int(o["world_size"])
    results = [None] * count
    errors = [None] * count

    def body(r):
        failed, message = False, ""
        try:
            ops._emu_attach(r)
            results[r] = fn(r)
        except BaseException as exc:  # noqa: BLE001 (handed to the caller below)
            error = _errors.from_operator(exc) if not isinstance(exc, Error) else None
            errors[r] = error if error is not None else exc
            failed, message = True, f"{type(exc).__name__}: {exc}"
        finally:
            ops._emu_detach(r, failed, message)

    threads = [threading.Thread(target=body, args=(r,), name=f"fusedcoll-rank-{r}", daemon=True)
               for r in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    root, code, message = ops._emu_finish()
    if code != 0:
        if 0 <= root < count and errors[root] is not None:
            raise errors[root]
        raise _errors.from_code(code, message)
    first = next((e for e in errors if e is not None), None)
    if first is not None:  # a rank raised without the World failing (it cannot; kept as a guard)
        raise first
    return results


# --- Collectives --------------------------------------------------------------------------------

@_translated
def all_reduce(tensor, op="sum", *, algo="direct", wire=None, out=None):
    """AllReduce (``op``: ``"sum"``, ``"avg"``, ``"min"``, ``"max"``; ``algo``: ``"direct"``,
    ``"ring"``, ``"chain"``) of a float32, int32 or int64 tensor; returns a new tensor, or ``out``
    (which may be ``tensor`` itself: in place). ``wire``: compression of what travels (float32
    only); with it, ``"chain"`` encodes the running value at every rank (docs/semantics.md)."""
    w = _wire(wire).args()
    if out is None:
        return ops.all_reduce(tensor, op, algo, *w)
    return ops.all_reduce.out(tensor, op, algo, *w, out=out)


@_translated
def all_reduce_(tensor, op="sum", *, algo="direct", wire=None):
    """``all_reduce`` in place; returns ``tensor``."""
    return ops.all_reduce_(tensor, op, algo, *_wire(wire).args())


@_translated
def all_to_all(tensor, send_counts=None, recv_counts=None, *, wire=None, out=None):
    """All-to-All(v) along dimension 0: rank r sends rows ``send_counts[q]`` (in order) to rank q.
    Without counts, ``tensor.shape[0]`` splits evenly. Given ``send_counts`` but no
    ``recv_counts``, the ranks exchange their counts first (one more small All-to-All).
    Returns the received rows, peers in rank order."""
    w = _wire(wire).args()
    if out is None:
        return ops.all_to_all(tensor, send_counts, recv_counts, *w)
    return ops.all_to_all.out(tensor, send_counts, recv_counts, *w, out=out)


@_translated
def reduce_scatter(tensor, counts=None, op="sum", *, wire=None, out=None):
    """ReduceScatter along dimension 0: rank q receives the reduction of rows
    ``[sum(counts[:q]), + counts[q])`` (even split without ``counts``). In place when ``out`` is
    that slice of ``tensor``."""
    w = _wire(wire).args()
    if out is None:
        return ops.reduce_scatter(tensor, counts, op, *w)
    return ops.reduce_scatter.out(tensor, counts, op, *w, out=out)


@_translated
def all_gather(tensor, counts=None, *, wire=None, out=None):
    """AllGather along dimension 0: every rank's rows concatenated in rank order. ``counts``:
    every rank's row count (default: all equal to this rank's). In place when ``tensor`` is this
    rank's slice of ``out``. A 0-dimensional tensor gathers into a vector of P elements."""
    w = _wire(wire).args()
    if out is None:
        return ops.all_gather(tensor, counts, *w)
    return ops.all_gather.out(tensor, counts, *w, out=out)


@_translated
def broadcast(tensor, root=0, *, out=None):
    """Broadcast of ``root``'s tensor; every rank passes a tensor of the same shape and dtype
    (read on the root only). Returns a new tensor, or ``out``."""
    if out is None:
        return ops.broadcast(tensor, root)
    return ops.broadcast.out(tensor, root, out=out)


@_translated
def broadcast_(tensor, root=0):
    """``broadcast`` in place; returns ``tensor``."""
    return ops.broadcast_(tensor, root)


# --- The fused operators ------------------------------------------------------------------------

@_translated
def embedding_alltoall(weights, offsets, indices, *, dim, owner, batch_sizes,
                       per_sample_weights=None, pooling="sum", mode="scale_up"):
    """EmbeddingAllToAll (docs/semantics.md): pooled lookups of this rank's tables (``weights``,
    ``offsets``, ``indices``: one entry per local table, in increasing table id) over the global
    batch, then the All-to-All; returns ``[batch_sizes[rank], len(owner), dim]``."""
    psw = [] if per_sample_weights is None else list(per_sample_weights)
    return ops.embedding_alltoall(list(weights), list(offsets), list(indices), psw, dim,
                                  list(owner), list(batch_sizes), pooling, mode)


@_translated
def gemv_allreduce(w, x, k_splits, mode="scale_up"):
    """GemvAllReduce: ``y = sum over ranks of x_p @ W_p^T`` in rank order; ``w`` is this rank's
    ``[N, K_p]``, ``x`` its ``[M, K_p]``; returns ``y [M, N]`` on every rank."""
    return ops.gemv_allreduce(w, x, list(k_splits), mode)


@_translated
def gemm_alltoall(a, w, *, k, n, host, counts, mode="scale_up"):
    """GemmAllToAll: this rank's experts' GEMMs (``a``, ``w``: one per local expert, increasing
    id), each output row sent back to the rank that routed it; returns this rank's rows
    ``[sum_e counts[rank][e], n]``. ``counts``: the P x E routing matrix, flat or nested."""
    flat = [int(c) for row in counts for c in (row if isinstance(row, (list, tuple)) else [row])]
    return ops.gemm_alltoall(list(a), list(w), k, n, list(host), flat, mode)


# --- Codecs -------------------------------------------------------------------------------------

@_translated
def encode(tensor, format, scale=None, overflow="saturate"):
    """fusedcoll's encoder: float32 -> ``format`` (torch.float16 for f16, torch.bfloat16 for
    bf16, torch.uint8 for the FP8 formats), optionally of ``tensor * scale``."""
    return ops.encode(tensor, format, scale, overflow)


@_translated
def decode(payload, format, scale=None):
    """fusedcoll's decoder: ``format`` -> float32, optionally divided by ``scale``."""
    return ops.decode(payload, format, scale)


@_translated
def scale_for(format, amax, headroom=1.0, pow2=False):
    """The scale that maps ``amax * headroom`` onto the format's largest value
    (docs/compression.md, "Scaling")."""
    return ops.scale_for(format, float(amax), float(headroom), bool(pow2))


@_translated
def block_amax(tensor, block=0):
    """Absolute maximum per block of ``block`` elements (one block when ``block <= 0``)."""
    return ops.block_amax(tensor, block)


@_translated
def wire_max(format):
    """Largest finite value of ``format``."""
    return ops.wire_max(format)

