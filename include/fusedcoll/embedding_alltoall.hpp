#pragma once
/// @file
/// EmbeddingAllToAll: pooled embedding-bag lookups over table-wise sharded tables, followed by the
/// All-to-All that hands every rank the pooled vectors of its own samples (DLRM forward).
///
/// Definition (docs/semantics.md, "EmbeddingAllToAll", is normative):
/// - `T = owner.size()` tables of width `D = dim`; table `t` lives on rank `owner[t]`.
/// - The global batch `B = sum(batch_sizes)` is split into contiguous ranges; rank `q` owns samples
///   `[start_q, start_q + batch_sizes[q])` with `start_q = sum(batch_sizes[0..q))`.
/// - For table `t`, bag `b` is `indices[offsets[b] .. offsets[b+1])` (CSR over the global batch).
///   pooled(t, b)[d] = sum over j in bag order of (w_j * row(indices[j])[d]) (or row[d] without
///   weights), starting from +0.0f, every product and sum rounded separately (no FMA); `mean`
///   divides that sum by the bag length (an empty bag pools to +0.0f in both modes).
/// - Output on rank `q`: `output[i][t][d] = pooled(t, start_q + i)[d]`, shape `[B_q, T, D]`.

#include <cstdint>
#include <vector>

#include "fusedcoll/error.hpp"
#include "fusedcoll/tensor.hpp"

namespace fusedcoll {

/// How a bag's rows are combined.
enum class PoolingMode : std::uint8_t {
  sum = 0,   ///< Sum of the (optionally weighted) rows.
  mean = 1,  ///< Sum divided by the bag length; weights are not allowed.
};

/// Name of a pooling mode ("sum" or "mean").
constexpr const char* to_string(PoolingMode m) noexcept {
  return m == PoolingMode::sum ? "sum" : (m == PoolingMode::mean ? "mean" : "invalid");
}

/// One table held by the calling rank, with its bags over the *global* batch.
struct EmbeddingTableShard {
  /// `[rows, D]`, f32, unit inner stride (rows may be padded).
  ConstTensorView weights;
  /// `[B + 1]`, i32 or i64, non-decreasing, `offsets[0] == 0`, `offsets[B] == indices.size(0)`.
  ConstTensorView offsets;
  /// `[offsets[B]]`, same dtype as `offsets`, every value in `[0, rows)`.
  ConstTensorView indices;
  /// Absent (a default-constructed view), or `[offsets[B]]` f32: one weight per index. Only with
  /// `PoolingMode::sum`. Any view that is not default-constructed counts as present.
  ConstTensorView per_sample_weights;
};

/// Arguments of one rank's call. The fields above `local_tables` describe the global problem and
/// must be identical on every rank; a difference is reported as `InvalidArgument`.
struct EmbeddingAllToAllArgs {
  /// Width `D` of every table.
  std::int64_t dim = 0;
  /// `[T]`: the rank owning each table. Any placement; a rank may own no table.
  std::vector<int> owner;
  /// `[P]`: number of samples of each rank's batch range (may differ, may be 0).
  std::vector<std::int64_t> batch_sizes;
  PoolingMode pooling = PoolingMode::sum;
  /// The tables this rank owns, in increasing table id (`owner[t] == rank`).
  std::vector<EmbeddingTableShard> local_tables;
  /// `[batch_sizes[rank], T, D]` f32, unit inner stride. Must not overlap any input of this rank
  /// (checked).
  TensorView output;
};

/// Throws `InvalidArgument` (naming the offending value) unless `args` is a valid call for
/// `rank` of `world_size`. Validates every index and offset, so it reads all of them once.
void check(const EmbeddingAllToAllArgs& args, int rank, int world_size);

/// Non-throwing form of `check`.
Status can_implement(const EmbeddingAllToAllArgs& args, int rank, int world_size) noexcept;

/// Throws `InvalidArgument` unless `a` and `b` (the calls of ranks `rank_a` and `rank_b`) agree on
/// the global problem: `dim`, `owner`, `batch_sizes` and `pooling`.
void check_consistent(const EmbeddingAllToAllArgs& a, int rank_a, const EmbeddingAllToAllArgs& b,
                      int rank_b);

/// Bytes this rank sends to other ranks (pooled vectors for their samples) in one call.
std::int64_t bytes_sent(const EmbeddingAllToAllArgs& args, int rank);

}  // namespace fusedcoll
