// The oracle of EmbeddingAllToAll: pool every (table, sample) bag on its owner, then place it in
// the output of the rank that owns the sample. Written for reading, not for speed; the pooling
// itself is the shared kernel so that its bits are the ones every backend produces.

#include <cstring>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/ref.hpp"
#include "fusedcoll/detail/validate.hpp"

namespace fusedcoll::ref {

void embedding_alltoall(std::span<const EmbeddingAllToAllArgs> ranks) {
  detail::check_world_calls(ranks);
  const int world = static_cast<int>(ranks.size());
  const auto& spec = ranks[0];
  const std::int64_t num_tables = static_cast<std::int64_t>(spec.owner.size());
  const std::int64_t dim = spec.dim;

  std::vector<std::int64_t> batch_start(world + 1, 0);
  for (int q = 0; q < world; ++q) batch_start[q + 1] = batch_start[q] + spec.batch_sizes[q];

  // Results go to dense scratch first: an output may alias another rank's input.
  std::vector<std::vector<float>> result(world);
  for (int q = 0; q < world; ++q) result[q].assign(spec.batch_sizes[q] * num_tables * dim, 0.0f);

  for (int p = 0; p < world; ++p) {
    std::size_t local = 0;
    for (std::int64_t t = 0; t < num_tables; ++t) {
      if (spec.owner[t] != p) continue;
      const EmbeddingTableShard& shard = ranks[p].local_tables[local++];
      const auto* table = static_cast<const float*>(shard.weights.data());
      const std::int64_t table_stride = shard.weights.stride(0);
      const auto* weights = static_cast<const float*>(shard.per_sample_weights.data());
      for (int q = 0; q < world; ++q) {
        // Row i of rank q's output holds all T tables; table t starts at column t * D.
        float* out = result[q].data() + t * dim;
        const std::int64_t out_stride = num_tables * dim;
        if (shard.offsets.dtype() == DType::i64) {
          detail::embedding_bag_rows(table, table_stride, dim,
                                     static_cast<const std::int64_t*>(shard.offsets.data()),
                                     static_cast<const std::int64_t*>(shard.indices.data()),
                                     weights, spec.pooling, batch_start[q], batch_start[q + 1],
                                     out, out_stride);
        } else {
          detail::embedding_bag_rows(table, table_stride, dim,
                                     static_cast<const std::int32_t*>(shard.offsets.data()),
                                     static_cast<const std::int32_t*>(shard.indices.data()),
                                     weights, spec.pooling, batch_start[q], batch_start[q + 1],
                                     out, out_stride);
        }
      }
    }
  }

  for (int q = 0; q < world; ++q) {
    const TensorView& out = ranks[q].output;
    auto* base = static_cast<float*>(out.data());
    for (std::int64_t i = 0; i < spec.batch_sizes[q]; ++i)
      for (std::int64_t t = 0; t < num_tables; ++t)
        if (dim > 0)
          std::memcpy(base + i * out.stride(0) + t * out.stride(1),
                      result[q].data() + (i * num_tables + t) * dim, dim * sizeof(float));
  }
}

}  // namespace fusedcoll::ref
