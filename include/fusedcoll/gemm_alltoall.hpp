#pragma once
/// @file
/// GemmAllToAll: MoE expert computation fused with the combine All-to-All.
///
/// Definition (docs/semantics.md, "GemmAllToAll", is normative):
/// - `E = host.size()` experts; expert `e` lives on rank `host[e]` with weights `W_e [K, N]`.
/// - `counts[s * E + e]` = c[s][e] is the number of rows source rank `s` routed to expert `e`;
///   every rank knows the whole matrix.
/// - The host of `e` holds `A_e [sum_s c[s][e], K]`, rows grouped by source rank in rank order.
/// - C_e[r][n] = sum over k in increasing order of (A_e[r][k] * W_e[k][n]), starting from +0.0f,
///   every product and sum rounded separately (no FMA).
/// - Output on rank `s`: `[sum_e c[s][e], N]`: the rows of C_e that came from `s`, experts in
///   increasing id, rows in their original order within an expert.

#include <cstdint>
#include <vector>

#include "fusedcoll/error.hpp"
#include "fusedcoll/tensor.hpp"

namespace fusedcoll {

/// One expert held by the calling rank.
struct LocalExpert {
  /// `[sum_s c[s][e], K]` f32, unit inner stride, rows grouped by source rank.
  ConstTensorView a;
  /// `[K, N]` f32, unit inner stride.
  ConstTensorView w;
};

/// Arguments of one rank's call. `k`, `n`, `host` and `counts` must be identical on every rank.
struct GemmAllToAllArgs {
  /// Reduction dimension `K`.
  std::int64_t k = 0;
  /// Output features `N`.
  std::int64_t n = 0;
  /// `[E]`: the rank hosting each expert. Any placement; a rank may host none.
  std::vector<int> host;
  /// `[P * E]`, row-major c[s][e] >= 0.
  std::vector<std::int64_t> counts;
  /// The experts this rank hosts, in increasing expert id (`host[e] == rank`).
  std::vector<LocalExpert> local_experts;
  /// `[sum_e c[rank][e], N]` f32, unit inner stride. Must not overlap any input of this rank (checked).
  TensorView output;
};

/// Throws `InvalidArgument` (naming the offending value) unless `args` is a valid call for `rank`.
void check(const GemmAllToAllArgs& args, int rank, int world_size);

/// Non-throwing form of `check`.
Status can_implement(const GemmAllToAllArgs& args, int rank, int world_size) noexcept;

/// Throws `InvalidArgument` unless two ranks' calls agree on `k`, `n`, `host` and `counts`.
void check_consistent(const GemmAllToAllArgs& a, int rank_a, const GemmAllToAllArgs& b, int rank_b);

/// Rows rank `s` receives in total: sum_e c[s][e].
std::int64_t output_rows(const GemmAllToAllArgs& args, int rank);

/// Bytes this rank sends to other ranks (expert outputs of their rows) in one call.
std::int64_t bytes_sent(const GemmAllToAllArgs& args, int rank);

}  // namespace fusedcoll
