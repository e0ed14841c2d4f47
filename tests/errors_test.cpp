// Argument checking: every bad input raises fusedcoll::InvalidArgument (never another exception,
// never a crash or a silent wrong answer), and the message names the offending value. One test per
// case. Each case starts from a valid hand-built world (checked valid in the fixtures' own tests)
// and breaks exactly one thing, so the error cannot come from somewhere else.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/errors.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/collectives.hpp"
#include "fusedcoll/dtype.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/gemv_allreduce.hpp"
#include "fusedcoll/ref.hpp"
#include "fusedcoll/tensor.hpp"

namespace {

using fusedcoll::ConstTensorView;
using fusedcoll::DType;
using fusedcoll::TensorView;

const DType kBadDType = static_cast<DType>(99);

// ---------------------------------------------------------------------------------------------
// EmbeddingAllToAll: P = 2, D = 4, T = 2 (table 0 on rank 0, table 1 on rank 1), 10 rows each,
// batch_sizes {2, 1} so B = 3. Bags (same for both tables): {0, 1}, {2, 3, 4}, {5}.

struct EmbWorld {
  static constexpr int P = 2;
  static constexpr std::int64_t D = 4, kRows = 10, B = 3;
  std::vector<std::vector<float>> table{std::vector<float>(kRows * D, 0.5f),
                                        std::vector<float>(kRows * D, -0.25f)};
  std::vector<std::vector<std::int64_t>> offsets{{0, 2, 5, 6}, {0, 2, 5, 6}};
  std::vector<std::vector<std::int64_t>> indices{{0, 1, 2, 3, 4, 5}, {9, 8, 7, 6, 5, 4}};
  std::vector<std::vector<float>> weights{{1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1}};
  std::vector<std::vector<float>> out{std::vector<float>(2 * 2 * D), std::vector<float>(1 * 2 * D)};
  bool weighted = false;

