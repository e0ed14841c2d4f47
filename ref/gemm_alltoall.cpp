// The oracle of GemmAllToAll: each expert multiplies the rows every source rank routed to it, and
// the products return to their source, experts in id order.

#include <cstring>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/ref.hpp"
#include "fusedcoll/detail/validate.hpp"

namespace fusedcoll::ref {

void gemm_alltoall(std::span<const GemmAllToAllArgs> ranks) {
  detail::check_world_calls(ranks);
  const int world = static_cast<int>(ranks.size());
  const auto& spec = ranks[0];
  const std::int64_t num_experts = static_cast<std::int64_t>(spec.host.size());
  const std::int64_t n = spec.n;
  auto count = [&](int s, std::int64_t e) { return spec.counts[s * num_experts + e]; };

  std::vector<std::vector<float>> result(world);
  for (int s = 0; s < world; ++s) result[s].assign(output_rows(spec, s) * n, 0.0f);

  // Where expert e's rows for source s start in s's output: after all lower-numbered experts.
  std::vector<std::int64_t> out_row(world, 0);
  std::vector<std::size_t> next_local(world, 0);
  for (std::int64_t e = 0; e < num_experts; ++e) {
    const int h = spec.host[e];
    const LocalExpert& ex = ranks[h].local_experts[next_local[h]++];
    const auto* a = static_cast<const float*>(ex.a.data());
    const auto* w = static_cast<const float*>(ex.w.data());
    std::int64_t a_row = 0;  // A_e's rows are grouped by source rank in rank order
    for (int s = 0; s < world; ++s) {
      const std::int64_t rows = count(s, e);
      if (rows > 0)
        detail::gemm_tile(a + a_row * ex.a.stride(0), ex.a.stride(0), w, ex.w.stride(0),
                          result[s].data() + out_row[s] * n, n, rows, n, spec.k);
      a_row += rows;
      out_row[s] += rows;
    }
  }

  for (int s = 0; s < world; ++s) {
    const TensorView& out = ranks[s].output;
    for (std::int64_t r = 0; r < output_rows(spec, s); ++r)
      if (n > 0)
        std::memcpy(static_cast<float*>(out.data()) + r * out.stride(0), result[s].data() + r * n,
                    n * sizeof(float));
  }
}

}  // namespace fusedcoll::ref
