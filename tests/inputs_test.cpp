// The seeded input generators (inputs.hpp): values are pure functions of (seed, stream, global
// coordinates), so any rank's data can be rebuilt alone, in any order, and does not depend on how
// the problem is split; integer mode draws small integers; outputs start poisoned.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "common/check.hpp"
#include "common/eigen_ref.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace {

using fusedcoll::DType;
using fusedcoll::EmbeddingProblem;
using fusedcoll::EmbeddingRankData;
using fusedcoll::ValueMode;

EmbeddingProblem problem(int P, DType idx, bool weighted, ValueMode values) {
  EmbeddingProblem pb;
  pb.world_size = P;
  pb.dim = 5;
  for (int t = 0; t < 2 * P + 1; ++t) {
    pb.table_rows.push_back(7 + 3 * t);
    pb.owner.push_back((t * 3) % P);
  }
  for (int q = 0; q < P; ++q) pb.batch_sizes.push_back(q % 2 == 0 ? 3 : 0);
  pb.min_bag = 0;
  pb.max_bag = 5;
  pb.weighted = weighted;
  pb.index_dtype = idx;
  pb.values = values;
  pb.seed = 424242;
  return pb;
}

void expect_same_rank_data(const EmbeddingRankData& a, const EmbeddingRankData& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.local_table_ids, b.local_table_ids);
  ASSERT_EQ(a.tables.size(), b.tables.size());
  for (std::size_t j = 0; j < a.tables.size(); ++j) {
    ASSERT_EQ(a.tables[j].size(), b.tables[j].size());
    EXPECT_TRUE(fctest::same_bits("tables", a.rank, a.tables[j], b.tables[j]));
  }
  EXPECT_EQ(a.offsets64, b.offsets64);
  EXPECT_EQ(a.indices64, b.indices64);
  EXPECT_EQ(a.offsets32, b.offsets32);
  EXPECT_EQ(a.indices32, b.indices32);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (std::size_t j = 0; j < a.weights.size(); ++j)
    EXPECT_TRUE(fctest::same_bits("weights", a.rank, a.weights[j], b.weights[j]));
  ASSERT_EQ(a.output.size(), b.output.size());
  EXPECT_EQ(0, a.output.empty() ? 0 : std::memcmp(a.output.data(), b.output.data(), a.output.size() * 4));
}

TEST(Inputs, EmbeddingRankDataRegeneratesInAnyOrder) {
  for (DType idx : {DType::i32, DType::i64}) {
    const auto pb = problem(4, idx, /*weighted=*/true, ValueMode::random);
    const auto world = fusedcoll::make_world(pb);
    // Build the ranks again, in reverse order, one at a time.
    std::vector<EmbeddingRankData> reversed;
    for (int r = pb.world_size - 1; r >= 0; --r) reversed.emplace_back(pb, r);
    for (int r = 0; r < pb.world_size; ++r) {
      SCOPED_TRACE(fctest::str("rank ", r));
      expect_same_rank_data(world[r], reversed[pb.world_size - 1 - r]);
      expect_same_rank_data(world[r], EmbeddingRankData(pb, r));
    }
  }
}

TEST(Inputs, EmbeddingDataDependsOnGlobalCoordinatesOnly) {
  // Table t's values and bags are the same whoever owns it and however the global batch is split.
  auto a = problem(4, DType::i64, true, ValueMode::random);
  auto b = a;
  b.world_size = 3;
  b.owner.assign(a.owner.size(), 0);
  for (std::size_t t = 0; t < b.owner.size(); ++t) b.owner[t] = static_cast<int>((t + 1) % 3);
  b.batch_sizes = {1, 0, a.global_batch() - 1};
  const auto wa = fusedcoll::make_world(a);
  const auto wb = fusedcoll::make_world(b);
  auto find = [](const std::vector<EmbeddingRankData>& w, int t, std::size_t* j) -> const EmbeddingRankData& {
    for (const auto& rd : w) {
      const auto it = std::find(rd.local_table_ids.begin(), rd.local_table_ids.end(), t);
      if (it != rd.local_table_ids.end()) {
        *j = static_cast<std::size_t>(it - rd.local_table_ids.begin());
        return rd;
      }
    }
    throw std::runtime_error("table not found");
  };
  for (int t = 0; t < static_cast<int>(a.owner.size()); ++t) {
    std::size_t ja = 0, jb = 0;
    const auto& ra = find(wa, t, &ja);
    const auto& rb = find(wb, t, &jb);
    EXPECT_TRUE(fctest::same_bits("table", t, ra.tables[ja], rb.tables[jb]));
    EXPECT_EQ(ra.offsets64[ja], rb.offsets64[jb]) << "table " << t;
    EXPECT_EQ(ra.indices64[ja], rb.indices64[jb]) << "table " << t;
    EXPECT_TRUE(fctest::same_bits("weights", t, ra.weights[ja], rb.weights[jb]));
  }
}

