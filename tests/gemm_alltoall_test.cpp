// ref::gemm_alltoall against an independent Eigen computation per expert (C_e = A_e * W_e in
// double, rows regrouped by source rank). Tolerance (tests/common/eigen_ref.hpp):
// |err| <= (K + 2) * 2^-23 * sum_k |A[r][k] * W[k][n]|; exact in ValueMode::integer.
// Plus the fused/unfused identity: detail::gemm_tile per expert, ref::all_to_allv with counts
// derived from the routing matrix, then a reorder.

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/eigen_ref.hpp"
#include "common/worlds.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace {

using fusedcoll::GemmProblem;
using fusedcoll::ValueMode;

struct GemmCase {
  std::string name;
  GemmProblem pb;
};

std::ostream& operator<<(std::ostream& os, const GemmCase& c) { return os << c.name; }

std::vector<GemmCase> grid_cases() {
  std::vector<GemmCase> cases;
  const fctest::Placement placements[] = {fctest::Placement::round_robin,
                                          fctest::Placement::all_on_rank0,
                                          fctest::Placement::odd_ranks_only,
                                          fctest::Placement::reversed_blocks};
  std::uint64_t seed = 700;
  int i = 0;
  for (int P : fctest::kWorldSizes) {
    for (auto placement : placements) {
      for (ValueMode values : {ValueMode::random, ValueMode::integer}) {
        GemmProblem pb;
        pb.world_size = P;
        pb.k = 5 + (i % 4) * 6;
        pb.n = 3 + (i % 3) * 4;
        pb.host = fctest::place(P + 1, P, placement);  // E = P + 1 experts
        pb.values = values;
        pb.seed = ++seed;
        pb.random_routing(3);  // counts in [0, 3]: zeros are common
        if (P > 1 && i % 2 == 0) {
          // Source rank P - 1 routes nothing anywhere.
          for (std::int64_t e = 0; e < pb.num_experts(); ++e) pb.counts[(P - 1) * pb.num_experts() + e] = 0;
        }
        std::ostringstream name;
        name << "P" << P << "_" << fctest::placement_name(placement) << "_K" << pb.k << "_N"
             << pb.n << "_" << (values == ValueMode::random ? "rand" : "int")
             << (P > 1 && i % 2 == 0 ? "_silent_src" : "");
        cases.push_back({name.str(), pb});
        ++i;
      }
    }
  }
  auto edge = [&](std::string name, GemmProblem pb) {
    pb.seed = ++seed;
    cases.push_back({std::move(name), std::move(pb)});
  };
  {
    GemmProblem pb;
    pb.world_size = 3;
    pb.k = 0;  // C = +0 everywhere
    pb.n = 4;
    pb.host = {2, 0, 2};
    pb.counts = {1, 0, 2, /**/ 3, 1, 0, /**/ 0, 2, 1};
    edge("K0_P3", pb);
  }
  {
    GemmProblem pb;
    pb.world_size = 4;
    pb.k = 6;
    pb.n = 0;  // outputs are [rows, 0]
    pb.host = {1, 3};
    pb.counts = {1, 2, 0, 0, 3, 1, 2, 2};
    edge("N0_P4", pb);
  }
  {
    GemmProblem pb;
    pb.world_size = 2;
    pb.k = 4;
    pb.n = 5;
    pb.host = {0, 1};
    pb.counts = {0, 0, 0, 0};  // nobody routes anything
    edge("no_rows_P2", pb);
  }
  {
    GemmProblem pb;
    pb.world_size = 7;
    pb.k = 9;
    pb.n = 2;
    pb.host = {};  // no experts at all
    edge("no_experts_P7", pb);
  }
  {
    GemmProblem pb;
    pb.world_size = 8;
    pb.k = 40;
    pb.n = 17;
    pb.host = {5, 5, 2};  // ranks 0, 1, 3, 4, 6, 7 host nothing
    pb.seed = 99;
    pb.random_routing(4);
    edge("P8_three_experts_long_K", pb);
  }
  {
    // Crosses the kernel's blocking: K > 256 (chains continue across k-blocks), more than 96 rows
    // per expert (several row panels), N not a multiple of any vector width.
    GemmProblem pb;
    pb.world_size = 2;
    pb.k = 300;
    pb.n = 37;
    pb.host = {0, 1};
    pb.counts = {60, 0, 50, 45};
    edge("big_tiles_P2", pb);
  }
  {
    GemmProblem pb;
    pb.world_size = 1;
    pb.k = 7;
    pb.n = 3;
    pb.host = {0, 0, 0, 0};
    pb.counts = {2, 0, 5, 1};
    edge("P1_four_experts", pb);
  }
  return cases;
}

