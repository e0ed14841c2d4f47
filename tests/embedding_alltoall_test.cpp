// ref::embedding_alltoall against an independent Eigen computation (tests/common/eigen_ref.hpp
// states and derives the tolerance: |err| <= (n + 2) * 2^-23 * sum_j |w_j * row_j| for a bag of n
// rows, and exact equality in ValueMode::integer), plus the fused/unfused identity and layouts
// built by hand.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/check.hpp"
#include "common/eigen_ref.hpp"
#include "common/worlds.hpp"
#include "fusedcoll/detail/embedding_plan.hpp"
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace {

using fusedcoll::DType;
using fusedcoll::EmbeddingProblem;
using fusedcoll::PoolingMode;
using fusedcoll::ValueMode;

struct EmbCase {
  std::string name;
  EmbeddingProblem pb;
};

std::ostream& operator<<(std::ostream& os, const EmbCase& c) { return os << c.name; }

/// A small problem: T = P + 1 tables of varied row counts, bags of 0..6 rows (so empty bags
/// occur), uneven batches with some ranks at 0.
EmbeddingProblem small_problem(int P, std::int64_t dim, fctest::Placement placement, std::uint64_t seed) {
  EmbeddingProblem pb;
  pb.world_size = P;
  pb.dim = dim;
  const std::int64_t T = P + 1;
  for (std::int64_t t = 0; t < T; ++t) pb.table_rows.push_back(3 + (t * 7) % 23);
  pb.owner = fctest::place(T, P, placement);
  pb.batch_sizes = fctest::uneven_batches(P);
  pb.min_bag = 0;
  pb.max_bag = 6;
  pb.seed = seed;
  return pb;
}

std::vector<EmbCase> grid_cases() {
  std::vector<EmbCase> cases;
  const std::int64_t dims[] = {1, 3, 8, 13};
  const fctest::Placement placements[] = {fctest::Placement::round_robin,
                                          fctest::Placement::all_on_rank0,
                                          fctest::Placement::odd_ranks_only,
                                          fctest::Placement::reversed_blocks};
  std::uint64_t seed = 1000;
  int i = 0;
  for (int P : fctest::kWorldSizes) {
    for (int variant = 0; variant < 3; ++variant) {  // sum, weighted sum, mean
      for (DType idx : {DType::i32, DType::i64}) {
        for (ValueMode values : {ValueMode::random, ValueMode::integer}) {
          const auto placement = placements[i % 4];
          const std::int64_t dim = dims[(i / 2) % 4];
          EmbeddingProblem pb = small_problem(P, dim, placement, ++seed);
          pb.pooling = variant == 2 ? PoolingMode::mean : PoolingMode::sum;
          pb.weighted = variant == 1;
          pb.index_dtype = idx;
          pb.values = values;
          std::ostringstream name;
          name << "P" << P << "_" << (variant == 0 ? "sum" : variant == 1 ? "wsum" : "mean") << "_"
               << fusedcoll::dtype_name(idx) << "_"
               << (values == ValueMode::random ? "rand" : "int") << "_"
               << fctest::placement_name(placement) << "_D" << dim;
          cases.push_back({name.str(), pb});
          ++i;
        }
      }
    }
  }
  return cases;
}

std::vector<EmbCase> edge_cases() {
  std::vector<EmbCase> cases;
  {  // D = 0: every output is [B_q, T, 0].
    auto pb = small_problem(3, 0, fctest::Placement::round_robin, 7);
    cases.push_back({"dim0_P3", pb});
  }
  {  // B = 0: nobody has samples; offsets are [0].
    auto pb = small_problem(4, 5, fctest::Placement::round_robin, 8);
    pb.batch_sizes.assign(4, 0);
    cases.push_back({"batch0_P4", pb});
  }
  {  // T = 0: no tables at all; outputs are [B_q, 0, D].
    auto pb = small_problem(2, 4, fctest::Placement::round_robin, 9);
    pb.table_rows.clear();
    pb.owner.clear();
    cases.push_back({"no_tables_P2", pb});
  }
  {  // Every bag empty: every output is +0.0f.
    auto pb = small_problem(3, 6, fctest::Placement::odd_ranks_only, 10);
    pb.min_bag = pb.max_bag = 0;
    cases.push_back({"all_bags_empty_P3", pb});
  }
  {  // Every bag empty with mean pooling: no division by zero, +0.0f.
    auto pb = small_problem(2, 6, fctest::Placement::round_robin, 11);
    pb.min_bag = pb.max_bag = 0;
    pb.pooling = PoolingMode::mean;
    cases.push_back({"all_bags_empty_mean_P2", pb});
  }
  {  // A table with zero rows is valid when every bag is empty.
    auto pb = small_problem(2, 3, fctest::Placement::round_robin, 16);
    pb.table_rows[1] = 0;
    pb.min_bag = pb.max_bag = 0;
    cases.push_back({"zero_row_table_P2", pb});
  }
  {  // One-row tables: every index is 0, bags repeat the same row.
    auto pb = small_problem(2, 7, fctest::Placement::round_robin, 12);
    for (auto& r : pb.table_rows) r = 1;
    pb.min_bag = 3;
    pb.max_bag = 9;
    pb.weighted = true;
    cases.push_back({"one_row_tables_weighted_P2", pb});
  }
  {  // Long bags stress the tolerance; integer mode stays exact.
    for (ValueMode values : {ValueMode::random, ValueMode::integer}) {
      auto pb = small_problem(3, 16, fctest::Placement::round_robin, 13);
      pb.min_bag = 50;
      pb.max_bag = 200;
      pb.pooling = PoolingMode::mean;
      pb.values = values;
      cases.push_back({values == ValueMode::random ? "long_bags_mean_rand_P3" : "long_bags_mean_int_P3", pb});
    }
  }
  for (std::int64_t dim : {33, 150}) {  // wider than one kernel column chunk, with a tail
    auto pb = small_problem(2, dim, fctest::Placement::round_robin, 20 + dim);
    pb.weighted = dim == 150;
    cases.push_back({fctest::str("wide_D", dim, "_P2"), pb});
  }
  {  // A single rank with everything, many tables, one sample.
    auto pb = small_problem(1, 9, fctest::Placement::round_robin, 14);
    pb.batch_sizes = {1};
    pb.table_rows.assign(6, 11);
    pb.owner.assign(6, 0);
    cases.push_back({"P1_one_sample_six_tables", pb});
  }
  {  // Eight ranks, only the last owns tables, only rank 0 has samples.
    auto pb = small_problem(8, 4, fctest::Placement::round_robin, 15);
    pb.owner.assign(pb.owner.size(), 7);
    pb.batch_sizes.assign(8, 0);
    pb.batch_sizes[0] = 5;
    pb.weighted = true;
    cases.push_back({"P8_tables_on_7_samples_on_0", pb});
  }
  return cases;
}

/// Runs the problem through ref and returns the world (outputs filled).
std::vector<fusedcoll::EmbeddingRankData> run_ref(const EmbeddingProblem& pb) {
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  fusedcoll::ref::embedding_alltoall(args);
  return world;
}

class EmbeddingVsEigen : public ::testing::TestWithParam<EmbCase> {};

TEST_P(EmbeddingVsEigen, MatchesIndependentPooling) {
  const EmbeddingProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  for (int q = 0; q < pb.world_size; ++q) {
    ASSERT_EQ(static_cast<std::int64_t>(world[q].output.size()),
              pb.batch_sizes[q] * pb.num_tables() * pb.dim)
        << "rank " << q << " output buffer";
  }
  auto args = fusedcoll::args_of(world);
  for (int q = 0; q < pb.world_size; ++q) {
    const auto st = fusedcoll::can_implement(args[q], q, pb.world_size);
    ASSERT_TRUE(st.ok()) << "rank " << q << ": " << st.message;
  }
  fusedcoll::ref::embedding_alltoall(args);

  const auto expected = fctest::embedding_expected(pb, world);
  for (int q = 0; q < pb.world_size; ++q) {
    EXPECT_TRUE(fctest::all_close("embedding_alltoall", q, world[q].output, expected[q].value,
                                  expected[q].tol));
    // A pooled value that is exactly 0 (empty bag, or exact cancellation in integer mode) must
    // be +0.0f: the sum starts from +0.0f and x + (-x) rounds to +0 in round-to-nearest.
    for (std::size_t i = 0; i < expected[q].value.size(); ++i) {
      if (expected[q].value[i] == 0.0 && expected[q].tol[i] == 0.0) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(world[q].output[i]), 0u)
            << "rank " << q << " index " << i << " is " << world[q].output[i] << ", not +0.0f";
      }
    }
  }
}

