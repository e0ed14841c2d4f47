"""Test helpers: fusedcoll's seeded inputs, its operator problems with their ``ref/`` results,
and byte comparison. A Python test builds its inputs here, runs the distributed call, and
compares the bytes of every output with what ``ref/`` computed (``same_bits``)."""

from collections import namedtuple

import torch

from . import _errors
from ._library import ops

__all__ = ["fill_values_", "seeded", "same_bits", "problem_gemv", "problem_embedding",
           "problem_gemm", "GemvProblem", "EmbeddingProblem", "GemmProblem"]


@_errors.translated
def fill_values_(tensor, seed, stream, rank, values="random"):
    """Fills ``tensor`` with the C++ suites' values (``fusedcoll::fill_values``): a pure function
    of (seed, stream, rank, element index). ``values="random"``: floats in (-2, 2) with random
    mantissas and exponents, so that a wrong summation order shows in the bits; ``"integer"``:
    small integers, exact in any order."""
    return ops.fill_values_(tensor, seed, stream, rank, values)


def seeded(shape, dtype=torch.float32, *, seed=1, stream=0, rank=0, values="random"):
    """A new tensor filled by ``fill_values_``."""
    return fill_values_(torch.empty(shape, dtype=dtype), seed, stream, rank, values)


def same_bits(a, b):
    """True when ``a`` and ``b`` have the same dtype, shape and bytes (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                       b.contiguous().reshape(-1).view(torch.uint8))


GemvProblem = namedtuple("GemvProblem", "w x expected")
EmbeddingProblem = namedtuple("EmbeddingProblem",
                              "weights offsets indices per_sample_weights expected")
GemmProblem = namedtuple("GemmProblem", "a w expected")


@_errors.translated
def problem_gemv(world_size, rank, *, m, n, k_splits, seed=7, values="random"):
    """Rank ``rank``'s ``w [N, K_rank]`` and ``x [M, K_rank]`` of a ``fusedcoll::GemvProblem``,
    and its ``y`` as ``ref::gemv_allreduce`` computes it over the whole world."""
    return GemvProblem(*ops.problem_gemv(world_size, rank, m, n, list(k_splits), seed, values))


@_errors.translated
def problem_embedding(world_size, rank, *, dim, table_rows, owner, batch_sizes, pooling="sum",
                      min_bag=0, max_bag=8, weighted=False, i32_indices=False, seed=7,
                      values="random"):
    """Rank ``rank``'s tables, offsets, indices and weights of a ``fusedcoll::EmbeddingProblem``
    and its output as ``ref::embedding_alltoall`` computes it."""
    return EmbeddingProblem(*ops.problem_embedding(
        world_size, rank, dim, list(table_rows), list(owner), list(batch_sizes), pooling, min_bag,
        max_bag, weighted, i32_indices, seed, values))


@_errors.translated
def problem_gemm(world_size, rank, *, k, n, host, counts, seed=7, values="random"):
    """Rank ``rank``'s experts (``a``, ``w``) of a ``fusedcoll::GemmProblem`` with routing
    ``counts`` (P x E, flat or nested) and its output as ``ref::gemm_alltoall`` computes it."""
    flat = [int(c) for row in counts for c in (row if isinstance(row, (list, tuple)) else [row])]
    return GemmProblem(*ops.problem_gemm(world_size, rank, k, n, list(host), flat, seed, values))