  std::vector<fusedcoll::EmbeddingAllToAllArgs> args() {
    std::vector<fusedcoll::EmbeddingAllToAllArgs> a(P);
    const std::int64_t batch[] = {2, 1};
    for (int r = 0; r < P; ++r) {
      a[r].dim = D;
      a[r].owner = {0, 1};
      a[r].batch_sizes = {2, 1};
      a[r].pooling = fusedcoll::PoolingMode::sum;
      fusedcoll::EmbeddingTableShard s;
      s.weights = ConstTensorView(table[r].data(), DType::f32,
                                  {static_cast<std::int64_t>(table[r].size()) / D, D});
      s.offsets = ConstTensorView(offsets[r].data(), DType::i64,
                                  {static_cast<std::int64_t>(offsets[r].size())});
      s.indices = ConstTensorView(indices[r].data(), DType::i64,
                                  {static_cast<std::int64_t>(indices[r].size())});
      if (weighted) {
        s.per_sample_weights = ConstTensorView(weights[r].data(), DType::f32,
                                               {static_cast<std::int64_t>(weights[r].size())});
      }
      a[r].local_tables.push_back(s);
      a[r].output = TensorView(out[r].data(), DType::f32, {batch[r], 2, D});
    }
    return a;
  }
};

/// Both entry points must reject the world: the per-rank `check` of the broken rank and the
/// whole-world oracle.
#define EXPECT_EMB_INVALID(world_args, bad_rank, ...)                                         \
  do {                                                                                        \
    auto fc_args_ = (world_args);                                                             \
    EXPECT_INVALID(fusedcoll::check(fc_args_[bad_rank], bad_rank, 2), __VA_ARGS__);           \
    EXPECT_INVALID(fusedcoll::ref::embedding_alltoall(fc_args_), __VA_ARGS__);                \
    EXPECT_FALSE(fusedcoll::can_implement(fc_args_[bad_rank], bad_rank, 2).ok());             \
  } while (false)

TEST(EmbeddingErrors, ValidWorldPasses) {
  // The baseline every case below breaks in exactly one place.
  for (bool weighted : {false, true}) {
    EmbWorld w;
    w.weighted = weighted;
    auto a = w.args();
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(fusedcoll::can_implement(a[r], r, 2).ok());
    EXPECT_NO_THROW(fusedcoll::ref::embedding_alltoall(a));
  }
}

TEST(EmbeddingErrors, IndexOutOfRange) {
  EmbWorld w;
  w.indices[1][3] = 1000;  // rows = 10
  EXPECT_EMB_INVALID(w.args(), 1, 1000, "indices");
}

TEST(EmbeddingErrors, IndexEqualToRows) {
  EmbWorld w;
  w.indices[0][5] = EmbWorld::kRows;  // first invalid value
  EXPECT_EMB_INVALID(w.args(), 0, EmbWorld::kRows, "indices");
}

TEST(EmbeddingErrors, NegativeIndex) {
  EmbWorld w;
  w.indices[0][2] = -7;
  EXPECT_EMB_INVALID(w.args(), 0, -7, "indices");
}

TEST(EmbeddingErrors, NegativeIndexI32) {
  EmbWorld w;
  std::vector<std::int32_t> off{0, 2, 5, 6}, idx{0, 1, -123, 3, 4, 5};
  auto a = w.args();
  a[0].local_tables[0].offsets = ConstTensorView(off.data(), DType::i32, {4});
  a[0].local_tables[0].indices = ConstTensorView(idx.data(), DType::i32, {6});
  EXPECT_EMB_INVALID(a, 0, -123);
}

TEST(EmbeddingErrors, NonMonotonicOffsets) {
  EmbWorld w;
  // 600 indices so the offending offset (437, after 512) is a distinctive number.
  w.indices[1].assign(600, 1);
  w.offsets[1] = {0, 512, 437, 600};
  EXPECT_EMB_INVALID(w.args(), 1, 437, "offsets");
}

TEST(EmbeddingErrors, NegativeOffset) {
  EmbWorld w;
  w.offsets[0] = {0, -17, 5, 6};
  EXPECT_EMB_INVALID(w.args(), 0, -17, "offsets");
}

TEST(EmbeddingErrors, FirstOffsetNotZero) {
  EmbWorld w;
  w.offsets[1] = {3, 3, 5, 6};
  EXPECT_EMB_INVALID(w.args(), 1, 3, "offsets");
}

TEST(EmbeddingErrors, LastOffsetNotNumberOfIndices) {
  EmbWorld w;
  w.indices[0].assign(300, 2);
  w.offsets[0] = {0, 100, 200, 321};  // offsets[B] = 321 but 300 indices
  EXPECT_EMB_INVALID(w.args(), 0, 321, 300);
}

TEST(EmbeddingErrors, OffsetsWrongLength) {
  EmbWorld w;
  w.offsets[1] = {0, 2, 3, 5, 6};  // B + 2 = 5 entries instead of B + 1 = 4
  EXPECT_EMB_INVALID(w.args(), 1, 5, "offsets");
}

TEST(EmbeddingErrors, OffsetsAndIndicesDtypeDiffer) {
  EmbWorld w;
  std::vector<std::int32_t> idx{0, 1, 2, 3, 4, 5};
  auto a = w.args();
  a[1].local_tables[0].indices = ConstTensorView(idx.data(), DType::i32, {6});
  EXPECT_EMB_INVALID(a, 1, "i32", "i64");
}

TEST(EmbeddingErrors, OffsetsFloatDtype) {
  EmbWorld w;
  std::vector<float> off{0, 2, 5, 6};
  auto a = w.args();
  a[0].local_tables[0].offsets = ConstTensorView(off.data(), DType::f32, {4});
  EXPECT_EMB_INVALID(a, 0, "f32", "offsets");
}

TEST(EmbeddingErrors, TableDimMismatch) {
  EmbWorld w;
  auto a = w.args();
  // weights is [rows, 13] while D = 4.
  a[0].local_tables[0].weights = ConstTensorView(w.table[0].data(), DType::f32, {3, 13});
  EXPECT_EMB_INVALID(a, 0, 13, "weights");
}

TEST(EmbeddingErrors, TableNot2D) {
  EmbWorld w;
  auto a = w.args();
  a[1].local_tables[0].weights = ConstTensorView(w.table[1].data(), DType::f32, {40});
  EXPECT_EMB_INVALID(a, 1, 40, "weights");
}

TEST(EmbeddingErrors, TableNonUnitInnerStride) {
  EmbWorld w;
  auto a = w.args();
  const std::int64_t shape[] = {5, 4}, strides[] = {8, 2};
  a[0].local_tables[0].weights = ConstTensorView(w.table[0].data(), DType::f32, shape, strides);
  EXPECT_EMB_INVALID(a, 0, "weights", "stride");
}

TEST(EmbeddingErrors, OutputShapeMismatch) {
  EmbWorld w;
  auto a = w.args();
  std::vector<float> big(64);
  a[0].output = TensorView(big.data(), DType::f32, {2, 2, 7});  // D = 4
  EXPECT_EMB_INVALID(a, 0, 7, "output");
}

TEST(EmbeddingErrors, OutputRowsMismatch) {
  EmbWorld w;
  auto a = w.args();
  std::vector<float> big(64);
  a[1].output = TensorView(big.data(), DType::f32, {6, 2, 4});  // batch_sizes[1] = 1
  EXPECT_EMB_INVALID(a, 1, 6, "output");
}

TEST(EmbeddingErrors, WeightsWithMeanPooling) {
  EmbWorld w;
  w.weighted = true;
  auto a = w.args();
  for (auto& r : a) r.pooling = fusedcoll::PoolingMode::mean;
  EXPECT_EMB_INVALID(a, 0, "mean", "per_sample_weights");
}

TEST(EmbeddingErrors, WeightsLengthMismatch) {
  EmbWorld w;
  w.weighted = true;
  w.weights[1].assign(11, 1.0f);  // 6 indices
  EXPECT_EMB_INVALID(w.args(), 1, 11, "per_sample_weights");
}

TEST(EmbeddingErrors, OwnerOutOfRange) {
  EmbWorld w;
  auto a = w.args();
  for (auto& r : a) r.owner = {0, 42};
  EXPECT_EMB_INVALID(a, 0, 42, "owner");
}

TEST(EmbeddingErrors, NegativeOwner) {
  EmbWorld w;
  auto a = w.args();
  for (auto& r : a) r.owner = {-3, 1};
  EXPECT_EMB_INVALID(a, 1, -3, "owner");
}

TEST(EmbeddingErrors, BatchSizesWrongLength) {
  EmbWorld w;
  auto a = w.args();
  for (auto& r : a) r.batch_sizes = {2, 1, 0};  // P = 2
  EXPECT_EMB_INVALID(a, 0, 3, "batch_sizes");
}

TEST(EmbeddingErrors, NegativeBatchSize) {
  EmbWorld w;
  auto a = w.args();
  for (auto& r : a) r.batch_sizes = {4, -1};
  EXPECT_EMB_INVALID(a, 0, -1, "batch_sizes");
}

TEST(EmbeddingErrors, WrongNumberOfLocalTables) {
  EmbWorld w;
  auto a = w.args();
  a[1].local_tables.push_back(a[1].local_tables[0]);  // owns 1, passes 2
  EXPECT_EMB_INVALID(a, 1, 2, "tables");
}

TEST(EmbeddingErrors, NullTableWithRows) {
  EmbWorld w;
  auto a = w.args();
  a[0].local_tables[0].weights = ConstTensorView(nullptr, DType::f32, {10, 4});
  EXPECT_EMB_INVALID(a, 0, "null", "weights");
}

TEST(EmbeddingErrors, NullIndicesWithElements) {
  EmbWorld w;
  auto a = w.args();
  a[1].local_tables[0].indices = ConstTensorView(nullptr, DType::i64, {6});
  EXPECT_EMB_INVALID(a, 1, "null", "indices");
}

TEST(EmbeddingErrors, UnknownDtypeInTable) {
  EmbWorld w;
  auto a = w.args();
  a[0].local_tables[0].weights = ConstTensorView(w.table[0].data(), kBadDType, {10, 4});
  EXPECT_EMB_INVALID(a, 0, 99);
}

TEST(EmbeddingErrors, UnknownDtypeInOffsets) {
  EmbWorld w;
  auto a = w.args();
  a[1].local_tables[0].offsets = ConstTensorView(w.offsets[1].data(), kBadDType, {4});
  EXPECT_EMB_INVALID(a, 1, 99);
}

TEST(EmbeddingErrors, OutputOverlapsOwnTable) {
  // "Must not overlap any input": rank 0 writes its output over the end of its own table.
  EmbWorld w;
  auto a = w.args();
  a[0].output = TensorView(w.table[0].data() + 30, DType::f32, {2, 2, 4});
  EXPECT_EMB_INVALID(a, 0, "overlap");
}

TEST(EmbeddingErrors, NegativeDim) {
  EmbWorld w;
  auto a = w.args();
  for (auto& r : a) r.dim = -3;
  EXPECT_EMB_INVALID(a, 0, -3, "dim");
}

TEST(EmbeddingErrors, UnknownPoolingMode) {
  EmbWorld w;
  auto a = w.args();
  for (auto& r : a) r.pooling = static_cast<fusedcoll::PoolingMode>(7);
  EXPECT_EMB_INVALID(a, 1, 7, "pooling");
}

TEST(EmbeddingErrors, OffsetsNotContiguous) {
  EmbWorld w;
  std::vector<std::int64_t> spaced{0, -1, 2, -1, 5, -1, 6, -1};
  auto a = w.args();
  const std::int64_t shape[] = {4}, strides[] = {2};
  a[0].local_tables[0].offsets = ConstTensorView(spaced.data(), DType::i64, shape, strides);
  EXPECT_EMB_INVALID(a, 0, "offsets", "contiguous");
}

TEST(EmbeddingErrors, IndicesNot1D) {
  EmbWorld w;
  auto a = w.args();
  a[1].local_tables[0].indices = ConstTensorView(w.indices[1].data(), DType::i64, {2, 3});
  EXPECT_EMB_INVALID(a, 1, "indices");
}

TEST(EmbeddingErrors, WeightsWrongDtype) {
  EmbWorld w;
  w.weighted = true;
  std::vector<std::int32_t> iw(6, 1);
  auto a = w.args();
  a[0].local_tables[0].per_sample_weights = ConstTensorView(iw.data(), DType::i32, {6});
  EXPECT_EMB_INVALID(a, 0, "per_sample_weights", "i32");
}

TEST(EmbeddingErrors, EmptyButPresentWeightsWithMean) {
  // "Present" is any view that is not default-constructed: a [0] view with no data still counts
  // (errors.md), so mean pooling rejects it.
  EmbWorld w;
  w.indices = {{}, {}};
  w.offsets = {{0, 0, 0, 0}, {0, 0, 0, 0}};
  auto a = w.args();
  for (auto& r : a) r.pooling = fusedcoll::PoolingMode::mean;
  ASSERT_TRUE(fusedcoll::can_implement(a[0], 0, 2).ok());
  a[0].local_tables[0].per_sample_weights = ConstTensorView(nullptr, DType::f32, {0});
  EXPECT_EMB_INVALID(a, 0, "per_sample_weights", "mean");
}

TEST(EmbeddingErrors, OutputRowsOverlap) {
  // Outer strides must keep rows apart: stride(0) = 4 for [2, 2, 4] rows of 8 floats.
  EmbWorld w;
  auto a = w.args();
  const std::int64_t shape[] = {2, 2, 4}, strides[] = {4, 4, 1};
  a[0].output = TensorView(w.out[0].data(), DType::f32, shape, strides);
  EXPECT_EMB_INVALID(a, 0, "output", "stride(0)");
}

TEST(EmbeddingErrors, NothingWrittenWhenAnyRankIsInvalid) {
  // ref validates the whole world before it touches any output.
  EmbWorld w;
  for (auto& o : w.out) fusedcoll::poison(o.data(), o.size() * sizeof(float));
  w.indices[1][0] = 1000;
  EXPECT_INVALID(fusedcoll::ref::embedding_alltoall(w.args()), 1000);
  for (const auto& o : w.out) EXPECT_TRUE(fctest::all_poison(o));
}

TEST(EmbeddingErrors, DimDiffersBetweenRanks) {
  // Rank 1 passes dim 6 with everything else consistent with dim 6: each rank's own call is
  // valid, only the agreement check can catch it.
  EmbWorld w;
  auto a = w.args();
  for (auto& r : a) r.owner = {0, 0};
  std::vector<float> t1(10 * 4, 1.0f);
  a[0].local_tables.push_back(a[0].local_tables[0]);
  a[0].local_tables[1].weights = ConstTensorView(t1.data(), DType::f32, {10, 4});
  a[1].local_tables.clear();
  std::vector<float> out1(1 * 2 * 6);
  a[1].dim = 6;
  a[1].output = TensorView(out1.data(), DType::f32, {1, 2, 6});
  ASSERT_TRUE(fusedcoll::can_implement(a[0], 0, 2).ok());
  ASSERT_TRUE(fusedcoll::can_implement(a[1], 1, 2).ok()) << fusedcoll::can_implement(a[1], 1, 2).message;
  EXPECT_INVALID(fusedcoll::check_consistent(a[0], 0, a[1], 1), 4, 6, "dim");
  EXPECT_INVALID(fusedcoll::ref::embedding_alltoall(a), 4, 6, "dim");
}

TEST(EmbeddingErrors, BatchSizesDifferBetweenRanks) {
  EmbWorld w;
  auto a = w.args();
  EXPECT_NO_THROW(fusedcoll::check_consistent(a[0], 0, a[1], 1));
  // Rank 1 believes the split is {0, 3}: same B, so the offsets stay valid on both ranks.
  a[1].batch_sizes = {0, 3};
  std::vector<float> out1(3 * 2 * 4);
  a[1].output = TensorView(out1.data(), DType::f32, {3, 2, 4});
  ASSERT_TRUE(fusedcoll::can_implement(a[1], 1, 2).ok());
  EXPECT_INVALID(fusedcoll::check_consistent(a[0], 0, a[1], 1), "batch_sizes");
  EXPECT_INVALID(fusedcoll::ref::embedding_alltoall(a), "batch_sizes");
}

TEST(EmbeddingErrors, RankOutsideWorld) {
  EmbWorld w;
  auto a = w.args();
  EXPECT_INVALID(fusedcoll::check(a[0], 5, 2), 5);
}

TEST(EmbeddingErrors, CanImplementReportsMessage) {
  EmbWorld w;
  w.indices[0][0] = 1000;
  auto a = w.args();
  const fusedcoll::Status st = fusedcoll::can_implement(a[0], 0, 2);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(static_cast<bool>(st));
  EXPECT_EQ(st.code, fusedcoll::ErrorCode::invalid_argument);
  EXPECT_TRUE(fctest::contains_number(st.message, 1000)) << st.message;
  // The message is the one check() throws.
  try {
    fusedcoll::check(a[0], 0, 2);
    ADD_FAILURE() << "check did not throw";
  } catch (const fusedcoll::InvalidArgument& e) {
    EXPECT_EQ(st.message, e.what());
  }
  const auto ok = fusedcoll::can_implement(a[1], 1, 2);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.code, fusedcoll::ErrorCode::ok);
}