TEST_P(EmbeddingVsEigen, MatchesPinnedScalarLoopBitwise) {
  // The definition pins every rounding, so a plain scalar loop in the pinned order (no Eigen, no
  // library kernel) must reproduce the oracle's bits, on whichever kernel ISA this process uses.
  const EmbeddingProblem& pb = GetParam().pb;
  auto world = run_ref(pb);
  const auto pinned = fctest::pinned_embedding(pb, world);
  for (int q = 0; q < pb.world_size; ++q) {
    EXPECT_TRUE(fctest::same_bits("embedding_alltoall vs pinned loop", q, world[q].output, pinned[q]));
  }
}

TEST_P(EmbeddingVsEigen, EqualsUnfusedPoolThenAllToAllv) {
  // Fused/unfused identity: the oracle equals, bit for bit, the local pooling kernel followed by
  // the standalone All-to-Allv and a permutation. Both paths share embedding_bag_rows, so this
  // pins the data movement (which sample, which table, which slot), not the arithmetic.
  const EmbeddingProblem& pb = GetParam().pb;
  auto world = run_ref(pb);
  const auto unfused = fctest::unfused_embedding(pb, world);
  for (int q = 0; q < pb.world_size; ++q) {
    EXPECT_TRUE(fctest::same_bits("embedding_alltoall vs unfused", q, world[q].output, unfused[q]));
  }
}