TEST(Inputs, EmbeddingI32MirrorsI64) {
  const auto pb = problem(3, DType::i32, false, ValueMode::random);
  const auto world = fusedcoll::make_world(pb);
  for (const auto& rd : world) {
    ASSERT_EQ(rd.offsets32.size(), rd.local_table_ids.size());
    for (std::size_t j = 0; j < rd.local_table_ids.size(); ++j) {
      EXPECT_TRUE(std::equal(rd.offsets32[j].begin(), rd.offsets32[j].end(),
                             rd.offsets64[j].begin(), rd.offsets64[j].end()));
      EXPECT_TRUE(std::equal(rd.indices32[j].begin(), rd.indices32[j].end(),
                             rd.indices64[j].begin(), rd.indices64[j].end()));
    }
  }
}

TEST(Inputs, EmbeddingBagsRespectProblem) {
  auto pb = problem(2, DType::i64, true, ValueMode::random);
  pb.min_bag = 2;
  pb.max_bag = 4;
  const auto world = fusedcoll::make_world(pb);
  for (const auto& rd : world) {
    for (std::size_t j = 0; j < rd.local_table_ids.size(); ++j) {
      const auto& off = rd.offsets64[j];
      ASSERT_EQ(static_cast<std::int64_t>(off.size()), pb.global_batch() + 1);
      EXPECT_EQ(off.front(), 0);
      EXPECT_EQ(off.back(), static_cast<std::int64_t>(rd.indices64[j].size()));
      EXPECT_EQ(rd.weights[j].size(), rd.indices64[j].size());
      for (std::size_t b = 0; b + 1 < off.size(); ++b) {
        EXPECT_GE(off[b + 1] - off[b], 2);
        EXPECT_LE(off[b + 1] - off[b], 4);
      }
      const std::int64_t rows = pb.table_rows[rd.local_table_ids[j]];
      for (auto i : rd.indices64[j]) {
        EXPECT_GE(i, 0);
        EXPECT_LT(i, rows);
      }
      EXPECT_EQ(rd.tables[j].size(), static_cast<std::size_t>(rows * pb.dim));
    }
  }
}

bool is_small_integer(float v, float bound) { return v == std::trunc(v) && std::abs(v) <= bound; }

TEST(Inputs, IntegerModeDrawsSmallIntegers) {
  const auto pb = problem(3, DType::i64, true, ValueMode::integer);
  const auto world = fusedcoll::make_world(pb);
  int distinct_mask = 0;  // which of -4..4 occur
  for (const auto& rd : world) {
    for (const auto& t : rd.tables) {
      for (float v : t) {
        ASSERT_TRUE(is_small_integer(v, 4.0f)) << v;
        distinct_mask |= 1 << static_cast<int>(v + 4);
      }
    }
    for (const auto& w : rd.weights)
      for (float v : w) ASSERT_TRUE(is_small_integer(v, 2.0f)) << "weight " << v;
  }
  EXPECT_EQ(distinct_mask, 0x1FF) << "all of -4..4 should occur";

  fusedcoll::GemvProblem g;
  g.world_size = 2;
  g.m = 3;
  g.n = 7;
  g.k_splits = {5, 6};
  g.values = ValueMode::integer;
  for (const auto& rd : fusedcoll::make_world(g)) {
    for (float v : rd.w) ASSERT_TRUE(is_small_integer(v, 4.0f)) << v;
    for (float v : rd.x) ASSERT_TRUE(is_small_integer(v, 4.0f)) << v;
  }

  fusedcoll::GemmProblem m;
  m.world_size = 2;
  m.k = 4;
  m.n = 3;
  m.host = {0, 1, 1};
  m.values = ValueMode::integer;
  m.random_routing(3);
  for (const auto& rd : fusedcoll::make_world(m)) {
    for (const auto& a : rd.a)
      for (float v : a) ASSERT_TRUE(is_small_integer(v, 4.0f)) << v;
    for (const auto& w : rd.w)
      for (float v : w) ASSERT_TRUE(is_small_integer(v, 4.0f)) << v;
  }

  for (std::uint64_t i = 0; i < 200; ++i) {
    const float v = fusedcoll::draw_value(5, 6, 7, i, ValueMode::integer);
    ASSERT_TRUE(is_small_integer(v, 4.0f)) << v;
  }
  std::vector<std::int32_t> ints(100);
  fusedcoll::fill_values(ints.data(), 100, DType::i32, 1, 2, 3, ValueMode::integer);
  for (auto v : ints) EXPECT_TRUE(v >= -4 && v <= 4) << v;
}