// ---------------------------------------------------------------------------------------------
// GemvAllReduce: P = 2, M = 2, N = 3, k_splits {4, 5}.

struct GemvWorld {
  static constexpr int P = 2;
  std::vector<std::int64_t> ks{4, 5};
  std::vector<std::vector<float>> w{std::vector<float>(3 * 4, 1.0f), std::vector<float>(3 * 5, 2.0f)};
  std::vector<std::vector<float>> x{std::vector<float>(2 * 4, 1.0f), std::vector<float>(2 * 5, 1.0f)};
  std::vector<std::vector<float>> y{std::vector<float>(2 * 3), std::vector<float>(2 * 3)};
  std::vector<fusedcoll::GemvAllReduceArgs> args() {
    std::vector<fusedcoll::GemvAllReduceArgs> a(P);
    for (int p = 0; p < P; ++p) {
      a[p].m = 2;
      a[p].n = 3;
      a[p].k_splits = ks;
      a[p].w = ConstTensorView(w[p].data(), DType::f32, {3, ks[p]});
      a[p].x = ConstTensorView(x[p].data(), DType::f32, {2, ks[p]});
      a[p].y = TensorView(y[p].data(), DType::f32, {2, 3});
    }
    return a;
  }
};

#define EXPECT_GEMV_INVALID(world_args, bad_rank, ...)                                        \
  do {                                                                                        \
    auto fc_args_ = (world_args);                                                             \
    EXPECT_INVALID(fusedcoll::check(fc_args_[bad_rank], bad_rank, 2), __VA_ARGS__);           \
    EXPECT_INVALID(fusedcoll::ref::gemv_allreduce(fc_args_), __VA_ARGS__);                    \
    EXPECT_FALSE(fusedcoll::can_implement(fc_args_[bad_rank], bad_rank, 2).ok());             \
  } while (false)

TEST(GemvErrors, ValidWorldPasses) {
  GemvWorld g;
  auto a = g.args();
  for (int p = 0; p < 2; ++p) EXPECT_TRUE(fusedcoll::can_implement(a[p], p, 2).ok());
  fusedcoll::ref::gemv_allreduce(a);
  EXPECT_EQ(g.y[0][0], 4.0f + 10.0f);
}

TEST(GemvErrors, WeightShapeMismatch) {
  GemvWorld g;
  auto a = g.args();
  std::vector<float> w(3 * 6);
  a[1].w = ConstTensorView(w.data(), DType::f32, {3, 6});  // [N, K_1 + 1]
  EXPECT_GEMV_INVALID(a, 1, 6, "w");
}

TEST(GemvErrors, InputShapeMismatch) {
  GemvWorld g;
  auto a = g.args();
  std::vector<float> x(2 * 11);
  a[0].x = ConstTensorView(x.data(), DType::f32, {2, 11});
  EXPECT_GEMV_INVALID(a, 0, 11, "x");
}

