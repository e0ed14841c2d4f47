// ref::gemv_allreduce against an independent Eigen computation: the global W and x are assembled
// from the rank slices and y = x * W^T is formed in double. Tolerance (tests/common/eigen_ref.hpp):
// |err| <= (K + P + 2) * 2^-23 * sum_k |x[m][k] * W[n][k]|, since each term passes through at most
// K + P - 1 rounded additions plus its own rounded product; exact in ValueMode::integer.
// Plus the fused/unfused identity: gemv_rows on every rank, then ref::all_reduce(direct, sum).

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/eigen_ref.hpp"
#include "common/worlds.hpp"
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/gemv_allreduce.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace {

using fusedcoll::GemvProblem;
using fusedcoll::ValueMode;

struct GemvCase {
  std::string name;
  GemvProblem pb;
};

std::ostream& operator<<(std::ostream& os, const GemvCase& c) { return os << c.name; }

/// Uneven K splits with a zero: rank 1 (when present) holds no columns.
std::vector<std::int64_t> uneven_k(int P, std::int64_t base) {
  std::vector<std::int64_t> k(P);
  for (int p = 0; p < P; ++p) k[p] = (p == 1) ? 0 : base + 3 * p + (p % 2);
  return k;
}

std::vector<GemvCase> grid_cases() {
  std::vector<GemvCase> cases;
  std::uint64_t seed = 500;
  for (int P : fctest::kWorldSizes) {
    for (std::int64_t m : {1, 3, 16}) {
      for (ValueMode values : {ValueMode::random, ValueMode::integer}) {
        GemvProblem pb;
        pb.world_size = P;
        pb.m = m;
        pb.n = 19 + P;
        pb.k_splits = uneven_k(P, 9);
        pb.values = values;
        pb.seed = ++seed;
        std::ostringstream name;
        name << "P" << P << "_M" << m << "_N" << pb.n << "_K" << pb.k() << "_"
             << (values == ValueMode::random ? "rand" : "int");
        cases.push_back({name.str(), pb});
      }
    }
    {  // Even split (split_evenly), larger K to exercise the bound.
      GemvProblem pb;
      pb.world_size = P;
      pb.m = 16;
      pb.n = 8;
      pb.k_splits = fusedcoll::split_evenly(301, P);
      pb.seed = ++seed;
      cases.push_back({fctest::str("P", P, "_M16_even_K301"), pb});
    }
  }
  auto edge = [&](std::string name, int P, std::int64_t m, std::int64_t n,
                  std::vector<std::int64_t> k) {
    GemvProblem pb;
    pb.world_size = P;
    pb.m = m;
    pb.n = n;
    pb.k_splits = std::move(k);
    pb.seed = ++seed;
    cases.push_back({std::move(name), pb});
  };
  edge("N0_P3", 3, 4, 0, {2, 5, 1});
  edge("K0_P4", 4, 2, 7, {0, 0, 0, 0});   // y = +0 everywhere
  edge("K0_P1", 1, 16, 5, {0});
  edge("M0_P2", 2, 0, 6, {3, 4});
  edge("all_K_on_last_P7", 7, 5, 9, {0, 0, 0, 0, 0, 0, 17});
  edge("all_K_on_first_P8", 8, 1, 4, {23, 0, 0, 0, 0, 0, 0, 0});
  edge("M1_N1_P2", 2, 1, 1, {1, 1});
  edge("long_K_uneven_P3", 3, 16, 45, {700, 0, 129});  // several k-blocks per rank
  return cases;
}

class GemvVsEigen : public ::testing::TestWithParam<GemvCase> {};

TEST_P(GemvVsEigen, MatchesIndependentGemv) {
  const GemvProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  for (int p = 0; p < pb.world_size; ++p) {
    const auto st = fusedcoll::can_implement(args[p], p, pb.world_size);
    ASSERT_TRUE(st.ok()) << "rank " << p << ": " << st.message;
  }
  fusedcoll::ref::gemv_allreduce(args);
  const auto expected = fctest::gemv_expected(pb, world);
  for (int p = 0; p < pb.world_size; ++p) {
    EXPECT_TRUE(fctest::all_close("gemv_allreduce", p, world[p].y, expected.value, expected.tol));
    // Every rank holds the same y, bit for bit (it is one AllReduce result).
    EXPECT_TRUE(fctest::same_bits("gemv_allreduce rank vs rank 0", p, world[p].y, world[0].y));
  }
  if (pb.k() == 0) {
    // No terms: +0.0f everywhere (sums start from +0.0f).
    for (float v : world[0].y) ASSERT_EQ(std::bit_cast<std::uint32_t>(v), 0u) << v;
  }
}

TEST_P(GemvVsEigen, MatchesPinnedScalarLoopBitwise) {
  // A scalar loop in the pinned order (increasing k from +0.0f, products rounded, partials added
  // in rank order) must reproduce the oracle's bits on whichever kernel ISA this process uses.
  const GemvProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemv_allreduce(args);
  const auto pinned = fctest::pinned_gemv(pb, world);
  for (int p = 0; p < pb.world_size; ++p) {
    EXPECT_TRUE(fctest::same_bits("gemv_allreduce vs pinned loop", p, world[p].y, pinned));
  }
}

TEST_P(GemvVsEigen, EqualsUnfusedGemvThenAllReduce) {
  // Fused/unfused identity: each rank's partial from detail::gemv_rows, then
  // ref::all_reduce(direct, sum), equals ref::gemv_allreduce bit for bit.
  const GemvProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemv_allreduce(args);

  const int P = pb.world_size;
  const std::int64_t M = pb.m, N = pb.n;
  std::vector<std::vector<float>> partial(P), reduced(P);
  std::vector<fusedcoll::AllReduceArgs> ar(P);
  for (int p = 0; p < P; ++p) {
    const std::int64_t kp = pb.k_splits[p];
    partial[p].assign(static_cast<std::size_t>(M * N), -7.0f);
    reduced[p].assign(static_cast<std::size_t>(M * N), -9.0f);
    fusedcoll::detail::gemv_rows(world[p].w.data(), kp, world[p].x.data(), kp, M, kp, 0, N,
                                 partial[p].data(), N);
    ar[p].send = partial[p].data();
    ar[p].recv = reduced[p].data();
    ar[p].count = M * N;
    ar[p].dtype = fusedcoll::DType::f32;
    ar[p].op = fusedcoll::ReduceOp::sum;
    ar[p].algo = fusedcoll::AllReduceAlgo::direct;
  }
  fusedcoll::ref::all_reduce(ar);
  for (int p = 0; p < P; ++p) {
    ASSERT_EQ(world[p].y.size(), reduced[p].size());
    EXPECT_EQ(0, world[p].y.empty() ? 0
                                    : std::memcmp(world[p].y.data(), reduced[p].data(),
                                                  world[p].y.size() * sizeof(float)))
        << fctest::same_bits("gemv_allreduce vs unfused", p, world[p].y, reduced[p]).message();
  }
}

TEST_P(GemvVsEigen, BytesSentMatchesDirectAlgorithm) {
  // semantics.md, "Traffic accounting": the fused direct form splits N into owner chunks
  // n_p = chunk_of(N, P, p).length; rank p sends its partial of every other owner's columns,
  // M * (N - n_p), then its reduced chunk to every other rank, (P - 1) * M * n_p; f32.
  // Summed over ranks that is 2 * (P - 1) * M * N, whatever the chunking.
  const GemvProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  const int P = pb.world_size;
  std::int64_t sum = 0;
  for (int r = 0; r < P; ++r) {
    const std::int64_t np = pb.n / P + (r < pb.n % P ? 1 : 0);  // written out, not chunk_of
    const std::int64_t want = 4 * (pb.m * (pb.n - np) + (P - 1) * pb.m * np);
    const std::int64_t got = fusedcoll::bytes_sent(args[r], r);
    EXPECT_EQ(got, want) << "rank " << r;
    sum += got;
  }
  EXPECT_EQ(sum, 2 * (P - 1) * pb.m * pb.n * 4);
}

INSTANTIATE_TEST_SUITE_P(Grid, GemvVsEigen, ::testing::ValuesIn(grid_cases()),
                         [](const auto& p) { return p.param.name; });

TEST(GemvPinnedOrder, RankOrderNotExactSum) {
  // Three ranks with K_p = 1, M = N = 1: partials 2^24, 1, -2^24. The pinned direct order gives
  // ((2^24 + 1) + -2^24) = 0 (2^24 + 1 rounds to 2^24); the exact value is 1.
  GemvProblem pb;
  pb.world_size = 3;
  pb.m = 1;
  pb.n = 1;
  pb.k_splits = {1, 1, 1};
  auto world = fusedcoll::make_world(pb);
  world[0].w = {0x1p24f};
  world[1].w = {1.0f};
  world[2].w = {-0x1p24f};
  for (auto& r : world) r.x = {1.0f};
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemv_allreduce(args);
  for (int p = 0; p < 3; ++p) EXPECT_EQ(world[p].y[0], 0.0f) << "rank " << p;
}

TEST(GemvPinnedOrder, IncreasingKWithinRank) {
  // One rank: x = [1, 1, 1], W row = [2^24, 1, -2^24]. Increasing k from +0: 0 + 2^24 + 1 rounds
  // to 2^24, then -2^24 gives 0. A reversed or pairwise order gives 1 (or 0 differently): pinned.
  GemvProblem pb;
  pb.world_size = 1;
  pb.m = 1;
  pb.n = 2;
  pb.k_splits = {3};
  auto world = fusedcoll::make_world(pb);
  world[0].w = {0x1p24f, 1.0f, -0x1p24f, /*row 1:*/ 1.0f, 0x1p24f, -0x1p24f};
  world[0].x = {1.0f, 1.0f, 1.0f};
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemv_allreduce(args);
  EXPECT_EQ(world[0].y[0], 0.0f);
  // Row 1: 0 + 1 = 1, + 2^24 rounds to 2^24, - 2^24 = 0 as well; now a row where the order
  // matters in the other direction: nothing lost when the small term comes last.
  EXPECT_EQ(world[0].y[1], 0.0f);
  world[0].w = {0x1p24f, -0x1p24f, 1.0f, 0, 0, 0};
  args = fusedcoll::args_of(world);
  fusedcoll::ref::gemv_allreduce(args);
  EXPECT_EQ(world[0].y[0], 1.0f);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(world[0].y[1]), 0u);
}

}  // namespace