TEST(Inputs, RandomModeMixesMagnitudesInRange) {
  bool saw_fraction = false, saw_negative = false, saw_positive = false;
  bool saw_small = false, saw_large = false;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const float v = fusedcoll::draw_value(11, 1, 2, i, ValueMode::random);
    ASSERT_GT(v, -2.0f);
    ASSERT_LT(v, 2.0f);
    saw_fraction |= v != std::trunc(v);
    saw_negative |= v < 0;
    saw_positive |= v > 0;
    saw_small |= std::fabs(v) < 0x1p-5f && v != 0.0f;
    saw_large |= std::fabs(v) >= 1.0f;
  }
  EXPECT_TRUE(saw_fraction && saw_negative && saw_positive);
  // Mixed magnitudes are what make a wrong summation order visible in the bits.
  EXPECT_TRUE(saw_small && saw_large);
}

TEST(Inputs, HashDrawIsAPureFunction) {
  EXPECT_EQ(fusedcoll::hash_draw(1, 2, 3, 4), fusedcoll::hash_draw(1, 2, 3, 4));
  EXPECT_NE(fusedcoll::hash_draw(1, 2, 3, 4), fusedcoll::hash_draw(2, 2, 3, 4));
  EXPECT_NE(fusedcoll::hash_draw(1, 2, 3, 4), fusedcoll::hash_draw(1, 3, 3, 4));
  EXPECT_NE(fusedcoll::hash_draw(1, 2, 3, 4), fusedcoll::hash_draw(1, 2, 4, 4));
  EXPECT_NE(fusedcoll::hash_draw(1, 2, 3, 4), fusedcoll::hash_draw(1, 2, 3, 5));
  EXPECT_NE(fusedcoll::hash_draw(1, 2, 3, 4), fusedcoll::hash_draw(1, 2, 4, 3));
}

TEST(Inputs, FillValuesKeyedByRank) {
  std::vector<float> a(64), b(64), c(64);
  fusedcoll::fill_values(a.data(), 64, DType::f32, 9, 1, 0, ValueMode::random);
  fusedcoll::fill_values(b.data(), 64, DType::f32, 9, 1, 0, ValueMode::random);
  fusedcoll::fill_values(c.data(), 64, DType::f32, 9, 1, 1, ValueMode::random);
  EXPECT_TRUE(fctest::same_bits("fill", 0, a, b));
  EXPECT_NE(a, c);
  // A prefix is the same as a shorter fill: values depend on the index, not the count.
  std::vector<float> d(10);
  fusedcoll::fill_values(d.data(), 10, DType::f32, 9, 1, 0, ValueMode::random);
  EXPECT_TRUE(std::equal(d.begin(), d.end(), a.begin()));
}