TEST(GemvErrors, OutputShapeMismatch) {
  GemvWorld g;
  auto a = g.args();
  std::vector<float> y(2 * 13);
  a[1].y = TensorView(y.data(), DType::f32, {2, 13});
  EXPECT_GEMV_INVALID(a, 1, 13, "y");
}

TEST(GemvErrors, TooManyRows) {
  GemvWorld g;
  auto a = g.args();
  std::vector<std::vector<float>> x(2), y(2);
  for (int p = 0; p < 2; ++p) {
    x[p].resize(17 * g.ks[p]);
    y[p].resize(17 * 3);
    a[p].m = 17;
    a[p].x = ConstTensorView(x[p].data(), DType::f32, {17, g.ks[p]});
    a[p].y = TensorView(y[p].data(), DType::f32, {17, 3});
  }
  EXPECT_GEMV_INVALID(a, 0, 17);
}

TEST(GemvErrors, NegativeKSplit) {
  GemvWorld g;
  auto a = g.args();
  for (auto& r : a) r.k_splits = {4, -5};
  EXPECT_GEMV_INVALID(a, 0, -5, "k_splits");
}

TEST(GemvErrors, KSplitsWrongLength) {
  GemvWorld g;
  auto a = g.args();
  for (auto& r : a) r.k_splits = {4, 5, 0};  // P = 2
  EXPECT_GEMV_INVALID(a, 0, 3, "k_splits");
}

TEST(GemvErrors, NullWeightWithElements) {
  GemvWorld g;
  auto a = g.args();
  a[0].w = ConstTensorView(nullptr, DType::f32, {3, 4});
  EXPECT_GEMV_INVALID(a, 0, "null", "w");
}

TEST(GemvErrors, UnknownDtypeInOutput) {
  GemvWorld g;
  auto a = g.args();
  a[1].y = TensorView(g.y[1].data(), kBadDType, {2, 3});
  EXPECT_GEMV_INVALID(a, 1, 99);
}

TEST(GemvErrors, WrongDtypeInWeights) {
  GemvWorld g;
  auto a = g.args();
  a[0].w = ConstTensorView(g.w[0].data(), DType::i32, {3, 4});
  EXPECT_GEMV_INVALID(a, 0, "i32", "w");
}

TEST(GemvErrors, OutputOverlapsInput) {
  GemvWorld g;
  auto a = g.args();
  a[1].y = TensorView(g.x[1].data() + 1, DType::f32, {2, 3});  // x[1] holds 10 floats
  EXPECT_GEMV_INVALID(a, 1, "overlap");
}

TEST(GemvErrors, NegativeN) {
  GemvWorld g;
  auto a = g.args();
  for (auto& r : a) r.n = -8;
  EXPECT_GEMV_INVALID(a, 0, -8);
}

TEST(GemvErrors, WorldSizeZero) {
  GemvWorld g;
  auto a = g.args();
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 0), 0, "world size");
}

TEST(GemvErrors, KSplitsDifferBetweenRanks) {
  GemvWorld g;
  auto a = g.args();
  EXPECT_NO_THROW(fusedcoll::check_consistent(a[0], 0, a[1], 1));
  // Rank 0 believes rank 1 holds 8 columns; its own call stays valid.
  a[0].k_splits = {4, 8};
  ASSERT_TRUE(fusedcoll::can_implement(a[0], 0, 2).ok());
  EXPECT_INVALID(fusedcoll::check_consistent(a[0], 0, a[1], 1), 8, 5, "k_splits");
  EXPECT_INVALID(fusedcoll::ref::gemv_allreduce(a), 8, 5, "k_splits");
}

TEST(GemvErrors, CanImplementReportsMessage) {
  GemvWorld g;
  auto a = g.args();
  a[0].m = 99;
  const auto st = fusedcoll::can_implement(a[0], 0, 2);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code, fusedcoll::ErrorCode::invalid_argument);
  EXPECT_TRUE(fctest::contains_number(st.message, 99)) << st.message;
}

// ---------------------------------------------------------------------------------------------
// GemmAllToAll: P = 2, E = 2 (expert 0 on rank 1, expert 1 on rank 0), K = 3, N = 2,
// counts c[s][e] = {{1, 2}, {3, 0}}: A_0 has 4 rows, A_1 has 2; outputs have 3 and 3 rows.

struct GemmWorld {
  static constexpr int P = 2;
  std::vector<std::int64_t> counts{1, 2, 3, 0};
  std::vector<float> a0 = std::vector<float>(4 * 3, 1.0f), a1 = std::vector<float>(2 * 3, 1.0f);
  std::vector<float> w0 = std::vector<float>(3 * 2, 1.0f), w1 = std::vector<float>(3 * 2, 2.0f);
  std::vector<std::vector<float>> out{std::vector<float>(3 * 2), std::vector<float>(3 * 2)};
  std::vector<fusedcoll::GemmAllToAllArgs> args() {
    std::vector<fusedcoll::GemmAllToAllArgs> a(P);
    for (int r = 0; r < P; ++r) {
      a[r].k = 3;
      a[r].n = 2;
      a[r].host = {1, 0};
      a[r].counts = counts;
      a[r].output = TensorView(out[r].data(), DType::f32, {3, 2});
    }
    a[1].local_experts.push_back({ConstTensorView(a0.data(), DType::f32, {4, 3}),
                                  ConstTensorView(w0.data(), DType::f32, {3, 2})});
    a[0].local_experts.push_back({ConstTensorView(a1.data(), DType::f32, {2, 3}),
                                  ConstTensorView(w1.data(), DType::f32, {3, 2})});
    return a;
  }
};

#define EXPECT_GEMM_INVALID(world_args, bad_rank, ...)                                        \
  do {                                                                                        \
    auto fc_args_ = (world_args);                                                             \
    EXPECT_INVALID(fusedcoll::check(fc_args_[bad_rank], bad_rank, 2), __VA_ARGS__);           \
    EXPECT_INVALID(fusedcoll::ref::gemm_alltoall(fc_args_), __VA_ARGS__);                     \
    EXPECT_FALSE(fusedcoll::can_implement(fc_args_[bad_rank], bad_rank, 2).ok());             \
  } while (false)

TEST(GemmErrors, ValidWorldPasses) {
  GemmWorld g;
  auto a = g.args();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fusedcoll::can_implement(a[r], r, 2).ok());
  fusedcoll::ref::gemm_alltoall(a);
  // Rank 0: its 1 row through expert 0 (sum of 3 ones = 3), then 2 rows through expert 1 (6).
  EXPECT_EQ(g.out[0], (std::vector<float>{3, 3, 6, 6, 6, 6}));
}

TEST(GemmErrors, CountsDoNotAddUp) {
  GemmWorld g;
  auto a = g.args();
  std::vector<float> big(7 * 3);
  a[1].local_experts[0].a = ConstTensorView(big.data(), DType::f32, {7, 3});  // sum_s c[s][0] = 4
  EXPECT_GEMM_INVALID(a, 1, 7, 4);
}

TEST(GemmErrors, OutputRowsMismatch) {
  GemmWorld g;
  auto a = g.args();
  std::vector<float> big(9 * 2);
  a[0].output = TensorView(big.data(), DType::f32, {9, 2});  // 3 rows expected
  EXPECT_GEMM_INVALID(a, 0, 9, "output");
}

TEST(GemmErrors, WeightShapeMismatch) {
  GemmWorld g;
  auto a = g.args();
  std::vector<float> w(3 * 5);
  a[0].local_experts[0].w = ConstTensorView(w.data(), DType::f32, {3, 5});  // N = 2
  EXPECT_GEMM_INVALID(a, 0, 5, "W");
}

