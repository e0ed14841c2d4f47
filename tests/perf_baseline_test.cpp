// The baseline of `fusedcoll-perf --backend gpu` (bench/perf_baseline.hpp) run on the CPU: the
// plan of copies and folds that the GPU runs with its copy engines and a fold kernel, element by
// element as the device computes it, against ref/ without compression. The device run is the
// gpu build's perf_gpu_*_smoke tests.

#include "perf_baseline.hpp"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "perf_common.hpp"

namespace {

namespace fc = fusedcoll;

struct Case {
  std::string op;
  fc::ReduceOp redop;
  int root;
};

class PerfBaseline : public ::testing::TestWithParam<std::tuple<Case, int>> {};

TEST_P(PerfBaseline, HostRunOfThePlanEqualsRef) {
  const auto& [k, P] = GetParam();
  perf::Options o;
  o.op = k.op;
  o.redop = k.redop;
  o.root = k.root % P;
  o.ranks = P;
  // Sizes whose pieces do not divide evenly, and the smallest size.
  for (const std::int64_t bytes : {std::int64_t{4} * P, std::int64_t{4} * 1031 * P + 12}) {
    const auto c =
        perf::make_collective(o, P, perf::collective_bytes(bytes, P), fc::ValueMode::random);
    std::vector<std::vector<float>> expect, exact;
    perf::prepare_check(*c, o, expect, exact);  // poisons the receive buffers
    perf::run_on_host(perf::baseline_plan(o, *c, P), o, *c);
    perf::Errors err;
    for (int r = 0; r < P; ++r) perf::check_rank(*c, r, expect, exact, err);
    EXPECT_EQ(err.wrong, 0) << o.op << " " << fc::to_string(o.redop) << " P " << P << " bytes "
                            << bytes;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, PerfBaseline,
    ::testing::Combine(::testing::Values(Case{"allreduce", fc::ReduceOp::sum, 0},
                                         Case{"allreduce", fc::ReduceOp::avg, 0},
                                         Case{"allreduce", fc::ReduceOp::max, 0},
                                         Case{"reducescatter", fc::ReduceOp::sum, 0},
                                         Case{"reducescatter", fc::ReduceOp::min, 0},
                                         Case{"alltoall", fc::ReduceOp::sum, 0},
                                         Case{"allgather", fc::ReduceOp::sum, 0},
                                         Case{"broadcast", fc::ReduceOp::sum, 2}),
                       ::testing::Values(1, 2, 3, 4, 7)),
    [](const auto& test) {
      const Case& k = std::get<0>(test.param);
      return k.op + "_" + fc::to_string(k.redop) + "_P" + std::to_string(std::get<1>(test.param));
    });

}  // namespace