TEST_P(EmbeddingVsEigen, BytesSentCountsRemoteSamples) {
  const EmbeddingProblem& pb = GetParam().pb;
  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  for (int r = 0; r < pb.world_size; ++r) {
    // Rank r sends [B_q, T_r, D] f32 to every other rank q.
    const std::int64_t tr = static_cast<std::int64_t>(world[r].local_table_ids.size());
    std::int64_t expect = 0;
    for (int q = 0; q < pb.world_size; ++q) {
      if (q != r) expect += pb.batch_sizes[q] * tr * pb.dim * 4;
    }
    EXPECT_EQ(fusedcoll::bytes_sent(args[r], r), expect) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, EmbeddingVsEigen, ::testing::ValuesIn(grid_cases()),
                         [](const auto& p) { return p.param.name; });
INSTANTIATE_TEST_SUITE_P(Edges, EmbeddingVsEigen, ::testing::ValuesIn(edge_cases()),
                         [](const auto& p) { return p.param.name; });

// ---------------------------------------------------------------------------------------------
// Hand-built layouts: padded table rows and a padded output.

/// A value with all mantissa bits in play, from a small integer key.
float val(int key) { return std::ldexp(static_cast<float>((key * 2654435761u) % 1000003u), -20) - 0.45f; }

struct HandWorld {
  static constexpr int P = 2;
  static constexpr std::int64_t D = 3;
  // T = 3 tables: tables 0 and 2 on rank 1, table 1 on rank 0. Batch {2, 3}, B = 5.
  std::vector<int> owner{1, 0, 1};
  std::vector<std::int64_t> rows{4, 6, 5};
  std::vector<std::int64_t> batch{2, 3};
  // Bags over the global batch for each table (CSR, i32).
  std::vector<std::vector<std::int32_t>> offsets{
      {0, 2, 2, 5, 6, 8}, {0, 1, 3, 3, 3, 7}, {0, 0, 4, 5, 5, 6}};
  std::vector<std::vector<std::int32_t>> indices{
      {3, 0, 1, 1, 2, 0, 3, 3}, {5, 0, 4, 2, 2, 1, 0}, {4, 0, 1, 2, 3, 4}};
  std::vector<std::vector<float>> weights{
      {0.5f, -1.25f, 2.f, 0.75f, 1.f, -0.5f, 3.f, 1.5f},
      {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f},
      {-2.f, 0.25f, 1.f, 1.f, -1.f, 0.125f}};

  /// Dense row-major table t, [rows, D].
  std::vector<float> dense_table(int t) const {
    std::vector<float> v(static_cast<std::size_t>(rows[t] * D));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = val(100 * t + static_cast<int>(i));
    return v;
  }
  /// Table t with row stride D + 3; the padding holds NaN so that reading it would show.
  std::vector<float> padded_table(int t) const {
    const std::int64_t ld = D + 3;
    std::vector<float> v(static_cast<std::size_t>(rows[t] * ld),
                         std::numeric_limits<float>::quiet_NaN());
    const auto dense = dense_table(t);
    for (std::int64_t r = 0; r < rows[t]; ++r)
      for (std::int64_t d = 0; d < D; ++d) v[r * ld + d] = dense[r * D + d];
    return v;
  }
};

/// Runs the hand world; `padded` selects padded tables and a padded output. Returns each rank's
/// output compacted to [B_q, T, D], and in `padding_ok` whether the output padding was left alone.
std::vector<std::vector<float>> run_hand(const HandWorld& hw, bool padded, bool weighted,
                                         bool* padding_ok) {
  const std::int64_t T = 3, D = HandWorld::D;
  const std::int64_t out_ld = padded ? D + 2 : D;  // padding between the D-wide rows
  std::vector<std::vector<float>> tables(3);
  for (int t = 0; t < 3; ++t) tables[t] = padded ? hw.padded_table(t) : hw.dense_table(t);
  std::vector<std::vector<float>> outputs(HandWorld::P);
  std::vector<fusedcoll::EmbeddingAllToAllArgs> args(HandWorld::P);
  constexpr float kSentinel = -12345.5f;
  for (int q = 0; q < HandWorld::P; ++q) {
    auto& a = args[q];
    a.dim = D;
    a.owner = hw.owner;
    a.batch_sizes = hw.batch;
    a.pooling = PoolingMode::sum;
    for (int t = 0; t < 3; ++t) {
      if (hw.owner[t] != q) continue;
      fusedcoll::EmbeddingTableShard s;
      const std::int64_t shape[] = {hw.rows[t], D};
      const std::int64_t strides[] = {padded ? D + 3 : D, 1};
      s.weights = fusedcoll::ConstTensorView(tables[t].data(), DType::f32, shape, strides);
      s.offsets = fusedcoll::ConstTensorView(hw.offsets[t].data(), DType::i32,
                                             {static_cast<std::int64_t>(hw.offsets[t].size())});
      s.indices = fusedcoll::ConstTensorView(hw.indices[t].data(), DType::i32,
                                             {static_cast<std::int64_t>(hw.indices[t].size())});
      if (weighted) {
        s.per_sample_weights = fusedcoll::ConstTensorView(
            hw.weights[t].data(), DType::f32, {static_cast<std::int64_t>(hw.weights[t].size())});
      }
      a.local_tables.push_back(s);
    }
    outputs[q].assign(static_cast<std::size_t>(hw.batch[q] * T * out_ld), kSentinel);
    const std::int64_t shape[] = {hw.batch[q], T, D};
    const std::int64_t strides[] = {T * out_ld, out_ld, 1};
    a.output = fusedcoll::TensorView(outputs[q].data(), DType::f32, shape, strides);
  }
  fusedcoll::ref::embedding_alltoall(args);
  std::vector<std::vector<float>> compact(HandWorld::P);
  *padding_ok = true;
  for (int q = 0; q < HandWorld::P; ++q) {
    for (std::int64_t i = 0; i < hw.batch[q] * T; ++i) {
      for (std::int64_t d = 0; d < out_ld; ++d) {
        const float v = outputs[q][i * out_ld + d];
        if (d < D) compact[q].push_back(v);
        else if (std::bit_cast<std::uint32_t>(v) != std::bit_cast<std::uint32_t>(kSentinel))
          *padding_ok = false;
      }
    }
  }
  return compact;
}

TEST(EmbeddingLayouts, PaddedTablesAndOutputMatchEigen) {
  const HandWorld hw;
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "weighted" : "unweighted");
    bool padding_ok = false;
    const auto got = run_hand(hw, /*padded=*/true, weighted, &padding_ok);
    EXPECT_TRUE(padding_ok) << "ref wrote into the padding between output rows";

    // Independent: pool the dense tables in double with Eigen.
    const std::int64_t T = 3, D = HandWorld::D;
    std::vector<std::int64_t> start{0, hw.batch[0], hw.batch[0] + hw.batch[1]};
    for (int q = 0; q < HandWorld::P; ++q) {
      std::vector<double> expect, tol;
      for (std::int64_t i = 0; i < hw.batch[q]; ++i) {
        const std::int64_t b = start[q] + i;
        for (int t = 0; t < T; ++t) {
          const auto dense = hw.dense_table(t);
          const fctest::MatD tab = fctest::ConstMapF(dense.data(), hw.rows[t], D).cast<double>();
          Eigen::RowVectorXd acc = Eigen::RowVectorXd::Zero(D), abs_acc = acc;
          const auto& off = hw.offsets[t];
          for (std::int32_t k = off[b]; k < off[b + 1]; ++k) {
            const double w = weighted ? hw.weights[t][k] : 1.0;
            acc += w * tab.row(hw.indices[t][k]);
            abs_acc += (w * tab.row(hw.indices[t][k])).cwiseAbs();
          }
          for (std::int64_t d = 0; d < D; ++d) {
            expect.push_back(acc[d]);
            tol.push_back(fctest::sum_tolerance(off[b + 1] - off[b], abs_acc[d], ValueMode::random));
          }
        }
      }
      EXPECT_TRUE(fctest::all_close("embedding_alltoall(padded)", q, got[q], expect, tol));
    }

    // Layout must not change the bits: the padded run equals the dense run exactly.
    bool dense_padding_ok = false;
    const auto dense = run_hand(hw, /*padded=*/false, weighted, &dense_padding_ok);
    for (int q = 0; q < HandWorld::P; ++q) {
      EXPECT_TRUE(fctest::same_bits("embedding_alltoall padded vs dense", q, got[q], dense[q]));
    }
  }
}