TEST(GemmErrors, NegativeCount) {
  GemmWorld g;
  g.counts = {1, 2, -3, 0};
  EXPECT_GEMM_INVALID(g.args(), 0, -3, "counts");
}

TEST(GemmErrors, CountsWrongLength) {
  GemmWorld g;
  auto a = g.args();
  for (auto& r : a) r.counts = {1, 2, 3, 0, 0, 0};  // P * E = 4
  EXPECT_GEMM_INVALID(a, 0, 6, "counts");
}

TEST(GemmErrors, HostOutOfRange) {
  GemmWorld g;
  auto a = g.args();
  for (auto& r : a) r.host = {1, 42};
  a[0].local_experts.clear();
  EXPECT_GEMM_INVALID(a, 0, 42, "host");
}

TEST(GemmErrors, NullAWithRows) {
  GemmWorld g;
  auto a = g.args();
  a[1].local_experts[0].a = ConstTensorView(nullptr, DType::f32, {4, 3});
  EXPECT_GEMM_INVALID(a, 1, "null");
}

TEST(GemmErrors, UnknownDtypeInA) {
  GemmWorld g;
  auto a = g.args();
  a[0].local_experts[0].a = ConstTensorView(g.a1.data(), kBadDType, {2, 3});
  EXPECT_GEMM_INVALID(a, 0, 99);
}

TEST(GemmErrors, OutputOverlapsA) {
  GemmWorld g;
  auto a = g.args();
  a[1].output = TensorView(g.a0.data() + 2, DType::f32, {3, 2});  // rank 1 hosts expert 0
  EXPECT_GEMM_INVALID(a, 1, "overlap");
}

TEST(GemmErrors, NegativeK) {
  GemmWorld g;
  auto a = g.args();
  for (auto& r : a) r.k = -6;
  EXPECT_GEMM_INVALID(a, 0, -6);
}

TEST(GemmErrors, WrongNumberOfLocalExperts) {
  GemmWorld g;
  auto a = g.args();
  a[0].local_experts.clear();  // rank 0 hosts expert 1
  EXPECT_GEMM_INVALID(a, 0, "experts");
}

TEST(GemmErrors, CountsDifferBetweenRanks) {
  GemmWorld g;
  auto a = g.args();
  EXPECT_NO_THROW(fusedcoll::check_consistent(a[0], 0, a[1], 1));
  // Rank 0 believes source 1 routes 3 rows to expert 1 instead of 0: it hosts expert 1, so give
  // it a matching A; its output rows (source 0) are unchanged, so its own call is valid.
  a[0].counts = {1, 2, 3, 3};
  std::vector<float> a1(5 * 3, 1.0f);
  a[0].local_experts[0].a = ConstTensorView(a1.data(), DType::f32, {5, 3});
  ASSERT_TRUE(fusedcoll::can_implement(a[0], 0, 2).ok()) << fusedcoll::can_implement(a[0], 0, 2).message;
  EXPECT_INVALID(fusedcoll::check_consistent(a[0], 0, a[1], 1), 3, 0);
  EXPECT_INVALID(fusedcoll::ref::gemm_alltoall(a), 3, 0);
}

// ---------------------------------------------------------------------------------------------
// Collectives

TEST(CollectiveErrors, AllToAllvCountsInconsistent) {
  // Rank 0 sends 25 elements to rank 1, which expects 24.
  std::vector<float> s0(30), r0(30), s1(30), r1(30);
  std::vector<fusedcoll::AllToAllvArgs> a(2);
  a[0] = {s0.data(), r0.data(), {1, 25}, {0, 1}, {1, 2}, {0, 1}, DType::f32};
  a[1] = {s1.data(), r1.data(), {2, 3}, {0, 2}, {24, 3}, {0, 24}, DType::f32};
  EXPECT_NO_THROW(fusedcoll::check(a[0], 0, 2));
  EXPECT_NO_THROW(fusedcoll::check(a[1], 1, 2));
  EXPECT_INVALID(fusedcoll::check_consistent(a[0], 0, a[1], 1), 25, 24);
  EXPECT_INVALID(fusedcoll::ref::all_to_allv(a), 25, 24);
}

TEST(CollectiveErrors, AllToAllvSelfCountsInconsistent) {
  // A rank's message to itself must agree too: send_counts[r] == recv_counts[r] on rank r.
  // Otherwise the oracle would copy 14 elements out of a 12-element message.
  std::vector<float> s(20), r(20);
  std::vector<fusedcoll::AllToAllvArgs> a(1);
  a[0] = {s.data(), r.data(), {12}, {0}, {14}, {0}, DType::f32};
  EXPECT_INVALID(fusedcoll::ref::all_to_allv(a), 12, 14);
}

TEST(CollectiveErrors, AllToAllvNegativeCount) {
  std::vector<float> s(8), r(8);
  std::vector<fusedcoll::AllToAllvArgs> a(1);
  a[0] = {s.data(), r.data(), {-4}, {0}, {-4}, {0}, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 1), -4);
  EXPECT_INVALID(fusedcoll::ref::all_to_allv(a), -4);
}

TEST(CollectiveErrors, AllToAllvCountsWrongLength) {
  std::vector<float> s(8), r(8);
  fusedcoll::AllToAllvArgs a{s.data(), r.data(), {1, 1, 1}, {0, 1, 2}, {1, 1}, {0, 1}, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a, 0, 2), 3, "send_counts");
}

TEST(CollectiveErrors, ReduceScatterCountsDifferBetweenRanks) {
  std::vector<float> s0(10), s1(10), r0(10), r1(10);
  std::vector<fusedcoll::ReduceScatterArgs> a(2);
  a[0] = {s0.data(), r0.data(), {3, 4}, DType::f32, fusedcoll::ReduceOp::sum};
  a[1] = {s1.data(), r1.data(), {3, 6}, DType::f32, fusedcoll::ReduceOp::sum};
  EXPECT_NO_THROW(fusedcoll::check(a[0], 0, 2));
  EXPECT_NO_THROW(fusedcoll::check(a[1], 1, 2));
  EXPECT_INVALID(fusedcoll::check_consistent(a[0], 0, a[1], 1), 4, 6, "recv_counts");
  EXPECT_INVALID(fusedcoll::ref::reduce_scatter(a), 4, 6, "recv_counts");
}

TEST(CollectiveErrors, AllReduceCountDiffersBetweenRanks) {
  std::vector<float> s0(100), s1(100), r0(100), r1(100);
  std::vector<fusedcoll::AllReduceArgs> a(2);
  a[0] = {s0.data(), r0.data(), 77, DType::f32};
  a[1] = {s1.data(), r1.data(), 78, DType::f32};
  EXPECT_INVALID(fusedcoll::ref::all_reduce(a), 77, 78);
}

TEST(CollectiveErrors, AllGatherCountsDifferBetweenRanks) {
  std::vector<float> s0(10), s1(10), r0(20), r1(20);
  std::vector<fusedcoll::AllGatherArgs> a(2);
  a[0] = {s0.data(), r0.data(), {2, 3}, DType::f32};
  a[1] = {s1.data(), r1.data(), {2, 9}, DType::f32};
  EXPECT_INVALID(fusedcoll::ref::all_gather(a), 3, 9);
}

