#pragma once
/// @file
/// GemvAllReduce: the row-parallel linear layer of a tensor-parallel Transformer at decode time.
///
/// Definition (docs/semantics.md, "GemvAllReduce", is normative):
/// - Global `W [N, K]` and `x [M, K]`, `M` in `[0, 16]`. `K` is split into contiguous ranges:
///   rank `p` holds columns `[k0_p, k0_p + k_splits[p])` as `W_p [N, K_p]` and `x_p [M, K_p]`.
/// - partial_p[m][n] = sum over k in increasing order of (x_p[m][k] * W_p[n][k]), starting from
///   +0.0f, every product and sum rounded separately (no FMA).
/// - y[m][n] = ((partial_0 + partial_1) + partial_2) + ... in rank order (the `direct` AllReduce
///   order); with one rank, y = partial_0. Every rank receives the same `y [M, N]`.

#include <cstdint>
#include <vector>

#include "fusedcoll/error.hpp"
#include "fusedcoll/tensor.hpp"

namespace fusedcoll {

/// Largest `M` (rows of `x`) the GEMV kernels accept; beyond it the problem is a GEMM.
inline constexpr std::int64_t kMaxGemvRows = 16;

/// Arguments of one rank's call. `m`, `n` and `k_splits` must be identical on every rank.
struct GemvAllReduceArgs {
  /// Rows of `x` and `y` (the decode batch), `0 <= m <= kMaxGemvRows`.
  std::int64_t m = 0;
  /// Output features `N` (rows of `W`).
  std::int64_t n = 0;
  /// `[P]`: `K_p`, the reduction columns held by each rank (uneven and zero allowed).
  std::vector<std::int64_t> k_splits;
  /// `[N, K_rank]` f32, unit inner stride.
  ConstTensorView w;
  /// `[M, K_rank]` f32, unit inner stride.
  ConstTensorView x;
  /// `[M, N]` f32, unit inner stride. Must not overlap `w` or `x` (checked).
  TensorView y;
};

/// Throws `InvalidArgument` (naming the offending value) unless `args` is a valid call for `rank`.
void check(const GemvAllReduceArgs& args, int rank, int world_size);

/// Non-throwing form of `check`.
Status can_implement(const GemvAllReduceArgs& args, int rank, int world_size) noexcept;

/// Throws `InvalidArgument` unless two ranks' calls agree on `m`, `n` and `k_splits`.
void check_consistent(const GemvAllReduceArgs& a, int rank_a, const GemvAllReduceArgs& b, int rank_b);

/// Bytes one rank sends in the direct algorithm, where rank `p` owns output columns
/// `chunk_of(N, P, p)`: its partial of every other owner's chunk, then its reduced chunk to every
/// other rank.
std::int64_t bytes_sent(const GemvAllReduceArgs& args, int rank);

}  // namespace fusedcoll