class GemmVsEigen : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmVsEigen, MatchesIndependentGemm) {
  const GemmProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  for (int p = 0; p < pb.world_size; ++p) {
    const auto st = fusedcoll::can_implement(args[p], p, pb.world_size);
    ASSERT_TRUE(st.ok()) << "rank " << p << ": " << st.message;
  }
  fusedcoll::ref::gemm_alltoall(args);
  const auto expected = fctest::gemm_expected(pb, world);
  for (int s = 0; s < pb.world_size; ++s) {
    EXPECT_TRUE(fctest::all_close("gemm_alltoall", s, world[s].output, expected[s].value,
                                  expected[s].tol));
    if (pb.k == 0) {
      for (float v : world[s].output) ASSERT_EQ(std::bit_cast<std::uint32_t>(v), 0u) << v;
    }
  }
}

TEST_P(GemmVsEigen, MatchesPinnedScalarLoopBitwise) {
  // A scalar loop in the pinned order must reproduce the oracle's bits on whichever kernel ISA
  // this process uses (the packed, blocked kernel must continue each chain exactly).
  const GemmProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemm_alltoall(args);
  const auto pinned = fctest::pinned_gemm(pb, world);
  for (int s = 0; s < pb.world_size; ++s) {
    EXPECT_TRUE(fctest::same_bits("gemm_alltoall vs pinned loop", s, world[s].output, pinned[s]));
  }
}

TEST_P(GemmVsEigen, EqualsUnfusedGemmThenAllToAllv) {
  const GemmProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemm_alltoall(args);
  const auto unfused = fctest::unfused_gemm(pb, world);
  for (int s = 0; s < pb.world_size; ++s) {
    EXPECT_TRUE(fctest::same_bits("gemm_alltoall vs unfused", s, world[s].output, unfused[s]));
  }
}

TEST_P(GemmVsEigen, OutputRowsAndBytesSent) {
  const GemmProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  const std::int64_t E = pb.num_experts();
  for (int r = 0; r < pb.world_size; ++r) {
    std::int64_t rows = 0, sent = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      rows += fctest::routed(pb, r, e);
      if (pb.host[e] != r) continue;
      for (int s = 0; s < pb.world_size; ++s) {
        if (s != r) sent += fctest::routed(pb, s, e) * pb.n * 4;
      }
    }
    EXPECT_EQ(fusedcoll::output_rows(args[r], r), rows) << "rank " << r;
    EXPECT_EQ(fusedcoll::bytes_sent(args[r], r), sent) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, GemmVsEigen, ::testing::ValuesIn(grid_cases()),
                         [](const auto& p) { return p.param.name; });

TEST(GemmPinnedOrder, IncreasingKFromZero) {
  // One expert, one row, K = 3: A = [1, 1, 1], W column 0 = [2^24, 1, -2^24] gives 0 in the
  // pinned order (2^24 + 1 rounds to 2^24), column 1 = [2^24, -2^24, 1] gives 1.
  GemmProblem pb;
  pb.world_size = 1;
  pb.k = 3;
  pb.n = 2;
  pb.host = {0};
  pb.counts = {1};
  auto world = fusedcoll::make_world(pb);
  world[0].a[0] = {1.0f, 1.0f, 1.0f};
  world[0].w[0] = {0x1p24f, 0x1p24f, 1.0f, -0x1p24f, -0x1p24f, 1.0f};
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemm_alltoall(args);
  EXPECT_EQ(world[0].output[0], 0.0f);
  EXPECT_EQ(world[0].output[1], 1.0f);
}

}  // namespace