TEST(CollectiveErrors, BroadcastRootOutOfRange) {
  std::vector<float> b(4);
  std::vector<fusedcoll::BroadcastArgs> a(2, fusedcoll::BroadcastArgs{b.data(), b.data(), 4,
                                                                      DType::f32, 37});
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 2), 37, "root");
  EXPECT_INVALID(fusedcoll::ref::broadcast(a), 37);
}

TEST(CollectiveErrors, NullSendBufferWithCount) {
  std::vector<float> r(5), s1(5), r1(5);
  std::vector<fusedcoll::AllReduceArgs> a(2);
  a[0] = {nullptr, r.data(), 5, DType::f32};
  a[1] = {s1.data(), r1.data(), 5, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 2), "null", "send");
  EXPECT_INVALID(fusedcoll::ref::all_reduce(a), "null", "send");
}

TEST(CollectiveErrors, NullRecvBufferAllToAllv) {
  std::vector<float> s(3);
  fusedcoll::AllToAllvArgs a{s.data(), nullptr, {3}, {0}, {3}, {0}, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), "null", "recv");
}

TEST(CollectiveErrors, UnknownDtypeAllReduce) {
  std::vector<float> s(4), r(4);
  fusedcoll::AllReduceArgs a{s.data(), r.data(), 4, kBadDType};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), 99);
  EXPECT_INVALID(fusedcoll::ref::all_reduce(std::span<const fusedcoll::AllReduceArgs>(&a, 1)), 99);
}

TEST(CollectiveErrors, UnknownDtypeAllToAllv) {
  std::vector<float> s(4), r(4);
  fusedcoll::AllToAllvArgs a{s.data(), r.data(), {4}, {0}, {4}, {0}, kBadDType};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), 99);
  EXPECT_INVALID(fusedcoll::ref::all_to_allv(std::span<const fusedcoll::AllToAllvArgs>(&a, 1)), 99);
}

TEST(CollectiveErrors, UnknownDtypeBroadcast) {
  std::vector<float> b(4);
  fusedcoll::BroadcastArgs a{b.data(), b.data(), 4, kBadDType, 0};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), 99);
}

TEST(CollectiveErrors, ReductionOnByteTypeIsUnsupported) {
  // A valid dtype that cannot be reduced is "unsupported", not "invalid argument".
  std::vector<std::uint16_t> s(4), r(4);
  fusedcoll::AllReduceArgs a{s.data(), r.data(), 4, DType::bf16};
  EXPECT_THROW(fusedcoll::check(a, 0, 1), fusedcoll::UnsupportedError);
}

TEST(CollectiveErrors, NegativeAllReduceCount) {
  std::vector<float> s(4), r(4);
  fusedcoll::AllReduceArgs a{s.data(), r.data(), -12, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), -12);
}

TEST(CollectiveErrors, AllReducePartialOverlap) {
  std::vector<float> buf(10);
  fusedcoll::AllReduceArgs a{buf.data(), buf.data() + 2, 5, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), "overlap");
}

TEST(CollectiveErrors, EmptyWorld) {
  EXPECT_INVALID(fusedcoll::ref::all_reduce(std::span<const fusedcoll::AllReduceArgs>()), "rank");
}

TEST(CollectiveErrors, UnknownReduceOp) {
  std::vector<float> sb(4), rb(4);
  fusedcoll::AllReduceArgs a{sb.data(), rb.data(), 4, DType::f32, static_cast<fusedcoll::ReduceOp>(9)};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), 9, "op");
}

TEST(CollectiveErrors, UnknownAllReduceAlgo) {
  std::vector<float> sb(4), rb(4);
  fusedcoll::AllReduceArgs a{sb.data(), rb.data(), 4, DType::f32, fusedcoll::ReduceOp::sum,
                             static_cast<fusedcoll::AllReduceAlgo>(5)};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), 5, "algorithm");
}

TEST(CollectiveErrors, ReduceScatterRecvOverlapsSendElsewhere) {
  // In place is recv == send + offset(rank) exactly; one element off is an overlap.
  std::vector<float> buf(10);
  fusedcoll::ReduceScatterArgs a{buf.data(), buf.data() + 3, {3, 4}, DType::f32,
                                 fusedcoll::ReduceOp::sum};
  EXPECT_NO_THROW(fusedcoll::check(a, 1, 2)) << "recv == send + offset(1) is the in-place form";
  a.recv = buf.data() + 2;
  EXPECT_INVALID(fusedcoll::check(a, 1, 2), "overlap");
}

TEST(CollectiveErrors, AllGatherSendOverlapsRecvElsewhere) {
  std::vector<float> buf(10);
  fusedcoll::AllGatherArgs a{buf.data() + 3, buf.data(), {3, 4}, DType::f32};
  EXPECT_NO_THROW(fusedcoll::check(a, 1, 2)) << "send == recv + offset(1) is the in-place form";
  a.send = buf.data() + 1;
  EXPECT_INVALID(fusedcoll::check(a, 1, 2), "overlap");
}

TEST(CollectiveErrors, AllToAllvRecvRegionsOverlap) {
  std::vector<float> sb(4), rb(10);
  fusedcoll::AllToAllvArgs a{sb.data(), rb.data(), {2, 2}, {0, 2}, {2, 3}, {0, 1}, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a, 0, 2), "overlap");
}

TEST(CollectiveErrors, AllToAllvRecvOverlapsSend) {
  std::vector<float> buf(20);
  fusedcoll::AllToAllvArgs a{buf.data(), buf.data() + 3, {4}, {0}, {4}, {0}, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), "overlap");
}

TEST(CollectiveErrors, AllToAllvNegativeDisplacement) {
  std::vector<float> sb(8), rb(8);
  fusedcoll::AllToAllvArgs a{sb.data(), rb.data(), {2}, {-5}, {2}, {0}, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a, 0, 1), -5, "send_displs");
}

TEST(CollectiveErrors, BroadcastRootNullSend) {
  std::vector<float> rb(3);
  fusedcoll::BroadcastArgs a{nullptr, rb.data(), 3, DType::f32, 0};
  EXPECT_INVALID(fusedcoll::check(a, 0, 2), "null", "send");
  EXPECT_NO_THROW(fusedcoll::check(a, 1, 2)) << "send is read only on the root";
}

TEST(CollectiveErrors, CanImplementCollectives) {
  std::vector<float> sb(4), rb(4);
  fusedcoll::AllReduceArgs ok{sb.data(), rb.data(), 4, DType::f32};
  EXPECT_TRUE(fusedcoll::can_implement(ok, 0, 1).ok());
  fusedcoll::AllReduceArgs bad{nullptr, rb.data(), 4, DType::f32};
  const auto st = fusedcoll::can_implement(bad, 0, 1);
  EXPECT_EQ(st.code, fusedcoll::ErrorCode::invalid_argument);
  EXPECT_NE(st.message.find("null"), std::string::npos) << st.message;
  fusedcoll::AllReduceArgs unsup{sb.data(), rb.data(), 4, DType::f16};
  EXPECT_EQ(fusedcoll::can_implement(unsup, 0, 1).code, fusedcoll::ErrorCode::unsupported);
  fusedcoll::AllToAllvArgs a2a{sb.data(), rb.data(), {-1}, {0}, {-1}, {0}, DType::f32};
  EXPECT_FALSE(fusedcoll::can_implement(a2a, 0, 1).ok());
  fusedcoll::ReduceScatterArgs rs{sb.data(), rb.data(), {2, 2}, DType::f32, fusedcoll::ReduceOp::max};
  EXPECT_TRUE(fusedcoll::can_implement(rs, 1, 2).ok());
  EXPECT_FALSE(fusedcoll::can_implement(rs, 2, 2).ok());
  fusedcoll::AllGatherArgs ag{sb.data(), rb.data(), {2, 2}, DType::f32};
  EXPECT_TRUE(fusedcoll::can_implement(ag, 0, 2).ok());
  fusedcoll::BroadcastArgs bc{sb.data(), rb.data(), 4, DType::f32, 3};
  EXPECT_FALSE(fusedcoll::can_implement(bc, 0, 2).ok());
}

