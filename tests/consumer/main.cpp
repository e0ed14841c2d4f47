// Consumer of an installed fusedcoll: runs GemvAllReduce on a 2-rank world through the public
// headers and checks the result against a plain loop. Returns nonzero on any failure.

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "fusedcoll/fusedcoll.hpp"

int main() {
  try {
    if (std::strncmp(fusedcoll::kVersion, "0.", 2) != 0) {
      std::fprintf(stderr, "unexpected version %s\n", fusedcoll::kVersion);
      return 1;
    }
    fusedcoll::GemvProblem pb;
    pb.world_size = 2;
    pb.m = 2;
    pb.n = 5;
    pb.k_splits = {3, 4};
    pb.values = fusedcoll::ValueMode::integer;  // every sum exact: compare with ==
    pb.seed = 7;
    auto world = fusedcoll::make_world(pb);
    auto args = fusedcoll::args_of(world);
    fusedcoll::ref::gemv_allreduce(args);

    // y[m][n] = sum over the global k of x[m][k] * W[n][k], each rank holding a K range.
    int failures = 0;
    for (std::int64_t m = 0; m < pb.m; ++m) {
      for (std::int64_t n = 0; n < pb.n; ++n) {
        double expect = 0;
        for (int p = 0; p < pb.world_size; ++p) {
          const std::int64_t kp = pb.k_splits[p];
          for (std::int64_t j = 0; j < kp; ++j)
            expect += double{world[p].x[m * kp + j]} * double{world[p].w[n * kp + j]};
        }
        for (int p = 0; p < pb.world_size; ++p) {
          const float got = world[p].y[m * pb.n + n];
          if (got != static_cast<float>(expect)) {
            std::fprintf(stderr, "rank %d y[%lld][%lld] = %g, expected %g\n", p,
                         static_cast<long long>(m), static_cast<long long>(n), got, expect);
            ++failures;
          }
        }
      }
    }
    // A bad call must raise the library's exception type.
    args[1].m = 17;
    try {
      fusedcoll::ref::gemv_allreduce(args);
      std::fprintf(stderr, "m = 17 was accepted\n");
      ++failures;
    } catch (const fusedcoll::InvalidArgument&) {
    }
    if (failures == 0) std::printf("consumer: fusedcoll %s OK\n", fusedcoll::kVersion);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 2;
  }
}