TEST(EmbeddingLayouts, PinnedOrderAndNoFma) {
  // One bag whose exact sum differs from the pinned sequential f32 result: 1 + 2^24 rounds to
  // 2^24 (ties to even), so ((0 + 2^24) + 1) + (-2^24) = 0 in f32 while the exact sum is 1. Any
  // reordering (e.g. pairwise) or wider accumulator would give 1.
  std::vector<float> table{0x1p24f, 1.0f, -0x1p24f};
  std::vector<std::int64_t> offsets{0, 3}, indices{0, 1, 2};
  fusedcoll::EmbeddingAllToAllArgs a;
  a.dim = 1;
  a.owner = {0};
  a.batch_sizes = {1};
  a.local_tables.resize(1);
  a.local_tables[0].weights = fusedcoll::ConstTensorView(table.data(), DType::f32, {3, 1});
  a.local_tables[0].offsets = fusedcoll::ConstTensorView(offsets.data(), DType::i64, {2});
  a.local_tables[0].indices = fusedcoll::ConstTensorView(indices.data(), DType::i64, {3});
  float out = 42.0f;
  a.output = fusedcoll::TensorView(&out, DType::f32, {1, 1, 1});
  fusedcoll::ref::embedding_alltoall(std::span<const fusedcoll::EmbeddingAllToAllArgs>(&a, 1));
  EXPECT_EQ(out, 0.0f);

  // Weighted: products rounded before the add. The bag is [-(1 + 2^-11)] * 1, then
  // (1 + 2^-12) * (1 + 2^-12): that exact product 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 (tie to
  // even), so the sum is +0. A fused multiply-add would keep the 2^-24.
  std::vector<float> t2{1.0f + 0x1p-12f, -(1.0f + 0x1p-11f)};
  std::vector<float> w2{1.0f, 1.0f + 0x1p-12f};
  std::vector<std::int64_t> off2{0, 2}, idx2{1, 0};
  a.local_tables[0].weights = fusedcoll::ConstTensorView(t2.data(), DType::f32, {2, 1});
  a.local_tables[0].offsets = fusedcoll::ConstTensorView(off2.data(), DType::i64, {2});
  a.local_tables[0].indices = fusedcoll::ConstTensorView(idx2.data(), DType::i64, {2});
  a.local_tables[0].per_sample_weights = fusedcoll::ConstTensorView(w2.data(), DType::f32, {2});
  fusedcoll::ref::embedding_alltoall(std::span<const fusedcoll::EmbeddingAllToAllArgs>(&a, 1));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out), 0u) << out;
}

