// The oracle of GemvAllReduce: every rank's partial product over its K range, then the sum of the
// partials in rank order (the `direct` AllReduce order), given to every rank.

#include <cstring>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/ref.hpp"
#include "fusedcoll/detail/validate.hpp"

namespace fusedcoll::ref {

void gemv_allreduce(std::span<const GemvAllReduceArgs> ranks) {
  detail::check_world_calls(ranks);
  const int world = static_cast<int>(ranks.size());
  const std::int64_t m = ranks[0].m;
  const std::int64_t n = ranks[0].n;

  std::vector<std::vector<float>> partial(world, std::vector<float>(m * n));
  for (int p = 0; p < world; ++p) {
    const auto& a = ranks[p];
    detail::gemv_rows(static_cast<const float*>(a.w.data()), a.w.stride(0),
                      static_cast<const float*>(a.x.data()), a.x.stride(0), m,
                      a.k_splits[p], 0, n, partial[p].data(), n);
  }

  // The fold starts from partial_0 itself, not from zero: ((p0 + p1) + p2) + ...
  std::vector<float> y = partial[0];
  for (int p = 1; p < world; ++p)
    detail::reduce_into(y.data(), partial[p].data(), m * n, DType::f32, ReduceOp::sum);

  for (int q = 0; q < world; ++q) {
    const TensorView& out = ranks[q].y;
    for (std::int64_t i = 0; i < m; ++i)
      if (n > 0)
        std::memcpy(static_cast<float*>(out.data()) + i * out.stride(0), y.data() + i * n,
                    n * sizeof(float));
  }
}

}  // namespace fusedcoll::ref