TEST(Inputs, SplitEvenly) {
  EXPECT_EQ(fusedcoll::split_evenly(10, 3), (std::vector<std::int64_t>{4, 3, 3}));
  EXPECT_EQ(fusedcoll::split_evenly(11, 4), (std::vector<std::int64_t>{3, 3, 3, 2}));
  EXPECT_EQ(fusedcoll::split_evenly(2, 5), (std::vector<std::int64_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(fusedcoll::split_evenly(0, 2), (std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(fusedcoll::split_evenly(7, 1), (std::vector<std::int64_t>{7}));
  for (int parts : {1, 2, 3, 7, 8}) {
    for (std::int64_t total : {0, 1, 5, 64, 1001}) {
      const auto s = fusedcoll::split_evenly(total, parts);
      ASSERT_EQ(s.size(), static_cast<std::size_t>(parts));
      std::int64_t sum = 0;
      for (int p = 0; p < parts; ++p) {
        sum += s[p];
        EXPECT_EQ(s[p], total / parts + (p < total % parts ? 1 : 0));
      }
      EXPECT_EQ(sum, total);
    }
  }
}

TEST(Inputs, FreshOutputsArePoisoned) {
  const auto pb = problem(3, DType::i64, false, ValueMode::random);
  for (const auto& rd : fusedcoll::make_world(pb)) {
    EXPECT_EQ(static_cast<std::int64_t>(rd.output.size()),
              pb.batch_sizes[rd.rank] * pb.num_tables() * pb.dim);
    EXPECT_TRUE(fctest::all_poison(rd.output)) << "rank " << rd.rank;
  }
  fusedcoll::GemvProblem g;
  g.world_size = 2;
  g.m = 2;
  g.n = 5;
  g.k_splits = {3, 1};
  for (const auto& rd : fusedcoll::make_world(g)) {
    EXPECT_EQ(rd.y.size(), 10u);
    EXPECT_TRUE(fctest::all_poison(rd.y));
  }
  fusedcoll::GemmProblem m;
  m.world_size = 2;
  m.k = 2;
  m.n = 3;
  m.host = {1, 0};
  m.counts = {2, 1, 0, 4};
  const auto gw = fusedcoll::make_world(m);
  EXPECT_EQ(gw[0].output.size(), 9u);
  EXPECT_EQ(gw[1].output.size(), 12u);
  for (const auto& rd : gw) EXPECT_TRUE(fctest::all_poison(rd.output));
}

TEST(Inputs, PoisonIsAQuietNaNNeverEqualToItself) {
  const float p = std::bit_cast<float>(fusedcoll::kPoisonBits);
  EXPECT_TRUE(std::isnan(p));
  EXPECT_NE(p, p);
  // Byte-exact pattern even for a length that is not a multiple of 4.
  std::vector<unsigned char> buf(11, 0);
  fusedcoll::poison(buf.data(), buf.size());
  std::uint32_t word;
  std::memcpy(&word, buf.data() + 4, 4);
  EXPECT_EQ(word, fusedcoll::kPoisonBits);
  std::uint32_t tail = 0;
  std::memcpy(&tail, buf.data() + 8, 3);
  EXPECT_EQ(tail, fusedcoll::kPoisonBits & 0xFFFFFFu);
}

TEST(Inputs, GemvGlobalMatricesDoNotDependOnTheSplit) {
  auto assemble = [](const fusedcoll::GemvProblem& pb) {
    const auto world = fusedcoll::make_world(pb);
    const std::int64_t K = pb.k();
    std::vector<float> W(pb.n * K), X(pb.m * K);
    std::int64_t k0 = 0;
    for (int p = 0; p < pb.world_size; ++p) {
      const std::int64_t kp = pb.k_splits[p];
      for (std::int64_t n = 0; n < pb.n; ++n)
        for (std::int64_t j = 0; j < kp; ++j) W[n * K + k0 + j] = world[p].w[n * kp + j];
      for (std::int64_t m = 0; m < pb.m; ++m)
        for (std::int64_t j = 0; j < kp; ++j) X[m * K + k0 + j] = world[p].x[m * kp + j];
      k0 += kp;
    }
    return std::make_pair(W, X);
  };
  fusedcoll::GemvProblem a;
  a.world_size = 1;
  a.m = 3;
  a.n = 4;
  a.k_splits = {8};
  a.seed = 77;
  auto b = a;
  b.world_size = 3;
  b.k_splits = {3, 0, 5};
  const auto [wa, xa] = assemble(a);
  const auto [wb, xb] = assemble(b);
  EXPECT_TRUE(fctest::same_bits("W", 0, wa, wb));
  EXPECT_TRUE(fctest::same_bits("x", 0, xa, xb));
}

TEST(Inputs, GemmRankDataRegeneratesInAnyOrder) {
  fusedcoll::GemmProblem pb;
  pb.world_size = 3;
  pb.k = 4;
  pb.n = 5;
  pb.host = {2, 0, 2, 1};
  pb.seed = 5;
  pb.random_routing(3);
  const auto world = fusedcoll::make_world(pb);
  for (int r = 2; r >= 0; --r) {
    const fusedcoll::GemmRankData again(pb, r);
    EXPECT_EQ(again.local_expert_ids, world[r].local_expert_ids);
    EXPECT_EQ(again.a, world[r].a);
    EXPECT_EQ(again.w, world[r].w);
  }
  // Routing counts are a pure function of the seed, in [0, max_rows].
  auto pb2 = pb;
  pb2.random_routing(3);
  EXPECT_EQ(pb2.counts, pb.counts);
  for (auto c : pb.counts) {
    EXPECT_GE(c, 0);
    EXPECT_LE(c, 3);
  }
  EXPECT_EQ(pb.counts.size(), 12u);
}

TEST(Inputs, ViewsSurviveAMove) {
  const auto pb = problem(2, DType::i32, true, ValueMode::integer);
  std::vector<EmbeddingRankData> world;
  world.emplace_back(pb, 0);
  world.emplace_back(pb, 1);
  world.reserve(64);  // moves both elements
  auto args = fusedcoll::args_of(world);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(args[r].output.data(), world[r].output.data());
    for (std::size_t j = 0; j < world[r].tables.size(); ++j) {
      EXPECT_EQ(args[r].local_tables[j].weights.data(), world[r].tables[j].data());
      EXPECT_EQ(args[r].local_tables[j].indices.data(), world[r].indices32[j].data());
      EXPECT_EQ(args[r].local_tables[j].per_sample_weights.data(), world[r].weights[j].data());
    }
  }
  fusedcoll::ref::embedding_alltoall(args);
  const auto expected = fctest::embedding_expected(pb, world);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(fctest::all_close("embedding_alltoall", r, world[r].output, expected[r].value,
                                  expected[r].tol));
}

TEST(Inputs, ChecksumIsFnv1a) {
  // Published FNV-1a 64-bit test vectors.
  EXPECT_EQ(fusedcoll::checksum("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(fusedcoll::checksum("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fusedcoll::checksum("foobar", 6), 0x85944171f73967e8ull);
}

TEST(Inputs, DefaultProblemsMatchTheirDocumentation) {
  for (int P : {1, 2, 8}) {
    SCOPED_TRACE(fctest::str("P ", P));
    const auto e = EmbeddingProblem::dlrm(P);
    EXPECT_EQ(e.world_size, P);
    EXPECT_EQ(e.dim, 64);
    EXPECT_EQ(e.num_tables(), 8 * P);
    std::vector<int> round_robin;
    for (int t = 0; t < e.num_tables(); ++t) round_robin.push_back(t % P);
    EXPECT_EQ(e.owner, round_robin);
    std::vector<std::int64_t> table_rows;
    for (int t = 0; t < e.num_tables(); ++t) table_rows.push_back(10000 + 1000 * (t % 5));
    EXPECT_EQ(e.table_rows, table_rows) << "inputs.hpp: table t has 10000 + 1000 * (t % 5) rows";
    EXPECT_EQ(e.pooling, fusedcoll::PoolingMode::sum);
    EXPECT_EQ(e.seed, 2024u);
    EXPECT_EQ(e.batch_sizes, std::vector<std::int64_t>(P, 256));
    EXPECT_EQ(e.min_bag, 1);
    EXPECT_EQ(e.max_bag, 40);

    const auto g = fusedcoll::GemvProblem::transformer(P);
    EXPECT_EQ(g.m, 4);
    EXPECT_EQ(g.n, 4096);
    EXPECT_EQ(g.k(), 11008);
    EXPECT_EQ(g.k_splits, fusedcoll::split_evenly(11008, P));

    const auto m = fusedcoll::GemmProblem::moe(P);
    EXPECT_EQ(m.k, 1024);
    EXPECT_EQ(m.n, 512);
    EXPECT_EQ(m.num_experts(), 2 * P);
    std::vector<int> hosted(P, 0);
    for (int h : m.host) hosted.at(h)++;
    for (int r = 0; r < P; ++r) EXPECT_EQ(hosted[r], 2) << "rank " << r;
    ASSERT_EQ(m.counts.size(), static_cast<std::size_t>(P * 2 * P));
    std::int64_t rows = 0;
    for (auto c : m.counts) rows += c;
    EXPECT_GT(rows, 128 * P) << "about 256 rows per source rank";
    EXPECT_LT(rows, 384 * P) << "about 256 rows per source rank";
  }
}

}  // namespace