TEST(EmbeddingLayouts, MeanDividesByBagLength) {
  // mean = (sum in f32) / n with n the bag length, repeated indices counted each time.
  std::vector<float> table{3.0f, 10.0f};
  std::vector<std::int32_t> offsets{0, 3, 3, 4}, indices{0, 0, 1, 1};
  fusedcoll::EmbeddingAllToAllArgs a;
  a.dim = 1;
  a.owner = {0};
  a.batch_sizes = {3};
  a.pooling = PoolingMode::mean;
  a.local_tables.resize(1);
  a.local_tables[0].weights = fusedcoll::ConstTensorView(table.data(), DType::f32, {2, 1});
  a.local_tables[0].offsets = fusedcoll::ConstTensorView(offsets.data(), DType::i32, {4});
  a.local_tables[0].indices = fusedcoll::ConstTensorView(indices.data(), DType::i32, {4});
  std::vector<float> out(3, -1.0f);
  a.output = fusedcoll::TensorView(out.data(), DType::f32, {3, 1, 1});
  fusedcoll::ref::embedding_alltoall(std::span<const fusedcoll::EmbeddingAllToAllArgs>(&a, 1));
  EXPECT_EQ(out[0], 16.0f / 3.0f);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[1]), 0u) << "empty bag must pool to +0.0f";
  EXPECT_EQ(out[2], 10.0f);
}

}  // namespace