namespace {

TEST(GemmPinnedOrder, ProductsRoundedSeparately) {
  // A row = [1, 1 + 2^-12], W column = [-(1 + 2^-11), 1 + 2^-12]: +0 unfused, 2^-24 with an FMA
  // (see GemvPinnedOrder.ProductsRoundedSeparately). 20 output columns so vector lanes and the
  // scalar edge both see it.
  GemmProblem pb;
  pb.world_size = 1;
  pb.k = 2;
  pb.n = 20;
  pb.host = {0};
  pb.counts = {3};
  auto world = fusedcoll::make_world(pb);
  world[0].a[0].clear();
  for (int r = 0; r < 3; ++r) world[0].a[0].insert(world[0].a[0].end(), {1.0f, 1.0f + 0x1p-12f});
  world[0].w[0].assign(20, -(1.0f + 0x1p-11f));
  world[0].w[0].insert(world[0].w[0].end(), 20, 1.0f + 0x1p-12f);
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemm_alltoall(args);
  for (float v : world[0].output) ASSERT_EQ(std::bit_cast<std::uint32_t>(v), 0u) << v;
}

}  // namespace

namespace {

TEST(GemmLayouts, PaddedOutputRowsLeftAlone) {
  GemmProblem pb;
  pb.world_size = 3;
  pb.k = 6;
  pb.n = 9;
  pb.host = {2, 2, 0};
  pb.seed = 4;
  pb.random_routing(4);
  auto dense = fusedcoll::make_world(pb);
  auto dense_args = fusedcoll::args_of(dense);
  fusedcoll::ref::gemm_alltoall(dense_args);

  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  const std::int64_t ld = pb.n + 2;
  constexpr float kSentinel = 31337.0f;
  std::vector<std::vector<float>> obuf(3);
  for (int s = 0; s < 3; ++s) {
    const std::int64_t rows = fusedcoll::output_rows(args[s], s);
    obuf[s].assign(static_cast<std::size_t>(rows * ld), kSentinel);
    const std::int64_t shape[] = {rows, pb.n}, strides[] = {ld, 1};
    args[s].output = fusedcoll::TensorView(obuf[s].data(), fusedcoll::DType::f32, shape, strides);
  }
  fusedcoll::ref::gemm_alltoall(args);
  for (int s = 0; s < 3; ++s) {
    std::vector<float> compact;
    for (std::size_t i = 0; i < obuf[s].size(); ++i) {
      if (static_cast<std::int64_t>(i) % ld < pb.n) compact.push_back(obuf[s][i]);
      else EXPECT_EQ(obuf[s][i], kSentinel) << "padding of rank " << s << " at " << i;
    }
    EXPECT_TRUE(fctest::same_bits("gemm_alltoall padded output", s, compact, dense[s].output));
  }
}

TEST(GemmLayouts, SemanticsExampleRouting) {
  // semantics.md, GemmAllToAll: P = 2, E = 3, host = [1, 0, 1], c = [[2, 0, 1], [1, 3, 0]].
  // Rank 0 gets 3 rows (C_0.s0.0, C_0.s0.1, C_2.s0.0), rank 1 gets 4 (C_0.s1.0, C_1.s1.0..2).
  // With K = 1, W_e = [1] and A rows holding distinct integers, each output row shows which A
  // row produced it.
  GemmProblem pb;
  pb.world_size = 2;
  pb.k = 1;
  pb.n = 1;
  pb.host = {1, 0, 1};
  pb.counts = {2, 0, 1, 1, 3, 0};
  auto world = fusedcoll::make_world(pb);
  // rank 1 hosts e0 (rows s0.0, s0.1, s1.0) and e2 (row s0.0); rank 0 hosts e1 (s1.0..2).
  world[1].a[0] = {100, 101, 110};
  world[1].a[1] = {300};
  world[0].a[0] = {210, 211, 212};
  for (auto& rd : world)
    for (auto& w : rd.w) w = {1.0f};
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemm_alltoall(args);
  EXPECT_EQ(world[0].output, (std::vector<float>{100, 101, 300}));
  EXPECT_EQ(world[1].output, (std::vector<float>{110, 210, 211, 212}));
}

}  // namespace