TEST(CollectiveErrors, ChunkOfBadArguments) {
  EXPECT_INVALID(fusedcoll::chunk_of(10, 0, 0), 0, "part");
  EXPECT_INVALID(fusedcoll::chunk_of(10, 3, 3), 3, "chunk");
  EXPECT_INVALID(fusedcoll::chunk_of(10, 3, -1), -1, "chunk");
}

TEST(CollectiveErrors, MakeAlltoallBadArguments) {
  float x = 0, y = 0;
  EXPECT_INVALID(fusedcoll::make_alltoall(&x, &y, -2, DType::f32, 2), -2);
  EXPECT_INVALID(fusedcoll::make_alltoall(&x, &y, 1, DType::f32, 0), 0, "world size");
}

// ---------------------------------------------------------------------------------------------
// Sizes no memory can have: a count, displacement or product whose size in bytes does not fit in
// 64 bits is InvalidArgument naming the field and the value, before any size is computed from it
// (before, a wrapped product gave bad_alloc, a misleading overlap, or a read at the buffer start).

constexpr std::int64_t kHuge = std::int64_t{1} << 62;  // 2^62 f32 = 2^64 bytes

TEST(SizeErrors, AllReduceCount) {
  std::vector<float> s0(4), r0(4), s1(4), r1(4);
  std::vector<fusedcoll::AllReduceArgs> a(2);
  a[0] = {s0.data(), r0.data(), kHuge, DType::f32};
  a[1] = {s1.data(), r1.data(), kHuge, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 2), "AllReduce count", kHuge);
  EXPECT_INVALID(fusedcoll::ref::all_reduce(a), "AllReduce count", kHuge);
  a[0].dtype = a[1].dtype = DType::i64;  // 2^61 i64 elements: 2^64 bytes too
  a[0].count = a[1].count = kHuge / 2;
  EXPECT_INVALID(fusedcoll::ref::all_reduce(a), "AllReduce count", kHuge / 2);
}

TEST(SizeErrors, AllToAllvDisplacement) {
  // 2^62 f32 past the start is 2^64 bytes: wrapped, it was the buffer's start.
  std::vector<float> s(8), r(8);
  std::vector<fusedcoll::AllToAllvArgs> a(1);
  a[0] = {s.data(), r.data(), {2}, {kHuge}, {2}, {0}, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 1), "send_displs[0]", kHuge);
  EXPECT_INVALID(fusedcoll::ref::all_to_allv(a), "send_displs[0]", kHuge);
  a[0] = {s.data(), r.data(), {2}, {0}, {2}, {kHuge - 1}, DType::f32};
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 1), "recv_displs[0]", kHuge - 1);
  // The end of the segment, displacement + count, overflows as an element index.
  a[0] = {s.data(), r.data(), {2}, {std::numeric_limits<std::int64_t>::max()}, {2}, {0},
          DType::f32};
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 1), "send_displs[0]",
                 std::numeric_limits<std::int64_t>::max());
}

TEST(SizeErrors, AllToAllvCount) {
  std::vector<float> s(8), r(8);
  std::vector<fusedcoll::AllToAllvArgs> a(2);
  a[0] = {s.data(), r.data(), {1, kHuge}, {0, 1}, {1, 1}, {0, 1}, DType::f32};
  a[1] = a[0];
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 2), "send_counts[1]", kHuge);
  EXPECT_INVALID(fusedcoll::ref::all_to_allv(a), "send_counts[1]", kHuge);
  // Each segment of bytes fits, the sum of the counts does not.
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  a[0] = {s.data(), r.data(), {max - 1, 2}, {0, 0}, {max - 1, 2}, {0, 0}, DType::f8_e4m3};
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 2), "sum of send_counts", max - 1);
}

TEST(SizeErrors, ReduceScatterCounts) {
  std::vector<float> s(8), r(8);
  std::vector<fusedcoll::ReduceScatterArgs> a(2);
  a[0] = {s.data(), r.data(), {1, kHuge}, DType::f32, fusedcoll::ReduceOp::sum};
  a[1] = a[0];
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 2), "recv_counts", kHuge + 1);
  EXPECT_INVALID(fusedcoll::ref::reduce_scatter(a), "recv_counts", kHuge + 1);
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  a[0].recv_counts = a[1].recv_counts = {max, 1};
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 2), "sum of recv_counts", max);
}

TEST(SizeErrors, AllGatherCounts) {
  std::vector<float> s(8), r(8);
  std::vector<fusedcoll::AllGatherArgs> a(2);
  a[0] = {s.data(), r.data(), {1, kHuge}, DType::f32};
  a[1] = a[0];
  EXPECT_INVALID(fusedcoll::check(a[0], 0, 2), "recv_counts", kHuge + 1);
  EXPECT_INVALID(fusedcoll::ref::all_gather(a), "recv_counts", kHuge + 1);
}

TEST(SizeErrors, BroadcastCount) {
  std::vector<float> b(4);
  std::vector<fusedcoll::BroadcastArgs> a(2, fusedcoll::BroadcastArgs{b.data(), b.data(), kHuge,
                                                                      DType::f32, 0});
  EXPECT_INVALID(fusedcoll::check(a[1], 1, 2), "Broadcast count", kHuge);
  EXPECT_INVALID(fusedcoll::ref::broadcast(a), "Broadcast count", kHuge);
}

TEST(SizeErrors, MakeAllToAll) {
  float x = 0, y = 0;
  EXPECT_INVALID(fusedcoll::make_alltoall(&x, &y, kHuge, DType::f32, 4), kHuge, "world_size");
}

TEST(SizeErrors, EmbeddingDim) {
  EmbWorld w;
  auto a = w.args();
  for (auto& r : a) r.dim = kHuge;  // B * T * dim = 3 * 2 * 2^62
  EXPECT_EMB_INVALID(a, 0, "B * T * dim", kHuge);
}

TEST(SizeErrors, EmbeddingBatchSizes) {
  EmbWorld w;
  auto a = w.args();
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  for (auto& r : a) r.batch_sizes = {max, 1};
  EXPECT_EMB_INVALID(a, 1, "sum of batch_sizes", max);
}

TEST(SizeErrors, ViewStride) {
  // A weights view whose row stride reaches past 2^64 bytes: 9 rows of stride 2^62.
  EmbWorld w;
  auto a = w.args();
  const std::int64_t shape[] = {EmbWorld::kRows, EmbWorld::D}, strides[] = {kHuge, 1};
  a[0].local_tables[0].weights = ConstTensorView(w.table[0].data(), DType::f32, shape, strides);
  EXPECT_EMB_INVALID(a, 0, "weights", kHuge);
}

TEST(SizeErrors, GemvN) {
  GemvWorld g;
  auto a = g.args();
  for (auto& r : a) r.n = kHuge;  // n * (4 + 5)
  EXPECT_GEMV_INVALID(a, 0, "n * sum of k_splits", kHuge);
}