namespace {

TEST(EmbeddingAliasing, OutputOfOneRankOverInputOfAnother) {
  // ref.hpp: inputs are copied before any output is written, so a rank's output may alias
  // another rank's input (ranks sharing memory in one process) and the result is unchanged.
  EmbeddingProblem pb;
  pb.world_size = 2;
  pb.dim = 4;
  pb.table_rows = {50, 9};
  pb.owner = {0, 1};
  pb.batch_sizes = {2, 3};
  pb.min_bag = 1;
  pb.max_bag = 5;
  pb.seed = 31;
  const auto plain = run_ref(pb);

  auto world = fusedcoll::make_world(pb);
  auto args = fusedcoll::args_of(world);
  // Rank 1's output [3, 2, 4] now lives inside rank 0's table 0 (50 x 4 floats), at its start.
  float* shared = world[0].tables[0].data();
  args[1].output = fusedcoll::TensorView(shared, DType::f32, {3, 2, 4});
  fusedcoll::ref::embedding_alltoall(args);
  EXPECT_TRUE(fctest::same_bits("rank 0", 0, world[0].output, plain[0].output));
  EXPECT_TRUE(fctest::same_bits("rank 1 (aliased)", 1, std::vector<float>(shared, shared + 24),
                                plain[1].output));
}

}  // namespace