namespace {

TEST(GemvPinnedOrder, ProductsRoundedSeparately) {
  // x = [1, 1 + 2^-12], W row = [-(1 + 2^-11), 1 + 2^-12]. Unfused: -(1 + 2^-11) + fl(1 + 2^-11 +
  // 2^-24) = -(1 + 2^-11) + (1 + 2^-11) = +0 (the product's 2^-24 is a tie, rounded to even). A
  // fused multiply-add keeps the 2^-24.
  GemvProblem pb;
  pb.world_size = 1;
  pb.m = 1;
  pb.n = 1;
  pb.k_splits = {2};
  auto world = fusedcoll::make_world(pb);
  world[0].x = {1.0f, 1.0f + 0x1p-12f};
  world[0].w = {-(1.0f + 0x1p-11f), 1.0f + 0x1p-12f};
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemv_allreduce(args);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(world[0].y[0]), 0u) << world[0].y[0];
}

}  // namespace

namespace {

TEST(GemvPinnedOrder, SemanticsExampleRankPartialsNotGlobalDot) {
  // semantics.md, GemvAllReduce: x = [1, 1, 1], W = [1, 1e8, -1e8], k_splits = [1, 2]. The global
  // increasing-k dot product gives 0; the definition (partials rounded per rank) gives 1.
  GemvProblem pb;
  pb.world_size = 2;
  pb.m = 1;
  pb.n = 1;
  pb.k_splits = {1, 2};
  auto world = fusedcoll::make_world(pb);
  world[0].x = {1.0f};
  world[0].w = {1.0f};
  world[1].x = {1.0f, 1.0f};
  world[1].w = {1e8f, -1e8f};
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::gemv_allreduce(args);
  EXPECT_EQ(world[0].y[0], 1.0f);
  EXPECT_EQ(world[1].y[0], 1.0f);
}

TEST(GemvLayouts, PaddedOutputRowsLeftAlone) {
  // y with row stride N + 3: the op writes exactly the [M, N] elements, padding untouched, and
  // the values equal the dense run's.
  GemvProblem pb;
  pb.world_size = 3;
  pb.m = 5;
  pb.n = 11;
  pb.k_splits = {4, 0, 9};
  pb.seed = 8;
  auto dense = fusedcoll::make_world(pb);
  auto dense_args = fusedcoll::args_of(dense);
  fusedcoll::ref::gemv_allreduce(dense_args);

  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  const std::int64_t ld = pb.n + 3;
  constexpr float kSentinel = -777.25f;
  std::vector<std::vector<float>> ybuf(3, std::vector<float>(pb.m * ld, kSentinel));
  for (int p = 0; p < 3; ++p) {
    const std::int64_t shape[] = {pb.m, pb.n}, strides[] = {ld, 1};
    args[p].y = fusedcoll::TensorView(ybuf[p].data(), fusedcoll::DType::f32, shape, strides);
  }
  fusedcoll::ref::gemv_allreduce(args);
  for (int p = 0; p < 3; ++p) {
    std::vector<float> compact;
    for (std::int64_t m = 0; m < pb.m; ++m) {
      for (std::int64_t j = 0; j < ld; ++j) {
        if (j < pb.n) compact.push_back(ybuf[p][m * ld + j]);
        else EXPECT_EQ(ybuf[p][m * ld + j], kSentinel) << "padding of rank " << p << " row " << m;
      }
    }
    EXPECT_TRUE(fctest::same_bits("gemv_allreduce padded y", p, compact, dense[p].y));
  }
}

}  // namespace