TEST(SizeErrors, GemvKSplits) {
  GemvWorld g;
  auto a = g.args();
  for (auto& r : a) r.k_splits = {kHuge, 5};  // n * k = 3 * (2^62 + 5)
  EXPECT_GEMV_INVALID(a, 1, "n * sum of k_splits", kHuge + 5);
}

TEST(SizeErrors, GemmKTimesN) {
  GemmWorld g;
  auto a = g.args();
  for (auto& r : a) r.k = r.n = std::int64_t{1} << 32;  // W is k x n = 2^64 floats
  EXPECT_GEMM_INVALID(a, 0, "k * n", std::int64_t{1} << 32);
}

TEST(SizeErrors, GemmRoutedRows) {
  GemmWorld g;
  auto a = g.args();
  for (auto& r : a) r.counts = {1, kHuge, 3, 0};  // routed rows * k = (2^62 + 4) * 3
  EXPECT_GEMM_INVALID(a, 1, "routed rows * k", kHuge + 4);
}

// ---------------------------------------------------------------------------------------------
// dtype, tensor views, and the macros themselves.

TEST(DTypeErrors, ParseUnknownName) {
  EXPECT_INVALID(fusedcoll::parse_dtype("f33"), "f33");
}

TEST(DTypeErrors, ParseRoundTrips) {
  for (int i = 0; i < fusedcoll::kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    EXPECT_EQ(fusedcoll::parse_dtype(fusedcoll::dtype_name(t)), t);
  }
}

TEST(DTypeErrors, SizeOfUnknownDtype) {
  EXPECT_INVALID(fusedcoll::dtype_size(kBadDType), 99);
}

TEST(DTypeErrors, EnforceValidNamesWhat) {
  EXPECT_INVALID(fusedcoll::enforce_valid(kBadDType, "my tensor"), 99, "my tensor");
  EXPECT_NO_THROW(fusedcoll::enforce_valid(DType::f8_e5m2, "ok"));
}

TEST(DTypeErrors, PrintsInvalidValue) {
  std::ostringstream os;
  os << kBadDType;
  EXPECT_EQ(os.str(), "DType(99)");
}

TEST(TensorErrors, NegativeDimension) {
  float x = 0;
  EXPECT_INVALID((TensorView(&x, DType::f32, {3, -2})), -2);
}

TEST(TensorErrors, ElementCountOverflows) {
  // 2^32 * 2^32 elements: the contiguous strides would wrap.
  float x = 0;
  const std::int64_t big = std::int64_t{1} << 32;
  EXPECT_INVALID((ConstTensorView(&x, DType::f32, {big, big, 4})), big, "dimension 0");
}

TEST(TensorErrors, NegativeDimensionStrided) {
  float x = 0;
  const std::int64_t shape[] = {4, -9}, strides[] = {1, 1};
  EXPECT_INVALID((ConstTensorView(&x, DType::f32, shape, strides)), -9);
}

TEST(TensorErrors, NegativeStride) {
  float x = 0;
  const std::int64_t shape[] = {4, 2}, strides[] = {-6, 1};
  EXPECT_INVALID((ConstTensorView(&x, DType::f32, shape, strides)), -6);
}

TEST(TensorErrors, ShapeAndStridesDifferInLength) {
  float x = 0;
  const std::int64_t shape[] = {2, 2}, strides[] = {2, 1, 1};
  EXPECT_INVALID((ConstTensorView(&x, DType::f32, shape, strides)), 2, 3);
}

TEST(TensorErrors, RankTooLarge) {
  float x = 0;
  EXPECT_INVALID((TensorView(&x, DType::f32, {1, 1, 1, 1, 1})), 5);
}

TEST(TensorErrors, DataAsWrongType) {
  float x = 0;
  TensorView t(&x, DType::f32, {1});
  EXPECT_INVALID(t.data_as<std::int32_t>(), "i32", "f32");
  EXPECT_EQ(t.data_as<float>(), &x);
}

int enforce_eq_line = 0;
void enforce_eq_fails() {
  const int a = 314, b = 2718;
  enforce_eq_line = __LINE__ + 1;
  FC_ENFORCE_EQ(a, b, "context ", 42);
}

TEST(Macros, EnforceEqNamesFileLineAndBothValues) {
  try {
    enforce_eq_fails();
    FAIL() << "FC_ENFORCE_EQ did not throw";
  } catch (const fusedcoll::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(fctest::str(__FILE__, ":", enforce_eq_line, ":")),
              std::string::npos)
        << what;
    EXPECT_TRUE(fctest::contains_number(what, 314)) << what;
    EXPECT_TRUE(fctest::contains_number(what, 2718)) << what;
    EXPECT_NE(what.find("a == b"), std::string::npos) << what;
    EXPECT_NE(what.find("context 42"), std::string::npos) << what;
    EXPECT_EQ(e.code(), fusedcoll::ErrorCode::invalid_argument);
  }
}

TEST(Macros, EnforceAndInternal) {
  EXPECT_INVALID(FC_ENFORCE(1 + 1 == 3, "arith ", 1234), "1 + 1 == 3", 1234);
  EXPECT_NO_THROW(FC_ENFORCE(true, "never"));
  EXPECT_NO_THROW(FC_ENFORCE_LT(1, 2, "ordered"));
  EXPECT_INVALID(FC_ENFORCE_GE(-5, 0, "sign"), -5, "sign");
  try {
    FC_CHECK_INTERNAL(false, "broken ", 7);
    FAIL() << "FC_CHECK_INTERNAL did not throw";
  } catch (const fusedcoll::InternalError& e) {
    EXPECT_EQ(e.code(), fusedcoll::ErrorCode::internal);
    EXPECT_NE(std::string(e.what()).find("broken 7"), std::string::npos);
  }
}

TEST(Macros, ErrorCodeNames) {
  EXPECT_STREQ(fusedcoll::to_string(fusedcoll::ErrorCode::invalid_argument), "invalid_argument");
  EXPECT_STREQ(fusedcoll::to_string(fusedcoll::ErrorCode::unsupported), "unsupported");
  EXPECT_STREQ(fusedcoll::to_string(fusedcoll::ErrorCode::ok), "ok");
  fusedcoll::Status st;
  EXPECT_TRUE(st.ok());
  EXPECT_TRUE(static_cast<bool>(st));
}

}  // namespace

// The environment is parsed once per process (env()), so parse a fresh copy here; the
// end-to-end path (an entry point refusing to run) is the `env_rejects_bad_kernel_isa` ctest.
TEST(EnvErrors, UnknownKernelIsaIsReportedNotIgnored) {
  ::setenv("FUSEDCOLL_KERNEL_ISA", "avx3", 1);
  const fusedcoll::Env e = fusedcoll::Env::from_environment();
  ::unsetenv("FUSEDCOLL_KERNEL_ISA");
  ASSERT_EQ(e.problems.size(), 1u);
  EXPECT_NE(e.problems[0].find("FUSEDCOLL_KERNEL_ISA='avx3'"), std::string::npos) << e.problems[0];
  EXPECT_EQ(e.kernel_isa, fusedcoll::Env::KernelIsa::automatic);
}

TEST(EnvErrors, KnownKernelIsaValuesParse) {
  for (const char* v : {"auto", "base", "avx2", "avx512"}) {
    ::setenv("FUSEDCOLL_KERNEL_ISA", v, 1);
    EXPECT_TRUE(fusedcoll::Env::from_environment().problems.empty()) << v;
  }
  ::unsetenv("FUSEDCOLL_KERNEL_ISA");
}