namespace {

// Scale-out's order over a destination-by-destination transport (detail/embedding_plan.hpp,
// scale_out_order), with figures worked by hand: a rank sending 2 MiB to another host whose link
// it shares with one other rank gets 62.5 MB/s at 1 Gbit/s, 33.6 ms on the wire, against 12 ms of
// pooling: destination-block-major; at 10 Gbit/s 3.36 ms against the same 12 ms: table-major.
TEST(EmbeddingPlan, ScaleOutOrderWeighsWireAgainstCompute) {
  namespace emb = fusedcoll::detail::embedding;
  using O = emb::Plan::Order;
  const double bytes = 2.0 * 1024 * 1024, compute = 12e-3;
  EXPECT_EQ(emb::scale_out_order(bytes / 62.5e6, compute), O::destination_block_major);
  EXPECT_EQ(emb::scale_out_order(bytes / 625e6, compute), O::table_major);
  // The threshold: the wire at kSlicesLeaveEarlyAt (1) of the compute or more.
  EXPECT_EQ(emb::kSlicesLeaveEarlyAt, 1.0);
  EXPECT_EQ(emb::scale_out_order(12e-3, 12e-3), O::destination_block_major);
  EXPECT_EQ(emb::scale_out_order(11.9e-3, 12e-3), O::table_major);
  EXPECT_EQ(emb::scale_out_order(30e-3, 29.9e-3), O::destination_block_major);
  // A figure not measured yet (0): table-major, whose whole slices measure the link.
  EXPECT_EQ(emb::scale_out_order(0, compute), O::table_major);
  EXPECT_EQ(emb::scale_out_order(bytes / 62.5e6, 0), O::table_major);
  EXPECT_EQ(emb::scale_out_order(0, 0), O::table_major);
}

// The plan's two tile orders (detail/embedding_plan.hpp): the same tiles, and destination-major
// completes each destination's slice, remote destinations first in communication-aware order,
// before it starts the next one (the MPI p2p transport ships a slice as soon as it is complete).
TEST(EmbeddingPlan, DestinationMajorCompletesOneSliceAfterAnother) {
  namespace emb = fusedcoll::detail::embedding;
  for (int P : {1, 2, 4}) {
    auto pb = EmbeddingProblem::dlrm(P);
    pb.batch_sizes.assign(static_cast<std::size_t>(P), 40);  // several tiles per table
    if (P == 4) pb.batch_sizes[2] = 0;                        // a destination with no tiles
    auto world = fusedcoll::make_world(pb);
    for (int me = 0; me < P; ++me) {
      const emb::Plan pl(world[static_cast<std::size_t>(me)].args(), me, P);
      auto key = [](const emb::Tile& t) { return std::tuple(t.q, t.k, t.i0, t.i1); };
      auto table = pl.fused_tiles(emb::Plan::Order::table_major);
      for (auto order :
           {emb::Plan::Order::destination_major, emb::Plan::Order::destination_block_major}) {
        const bool blocks = order == emb::Plan::Order::destination_block_major;
        auto dest = pl.fused_tiles(order);
        ASSERT_EQ(table.size(), dest.size());
        std::vector<std::tuple<int, int, std::int64_t, std::int64_t>> a, b;
        for (const auto& t : table) a.push_back(key(t));
        for (const auto& t : dest) b.push_back(key(t));
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << "P " << P << " rank " << me;
        // Destinations appear in remote_first order, each one's tiles in one run.
        std::vector<int> seen;
        std::int64_t run = 0;
        for (std::size_t i = 0; i < dest.size(); ++i) {
          if (seen.empty() || seen.back() != dest[i].q) {
            if (!seen.empty()) {
              EXPECT_EQ(run, pl.tiles(me, seen.back())) << "P " << P;
            }
            seen.push_back(dest[i].q);
            run = 0;
          }
          ++run;
        }
        if (!seen.empty()) {
          EXPECT_EQ(run, pl.tiles(me, seen.back())) << "P " << P;
        }
        // Within a destination, table by table (destination_major), or block by block: every
        // local table of samples [i0, i1) (a contiguous run of the slice, shipped as a piece over
        // p2p) before the next block (destination_block_major).
        for (std::size_t i = 1; i < dest.size(); ++i) {
          if (dest[i].q != dest[i - 1].q) continue;
          if (!blocks) {
            const bool same_table = dest[i].k == dest[i - 1].k && dest[i].i0 == dest[i - 1].i1;
            const bool next_table = dest[i].k == dest[i - 1].k + 1 && dest[i].i0 == 0;
            EXPECT_TRUE(same_table || next_table) << "P " << P << " rank " << me << " tile " << i;
            continue;
          }
          const bool same_block = dest[i].i0 == dest[i - 1].i0 && dest[i].k == dest[i - 1].k + 1;
          const bool next_block = dest[i].i0 == dest[i - 1].i1 && dest[i].k == 0 &&
                                  dest[i - 1].k + 1 == static_cast<int>(pl.tp[me]);
          EXPECT_TRUE(same_block || next_block)
              << "P " << P << " rank " << me << " tile " << i << ": q " << dest[i].q << " k "
              << dest[i].k << " i0 " << dest[i].i0 << " after k " << dest[i - 1].k << " i0 "
              << dest[i - 1].i0;
        }
        std::vector<int> expect;
        for (int q : fusedcoll::detail::remote_first(me, P))
          if (pl.tiles(me, q) > 0) expect.push_back(q);
        EXPECT_EQ(seen, expect) << "P " << P << " rank " << me;
      }
    }
  }
}

// The destination order across hosts (detail/schedule.hpp): other hosts' ranks first, this
// host's next, the local rank last; a host's ranks start at distinct remote ranks.
TEST(EmbeddingPlan, RemoteHostsFirstStaggersTheRanksOfAHost) {
  using fusedcoll::detail::remote_first;
  using fusedcoll::detail::remote_hosts_first;
  // One host: remote_first.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(remote_hosts_first(r, {0, 0, 0, 0}), remote_first(r, 4));
  // 2 hosts x 2 ranks, in blocks and interleaved (mpiexec --map-by node).
  EXPECT_EQ(remote_hosts_first(0, {0, 0, 1, 1}), (std::vector<int>{2, 3, 1, 0}));
  EXPECT_EQ(remote_hosts_first(1, {0, 0, 1, 1}), (std::vector<int>{3, 2, 0, 1}));
  EXPECT_EQ(remote_hosts_first(2, {0, 0, 1, 1}), (std::vector<int>{0, 1, 3, 2}));
  EXPECT_EQ(remote_hosts_first(3, {0, 0, 1, 1}), (std::vector<int>{1, 0, 2, 3}));
  EXPECT_EQ(remote_hosts_first(0, {0, 1, 0, 1}), (std::vector<int>{1, 3, 2, 0}));
  EXPECT_EQ(remote_hosts_first(2, {0, 1, 0, 1}), (std::vector<int>{3, 1, 0, 2}));
  // Any layout: a permutation, other hosts before this one, the rank itself last; with hosts of
  // equal size, at every step the senders of one host address distinct ranks.
  const std::vector<std::vector<int>> layouts = {
      {0, 1}, {0, 0, 1, 1, 2, 2}, {0, 1, 2, 0, 1, 2}, {0, 0, 0, 1, 1, 1}, {0, 0, 1}, {0, 1, 1, 1}};
  for (const auto& hosts : layouts) {
    const int P = static_cast<int>(hosts.size());
    std::vector<std::vector<int>> orders;
    for (int r = 0; r < P; ++r) {
      auto o = remote_hosts_first(r, hosts);
      ASSERT_EQ(static_cast<int>(o.size()), P);
      EXPECT_EQ(o.back(), r);
      auto sorted = o;
      std::sort(sorted.begin(), sorted.end());
      for (int q = 0; q < P; ++q) EXPECT_EQ(sorted[q], q);
      bool local = false;
      for (int q : o) {
        if (hosts[q] == hosts[r]) {
          local = true;
        } else {
          EXPECT_FALSE(local) << "rank " << r << ": remote rank " << q << " after a local one";
        }
      }
      orders.push_back(o);
    }
    const int H = *std::max_element(hosts.begin(), hosts.end()) + 1;
    bool equal = true;
    for (int h = 0; h < H; ++h) equal = equal && std::count(hosts.begin(), hosts.end(), h) * H == P;
    if (!equal) continue;
    for (int step = 0; step < P; ++step) {
      for (int a = 0; a < P; ++a) {
        for (int b = a + 1; b < P; ++b) {
          if (hosts[a] != hosts[b] || hosts[orders[a][step]] == hosts[a]) continue;
          EXPECT_NE(orders[a][step], orders[b][step])
              << "ranks " << a << " and " << b << " both address " << orders[a][step]
              << " at step " << step;
        }
      }
    }
  }
}

}  // namespace
