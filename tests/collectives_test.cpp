// The standalone ref collectives against simple independent loops written from the definitions in
// collectives.hpp: direct = ((v0 + v1) + v2) + ..., ring chunk c = ((v_{c+1} + v_{c+2}) + ...) + v_c
// (indices mod P, chunks from chunk_of), reduce-scatter in rank order, avg = sum / P, integer sums
// wrap. Floats are compared bit for bit (any NaN matches any NaN); bytes are compared with memcmp.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.hpp"
#include "common/worlds.hpp"
#include "fusedcoll/collectives.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace {

using fusedcoll::AllReduceAlgo;
using fusedcoll::DType;
using fusedcoll::ReduceOp;

const std::int64_t kCounts[] = {0, 1, 7, 1000};  // 1000 is not divisible by 3, 7 or 8
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};

// ---------------------------------------------------------------------------------------------
// Independent semantics.

/// Chunk c of count split into P parts, the first count % P one larger (from the header's words).
fusedcoll::Chunk my_chunk(std::int64_t count, int P, int c) {
  const std::int64_t base = count / P, extra = count % P;
  fusedcoll::Chunk ch;
  ch.length = base + (c < extra ? 1 : 0);
  ch.offset = c * base + std::min<std::int64_t>(c, extra);
  return ch;
}

template <class T>
T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return a + b;
      // semantics.md, "Reduction operators": a NaN accumulator stays, else a NaN operand is
      // taken; ties (and +0 / -0) keep the accumulator. So the payload and zero sign are pinned.
      case ReduceOp::min: return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a);
      case ReduceOp::max: return std::isnan(a) ? a : std::isnan(b) ? b : (b > a ? b : a);
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));  // wraps
      case ReduceOp::min: return b < a ? b : a;
      case ReduceOp::max: return b > a ? b : a;
    }
  }
  return a;
}

template <class T>
T finish(T acc, ReduceOp op, int P) {
  if (op != ReduceOp::avg) return acc;
  return acc / static_cast<T>(P);  // floats: one division; integers: truncating division
}

/// The expected AllReduce result from every rank's input, in the algorithm's pinned order.
template <class T>
std::vector<T> expected_all_reduce(const std::vector<std::vector<T>>& v, std::int64_t count,
                                   ReduceOp op, AllReduceAlgo algo) {
  const int P = static_cast<int>(v.size());
  std::vector<T> out(static_cast<std::size_t>(count));
  for (int c = 0; c < P; ++c) {
    const auto ch = my_chunk(count, P, c);
    for (std::int64_t i = ch.offset; i < ch.offset + ch.length; ++i) {
      T acc;
      if (algo == AllReduceAlgo::direct) {
        acc = v[0][i];
        for (int r = 1; r < P; ++r) acc = combine(acc, v[r][i], op);
      } else {
        acc = v[(c + 1) % P][i];
        for (int j = 2; j <= P; ++j) acc = combine(acc, v[(c + j) % P][i], op);
      }
      out[i] = finish(acc, op, P);
    }
  }
  return out;
}

template <class T>
std::string bits_note(T expected, T actual) {
  if constexpr (std::is_same_v<T, float>) {
    return fctest::str(" (", fctest::hex_bits(expected), " vs ", fctest::hex_bits(actual), ")");
  } else {
    return "";
  }
}

template <class T>
::testing::AssertionResult same_values(std::string_view what, int rank, const T* actual,
                                       const std::vector<T>& expected) {
  for (std::size_t i = 0; i < expected.size(); ++i) {
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      // Bit for bit: the sign of a zero and a NaN's payload are pinned too.
      ok = std::bit_cast<std::uint32_t>(actual[i]) == std::bit_cast<std::uint32_t>(expected[i]);
    } else {
      ok = actual[i] == expected[i];
    }
    if (!ok) {
      return ::testing::AssertionFailure()
             << what << " rank " << rank << " index " << i << ": expected "
             << std::setprecision(9) << expected[i] << " actual " << actual[i]
             << bits_note(expected[i], actual[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

/// Random inputs. Floats get a random binary exponent in [-12, 12] on top of the generator's
/// [-1, 1) values: those lie on a 2^-23 grid, so sums of a few of them are exact in any order,
/// and a test fed only with them could not tell two summation orders apart.
template <class T>
std::vector<std::vector<T>> random_inputs(int P, std::int64_t count, std::uint64_t seed) {
  std::vector<std::vector<T>> v(P, std::vector<T>(static_cast<std::size_t>(count)));
  for (int r = 0; r < P; ++r) {
    fusedcoll::fill_values(v[r].data(), count, fusedcoll::dtype_of<T>, seed, 1, r,
                           fusedcoll::ValueMode::random);
    if constexpr (std::is_floating_point_v<T>) {
      for (std::int64_t i = 0; i < count; ++i) {
        const int e = static_cast<int>(fusedcoll::hash_draw(seed, 2, r, i) % 25) - 12;
        v[r][i] = std::ldexp(v[r][i], e);
      }
    }
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// chunk_of

TEST(ChunkOf, MatchesDefinition) {
  for (int P : {1, 2, 3, 4, 7, 8}) {
    for (std::int64_t count : {0, 1, 2, 5, 7, 8, 9, 1000, 1001}) {
      std::int64_t next = 0;
      for (int c = 0; c < P; ++c) {
        const auto got = fusedcoll::chunk_of(count, P, c);
        const auto want = my_chunk(count, P, c);
        EXPECT_EQ(got.offset, want.offset) << "count " << count << " P " << P << " c " << c;
        EXPECT_EQ(got.length, want.length) << "count " << count << " P " << P << " c " << c;
        EXPECT_EQ(got.offset, next);  // contiguous cover
        next = got.offset + got.length;
      }
      EXPECT_EQ(next, count);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AllReduce

struct ArParam {
  int P;
  AllReduceAlgo algo;
  DType dtype;
};

std::string ar_name(const ArParam& p);
void PrintTo(const ArParam& p, std::ostream* os) { *os << ar_name(p); }

std::string ar_name(const ArParam& p) {
  return fctest::str("P", p.P, "_", fusedcoll::to_string(p.algo), "_",
                     fusedcoll::dtype_name(p.dtype));
}

class AllReduce : public ::testing::TestWithParam<ArParam> {
 protected:
  template <class T>
  void run_all(bool in_place) {
    const auto [P, algo, dtype] = GetParam();
    std::uint64_t seed = 31 + static_cast<std::uint64_t>(P) * 100;
    for (ReduceOp op : kOps) {
      for (std::int64_t count : kCounts) {
        SCOPED_TRACE(fctest::str("op ", fusedcoll::to_string(op), " count ", count,
                                 in_place ? " in place" : ""));
        const auto in = random_inputs<T>(P, count, ++seed);
        const auto want = expected_all_reduce(in, count, op, algo);
        std::vector<std::vector<T>> send = in, recv(P);
        std::vector<fusedcoll::AllReduceArgs> args(P);
        for (int r = 0; r < P; ++r) {
          recv[r].assign(static_cast<std::size_t>(count), T{});
          if (count > 0) fusedcoll::poison(recv[r].data(), recv[r].size() * sizeof(T));
          args[r].send = send[r].data();
          args[r].recv = in_place ? static_cast<void*>(send[r].data()) : recv[r].data();
          args[r].count = count;
          args[r].dtype = dtype;
          args[r].op = op;
          args[r].algo = algo;
        }
        fusedcoll::ref::all_reduce(args);
        for (int r = 0; r < P; ++r) {
          const T* got = in_place ? send[r].data() : recv[r].data();
          EXPECT_TRUE(same_values("all_reduce", r, got, want));
          if (!in_place) {
            EXPECT_EQ(send[r], in[r]) << "send buffer of rank " << r << " modified";
          }
        }
      }
    }
  }
};

TEST_P(AllReduce, MatchesPinnedOrder) {
  switch (GetParam().dtype) {
    case DType::f32: run_all<float>(false); break;
    case DType::i32: run_all<std::int32_t>(false); break;
    case DType::i64: run_all<std::int64_t>(false); break;
    default: FAIL();
  }
}

TEST_P(AllReduce, InPlace) {
  switch (GetParam().dtype) {
    case DType::f32: run_all<float>(true); break;
    case DType::i32: run_all<std::int32_t>(true); break;
    case DType::i64: run_all<std::int64_t>(true); break;
    default: FAIL();
  }
}

std::vector<ArParam> ar_params() {
  std::vector<ArParam> out;
  for (int P : fctest::kWorldSizes)
    for (auto algo : {AllReduceAlgo::direct, AllReduceAlgo::ring})
      for (auto dt : {DType::f32, DType::i32, DType::i64}) out.push_back({P, algo, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, AllReduce, ::testing::ValuesIn(ar_params()),
                         [](const auto& p) { return ar_name(p.param); });

/// Runs a float sum AllReduce on the given per-rank vectors and returns rank `r`'s result.
std::vector<std::vector<float>> run_f32(std::vector<std::vector<float>> v, ReduceOp op,
                                        AllReduceAlgo algo) {
  const int P = static_cast<int>(v.size());
  std::vector<std::vector<float>> out(P, std::vector<float>(v[0].size(), -1.0f));
  std::vector<fusedcoll::AllReduceArgs> args(P);
  for (int r = 0; r < P; ++r) {
    args[r].send = v[r].data();
    args[r].recv = out[r].data();
    args[r].count = static_cast<std::int64_t>(v[r].size());
    args[r].op = op;
    args[r].algo = algo;
  }
  fusedcoll::ref::all_reduce(args);
  return out;
}

TEST(AllReduceOrder, HandPickedValuesSeparateDirectFromRing) {
  // P = 3, count = 3: element c is chunk c (owner c). With a = 2^24, 1 + a rounds to a (ties to
  // even), so the order of the three additions decides the result.
  constexpr float a = 0x1p24f;
  //                 elem 0      elem 1     elem 2
  const std::vector<std::vector<float>> v = {{1.0f, a, 1.0f},     // rank 0
                                             {a, 1.0f, a},        // rank 1
                                             {-a, -a, -a}};       // rank 2
  // direct, every element: (v0 + v1) + v2.
  //   e0: (1 + a) + -a = a - a = 0;  e1: (a + 1) + -a = 0;  e2: (1 + a) + -a = 0.
  // ring, chunk c starts at rank c + 1: ((v_{c+1} + v_{c+2}) + v_c).
  //   e0 (c=0): (v1 + v2) + v0 = (a - a) + 1 = 1
  //   e1 (c=1): (v2 + v0) + v1 = (-a + a) + 1 = 1
  //   e2 (c=2): (v0 + v1) + v2 = (1 + a) - a = 0   (the last chunk's ring order is rank order)
  const auto direct = run_f32(v, ReduceOp::sum, AllReduceAlgo::direct);
  const auto ring = run_f32(v, ReduceOp::sum, AllReduceAlgo::ring);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(fctest::same_bits("direct", r, direct[r], std::vector<float>{0.0f, 0.0f, 0.0f}));
    EXPECT_TRUE(fctest::same_bits("ring", r, ring[r], std::vector<float>{1.0f, 1.0f, 0.0f}));
  }
  // avg divides the pinned sum: ring e0 = 1 / 3.
  const auto ring_avg = run_f32(v, ReduceOp::avg, AllReduceAlgo::ring);
  EXPECT_EQ(ring_avg[1][0], 1.0f / 3.0f);
  EXPECT_EQ(ring_avg[1][2], 0.0f);
}

TEST(AllReduceOrder, RingChunksFollowChunkOf) {
  // P = 3, count = 4: chunk_of gives chunk 0 = elements {0, 1} (the one extra element goes to
  // the first chunk), chunk 1 = {2}, chunk 2 = {3}. Every element holds the same trap values, so
  // each element's result reveals which chunk's ring order was used.
  constexpr float a = 0x1p24f;
  const std::vector<std::vector<float>> v = {{1, 1, 1, 1}, {a, a, a, a}, {-a, -a, -a, -a}};
  const auto ring = run_f32(v, ReduceOp::sum, AllReduceAlgo::ring);
  // chunk 0: (v1 + v2) + v0 = 1.  chunk 1: (v2 + v0) + v1 = (-a + 1) + a = 1 (-a + 1 is exact).
  // chunk 2: (v0 + v1) + v2 = 0. (Putting the extra element last would give {1, 1, 0, 0}.)
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(fctest::same_bits("ring", r, ring[r], std::vector<float>{1, 1, 1, 0}));
}

TEST(AllReduceNaN, MinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto algo : {AllReduceAlgo::direct, AllReduceAlgo::ring}) {
    for (auto op : {ReduceOp::min, ReduceOp::max}) {
      for (int nan_rank = 0; nan_rank < 4; ++nan_rank) {
        std::vector<std::vector<float>> v(4, std::vector<float>{1.0f, -2.0f, 3.0f, 5.0f, -7.0f});
        for (std::size_t i = 0; i < v[0].size(); ++i) v[nan_rank][i] = nan;
        const auto out = run_f32(v, op, algo);
        for (int r = 0; r < 4; ++r)
          for (float x : out[r])
            EXPECT_TRUE(std::isnan(x)) << fusedcoll::to_string(algo) << " "
                                       << fusedcoll::to_string(op) << " NaN on rank " << nan_rank
                                       << ": rank " << r << " got " << x;
      }
    }
  }
}

float nan_with_payload(std::uint32_t payload) {
  return std::bit_cast<float>(0x7FC00000u | (payload & 0x3FFFFFu));
}

TEST(AllReduceNaN, MinMaxZeroSignAndNaNPayloadFollowTheOrder) {
  // P = 3, count = 3, element c is chunk c. Rank values per element:
  //   element 0: +0, -0, +0      element 1: NaN(1), NaN(2), 1      element 2: 5, NaN(2), -0
  const float n1 = nan_with_payload(1), n2 = nan_with_payload(2);
  const std::vector<std::vector<float>> v = {{+0.0f, n1, 5.0f}, {-0.0f, n2, n2}, {+0.0f, 1.0f, -0.0f}};
  // min, direct (v0 op v1) op v2:
  //   e0: +0 (ties keep acc)   e1: NaN(1) (NaN acc stays)   e2: 5 then NaN(2) taken, stays: NaN(2)
  // min, ring (chunk c starts at rank c + 1):
  //   e0: -0, +0, +0 -> -0     e1: starts v2 = 1, then v0 = NaN(1) -> NaN(1), then stays
  //   e2: starts v0 (c = 2 is rank order) -> same as direct: NaN(2)
  const auto direct = run_f32(v, ReduceOp::min, AllReduceAlgo::direct);
  const auto ring = run_f32(v, ReduceOp::min, AllReduceAlgo::ring);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(fctest::same_bits("min direct", r, direct[r], std::vector<float>{+0.0f, n1, n2}));
    EXPECT_TRUE(fctest::same_bits("min ring", r, ring[r], std::vector<float>{-0.0f, n1, n2}));
  }
  // max behaves the same on these ties and NaNs.
  const auto ring_max = run_f32(v, ReduceOp::max, AllReduceAlgo::ring);
  EXPECT_TRUE(fctest::same_bits("max ring", 0, ring_max[0], std::vector<float>{-0.0f, n1, n2}));

  // Generic: many signed zeros, equal values and payload-carrying NaNs, every world size, both
  // algorithms, against the pinned loop, bit for bit.
  for (int P : fctest::kWorldSizes) {
    for (auto algo : {AllReduceAlgo::direct, AllReduceAlgo::ring}) {
      for (auto op : {ReduceOp::min, ReduceOp::max}) {
        SCOPED_TRACE(fctest::str("P ", P, " ", fusedcoll::to_string(algo), " ",
                                 fusedcoll::to_string(op)));
        const std::int64_t count = 37;
        std::vector<std::vector<float>> in(P, std::vector<float>(count));
        const float pool[] = {+0.0f, -0.0f, 1.0f, -1.0f, 2.0f};
        for (int r = 0; r < P; ++r) {
          for (std::int64_t i = 0; i < count; ++i) {
            const auto h = fusedcoll::hash_draw(3, 4, r, i);
            in[r][i] = h % 9 == 0 ? nan_with_payload(static_cast<std::uint32_t>(16 * r + 1))
                                  : pool[h % 5];
          }
        }
        const auto want = expected_all_reduce(in, count, op, algo);
        const auto got = run_f32(in, op, algo);
        for (int r = 0; r < P; ++r) EXPECT_TRUE(same_values("all_reduce", r, got[r].data(), want));
      }
    }
  }
}

TEST(AllReduceOrder, NegativeZeroSumIsNegativeZero) {
  // Cross-rank folds start from v_0, not from +0: -0 + -0 = -0 on every rank count.
  for (int P : fctest::kWorldSizes) {
    for (auto algo : {AllReduceAlgo::direct, AllReduceAlgo::ring}) {
      const auto out = run_f32(std::vector<std::vector<float>>(P, std::vector<float>(5, -0.0f)),
                               ReduceOp::sum, algo);
      for (int r = 0; r < P; ++r)
        EXPECT_TRUE(fctest::same_bits(fusedcoll::to_string(algo), r, out[r],
                                      std::vector<float>(5, -0.0f)));
    }
  }
}

TEST(AllReduceOrder, SemanticsWorkedExample) {
  // semantics.md, AllReduce: v = (1e8, 1, -1e8) in all three elements: direct [0, 0, 0],
  // ring [0, 1, 0]; and with count = 1, v = (1, 1e8, -1e8): direct 0, ring 1.
  const auto v3 = [](float a, float b, float c, std::size_t n) {
    return std::vector<std::vector<float>>{std::vector<float>(n, a), std::vector<float>(n, b),
                                           std::vector<float>(n, c)};
  };
  const auto direct = run_f32(v3(1e8f, 1.0f, -1e8f, 3), ReduceOp::sum, AllReduceAlgo::direct);
  const auto ring = run_f32(v3(1e8f, 1.0f, -1e8f, 3), ReduceOp::sum, AllReduceAlgo::ring);
  EXPECT_TRUE(fctest::same_bits("direct", 0, direct[0], std::vector<float>{0, 0, 0}));
  EXPECT_TRUE(fctest::same_bits("ring", 0, ring[0], std::vector<float>{0, 1, 0}));
  const auto chain = run_f32(v3(1e8f, 1.0f, -1e8f, 3), ReduceOp::sum, AllReduceAlgo::chain);
  EXPECT_TRUE(fctest::same_bits("chain", 0, chain[0], std::vector<float>{0, 0, 0}));
  const auto d1 = run_f32(v3(1.0f, 1e8f, -1e8f, 1), ReduceOp::sum, AllReduceAlgo::direct);
  const auto r1 = run_f32(v3(1.0f, 1e8f, -1e8f, 1), ReduceOp::sum, AllReduceAlgo::ring);
  EXPECT_EQ(d1[2][0], 0.0f);
  EXPECT_EQ(r1[2][0], 1.0f);
}

TEST(AllReduceInt, SumWrapsAndAvgTruncates) {
  {
    std::vector<std::vector<std::int32_t>> v = {{std::numeric_limits<std::int32_t>::max(), -7},
                                                {1, 0},
                                                {0, 0}};
    std::vector<std::vector<std::int32_t>> out(3, std::vector<std::int32_t>(2, 99));
    for (auto op : {ReduceOp::sum, ReduceOp::avg}) {
      std::vector<fusedcoll::AllReduceArgs> args(3);
      for (int r = 0; r < 3; ++r) args[r] = {v[r].data(), out[r].data(), 2, DType::i32, op,
                                             AllReduceAlgo::ring};
      fusedcoll::ref::all_reduce(args);
      for (int r = 0; r < 3; ++r) {
        if (op == ReduceOp::sum) {
          EXPECT_EQ(out[r][0], std::numeric_limits<std::int32_t>::min()) << "sum must wrap";
          EXPECT_EQ(out[r][1], -7);
        } else {
          // INT32_MIN / 3 truncates toward zero; -7 / 3 = -2 (not -3).
          EXPECT_EQ(out[r][0], std::numeric_limits<std::int32_t>::min() / 3);
          EXPECT_EQ(out[r][1], -2);
        }
      }
    }
  }
  {
    std::vector<std::vector<std::int64_t>> v = {{std::numeric_limits<std::int64_t>::min()}, {-1}};
    std::vector<std::vector<std::int64_t>> out(2, std::vector<std::int64_t>(1, 5));
    std::vector<fusedcoll::AllReduceArgs> args(2);
    for (int r = 0; r < 2; ++r)
      args[r] = {v[r].data(), out[r].data(), 1, DType::i64, ReduceOp::sum, AllReduceAlgo::direct};
    fusedcoll::ref::all_reduce(args);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(out[r][0], std::numeric_limits<std::int64_t>::max());
  }
}

TEST(AllReduceAliasing, RecvOfOneRankIsSendOfAnother) {
  // ref.hpp: every input is read before any output is written, so rank 1 may receive into the
  // buffer rank 0 sends from (ranks sharing memory in one process).
  const auto in = random_inputs<float>(3, 10, 99);
  const auto want = expected_all_reduce(in, 10, ReduceOp::sum, AllReduceAlgo::ring);
  auto send = in;
  std::vector<float> r0(10), r2(10);
  std::vector<fusedcoll::AllReduceArgs> args(3);
  args[0] = {send[0].data(), r0.data(), 10, DType::f32, ReduceOp::sum, AllReduceAlgo::ring};
  args[1] = {send[1].data(), send[0].data(), 10, DType::f32, ReduceOp::sum, AllReduceAlgo::ring};
  args[2] = {send[2].data(), r2.data(), 10, DType::f32, ReduceOp::sum, AllReduceAlgo::ring};
  fusedcoll::ref::all_reduce(args);
  EXPECT_TRUE(same_values("all_reduce", 0, r0.data(), want));
  EXPECT_TRUE(same_values("all_reduce", 1, send[0].data(), want));
  EXPECT_TRUE(same_values("all_reduce", 2, r2.data(), want));
}

// ---------------------------------------------------------------------------------------------
// All-to-Allv

class AllToAllv : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(AllToAllv, UnevenCountsGappedDisplacements) {
  const auto [P, dtype] = GetParam();
  const std::size_t es = fusedcoll::dtype_size(dtype);
  // counts[r][q]: elements r sends to q; many zeros (and rank 0 receives nothing from rank 1).
  std::vector<std::vector<std::int64_t>> counts(P, std::vector<std::int64_t>(P));
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < P; ++q) counts[r][q] = (r * 7 + q * 3 + P) % 5;
  if (P > 1) counts[1][0] = 0;

  // Send layout: peers in reverse order, 2 elements of gap after each block.
  // Receive layout: sources in order, 1 element of gap before each block.
  std::vector<fusedcoll::AllToAllvArgs> args(P);
  std::vector<std::vector<unsigned char>> send(P), recv(P), want(P);
  for (int r = 0; r < P; ++r) {
    auto& a = args[r];
    a.dtype = dtype;
    a.send_counts.assign(P, 0);
    a.send_displs.assign(P, 0);
    a.recv_counts.assign(P, 0);
    a.recv_displs.assign(P, 0);
    std::int64_t pos = 0;
    for (int q = P - 1; q >= 0; --q) {
      a.send_counts[q] = counts[r][q];
      a.send_displs[q] = pos;
      pos += counts[r][q] + 2;
    }
    send[r].resize(static_cast<std::size_t>(pos) * es);
    fusedcoll::fill_values(send[r].data(), pos, dtype, 77, 3, r, fusedcoll::ValueMode::random);
    pos = 0;
    for (int s = 0; s < P; ++s) {
      pos += 1;
      a.recv_counts[s] = counts[s][r];
      a.recv_displs[s] = pos;
      pos += counts[s][r];
    }
    recv[r].assign(static_cast<std::size_t>(pos) * es, 0xA5);  // gaps must keep this
  }
  for (int q = 0; q < P; ++q) {
    want[q] = recv[q];
    for (int s = 0; s < P; ++s) {
      std::memcpy(want[q].data() + args[q].recv_displs[s] * es,
                  send[s].data() + args[s].send_displs[q] * es, counts[s][q] * es);
    }
  }
  for (int r = 0; r < P; ++r) {
    args[r].send = send[r].data();
    args[r].recv = recv[r].data();
  }
  const auto send_before = send;
  fusedcoll::ref::all_to_allv(args);
  for (int q = 0; q < P; ++q) {
    ASSERT_EQ(recv[q].size(), want[q].size());
    EXPECT_TRUE(fctest::same_bytes("all_to_allv", q, recv[q].data(), want[q].data(), recv[q].size()));
    EXPECT_EQ(send[q], send_before[q]) << "send buffer of rank " << q << " modified";
  }
}

std::string a2a_name(const ::testing::TestParamInfo<std::tuple<int, DType>>& info) {
  return fctest::str("P", std::get<0>(info.param), "_", fusedcoll::dtype_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Grid, AllToAllv,
                         ::testing::Combine(::testing::ValuesIn(fctest::kWorldSizes),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16,
                                                              DType::f8_e4m3, DType::f8_e5m2,
                                                              DType::i32, DType::i64)),
                         a2a_name);

TEST(AllToAll, MakeAlltoallIsATransposition) {
  for (int P : fctest::kWorldSizes) {
    for (std::int64_t count : {0, 1, 3}) {
      SCOPED_TRACE(fctest::str("P ", P, " count ", count));
      std::vector<std::vector<std::int64_t>> send(P), recv(P);
      std::vector<fusedcoll::AllToAllvArgs> args;
      for (int r = 0; r < P; ++r) {
        for (int q = 0; q < P; ++q)
          for (std::int64_t i = 0; i < count; ++i) send[r].push_back(1000 * r + 10 * q + i);
        recv[r].assign(static_cast<std::size_t>(P * count), -1);
        args.push_back(fusedcoll::make_alltoall(send[r].data(), recv[r].data(), count, DType::i64, P));
        const auto& a = args.back();
        ASSERT_EQ(a.send_counts.size(), static_cast<std::size_t>(P));
        for (int q = 0; q < P; ++q) {
          EXPECT_EQ(a.send_counts[q], count);
          EXPECT_EQ(a.recv_counts[q], count);
          EXPECT_EQ(a.send_displs[q], q * count);
          EXPECT_EQ(a.recv_displs[q], q * count);
        }
        EXPECT_EQ(a.dtype, DType::i64);
        EXPECT_EQ(a.send, send[r].data());
        EXPECT_EQ(a.recv, recv[r].data());
      }
      fusedcoll::ref::all_to_allv(args);
      for (int q = 0; q < P; ++q)
        for (int r = 0; r < P; ++r)
          for (std::int64_t i = 0; i < count; ++i)
            EXPECT_EQ(recv[q][r * count + i], 1000 * r + 10 * q + i);
    }
  }
}

TEST(AllToAll, SendRegionsMayOverlap) {
  // Send regions are only read, so every peer's segment may be the same memory.
  std::vector<std::int32_t> s0{7, 8, 9}, s1{4, 5, 6};
  std::vector<std::int32_t> r0(6, -1), r1(6, -1);
  std::vector<fusedcoll::AllToAllvArgs> args(2);
  args[0] = {s0.data(), r0.data(), {3, 3}, {0, 0}, {3, 3}, {0, 3}, DType::i32};
  args[1] = {s1.data(), r1.data(), {3, 2}, {0, 1}, {3, 2}, {0, 3}, DType::i32};
  fusedcoll::ref::all_to_allv(args);
  EXPECT_EQ(r0, (std::vector<std::int32_t>{7, 8, 9, 4, 5, 6}));
  EXPECT_EQ(r1, (std::vector<std::int32_t>{7, 8, 9, 5, 6, -1}));
}

TEST(AllToAll, NullBuffersWithZeroCountsAreFine) {
  // A rank that sends and receives nothing may pass null buffers.
  std::vector<float> s1{1.0f, 2.0f}, r1(2, 0.0f);
  std::vector<fusedcoll::AllToAllvArgs> args(2);
  args[0] = {nullptr, nullptr, {0, 0}, {0, 0}, {0, 0}, {0, 0}, DType::f32};
  args[1] = {s1.data(), r1.data(), {0, 2}, {0, 0}, {0, 2}, {0, 0}, DType::f32};
  fusedcoll::ref::all_to_allv(args);
  EXPECT_EQ(r1, (std::vector<float>{1.0f, 2.0f}));
}

// ---------------------------------------------------------------------------------------------
// ReduceScatter

template <class T>
void reduce_scatter_case(int P, ReduceOp op, bool in_place, std::uint64_t seed) {
  std::vector<std::int64_t> rc(P);
  for (int q = 0; q < P; ++q) rc[q] = (q % 3 == 1) ? 0 : 1 + (q * 5 + 2) % 4;
  std::vector<std::int64_t> off(P + 1, 0);
  for (int q = 0; q < P; ++q) off[q + 1] = off[q] + rc[q];
  const std::int64_t total = off[P];
  const auto in = random_inputs<T>(P, total, seed);
  // Expected: chunk q combined in rank order.
  std::vector<std::vector<T>> want(P);
  for (int q = 0; q < P; ++q) {
    for (std::int64_t i = off[q]; i < off[q + 1]; ++i) {
      T acc = in[0][i];
      for (int r = 1; r < P; ++r) acc = combine(acc, in[r][i], op);
      want[q].push_back(finish(acc, op, P));
    }
  }
  std::vector<std::vector<T>> send = in, recv(P);
  std::vector<fusedcoll::ReduceScatterArgs> args(P);
  for (int q = 0; q < P; ++q) {
    recv[q].assign(static_cast<std::size_t>(rc[q]), T{});
    args[q].send = send[q].data();
    args[q].recv = in_place ? static_cast<void*>(send[q].data() + off[q]) : recv[q].data();
    args[q].recv_counts = rc;
    args[q].dtype = fusedcoll::dtype_of<T>;
    args[q].op = op;
  }
  fusedcoll::ref::reduce_scatter(args);
  for (int q = 0; q < P; ++q) {
    const T* got = in_place ? send[q].data() + off[q] : recv[q].data();
    EXPECT_TRUE(same_values("reduce_scatter", q, got, want[q]));
  }
}

TEST(ReduceScatter, UnevenCountsAllOpsAndDtypes) {
  std::uint64_t seed = 4000;
  for (int P : fctest::kWorldSizes) {
    for (ReduceOp op : kOps) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(fctest::str("P ", P, " op ", fusedcoll::to_string(op),
                                 in_place ? " in place" : ""));
        reduce_scatter_case<float>(P, op, in_place, ++seed);
        reduce_scatter_case<std::int32_t>(P, op, in_place, ++seed);
        reduce_scatter_case<std::int64_t>(P, op, in_place, ++seed);
      }
    }
  }
}

TEST(ReduceScatter, RankOrderNotRing) {
  // Chunk 0 of three ranks holding 1, 2^24, -2^24: rank order gives 0; any other start gives 1.
  constexpr float a = 0x1p24f;
  std::vector<std::vector<float>> send = {{1.0f, 1.0f}, {a, a}, {-a, -a}};
  std::vector<std::vector<float>> recv(3, std::vector<float>(1, 5.0f));
  std::vector<fusedcoll::ReduceScatterArgs> args(3);
  for (int q = 0; q < 3; ++q)
    args[q] = {send[q].data(), recv[q].data(), {1, 1, 0}, DType::f32, ReduceOp::sum};
  fusedcoll::ref::reduce_scatter(args);
  EXPECT_EQ(recv[0][0], 0.0f);
  EXPECT_EQ(recv[1][0], 0.0f);
  EXPECT_EQ(recv[2][0], 5.0f) << "rank 2 receives nothing; its buffer must be untouched";
}

// ---------------------------------------------------------------------------------------------
// AllGather

TEST(AllGather, UnevenCountsAnyDtypeInPlace) {
  for (int P : fctest::kWorldSizes) {
    for (DType dt : {DType::f32, DType::bf16, DType::f8_e5m2, DType::i64}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(fctest::str("P ", P, " ", fusedcoll::dtype_name(dt),
                                 in_place ? " in place" : ""));
        const std::size_t es = fusedcoll::dtype_size(dt);
        std::vector<std::int64_t> rc(P), off(P + 1, 0);
        for (int r = 0; r < P; ++r) rc[r] = (r % 3 == 1) ? 0 : 1 + (r * 3) % 5;
        for (int r = 0; r < P; ++r) off[r + 1] = off[r] + rc[r];
        std::vector<std::vector<unsigned char>> send(P), recv(P);
        std::vector<unsigned char> want;
        for (int r = 0; r < P; ++r) {
          send[r].resize(static_cast<std::size_t>(rc[r]) * es);
          fusedcoll::fill_values(send[r].data(), rc[r], dt, 9, 4, r, fusedcoll::ValueMode::random);
          want.insert(want.end(), send[r].begin(), send[r].end());
        }
        std::vector<fusedcoll::AllGatherArgs> args(P);
        for (int r = 0; r < P; ++r) {
          recv[r].assign(want.size(), 0x5A);
          if (in_place) {
            if (!send[r].empty()) {
              std::memcpy(recv[r].data() + off[r] * es, send[r].data(), send[r].size());
            }
            args[r].send = recv[r].data() + off[r] * es;
          } else {
            args[r].send = send[r].data();
          }
          args[r].recv = recv[r].data();
          args[r].recv_counts = rc;
          args[r].dtype = dt;
        }
        fusedcoll::ref::all_gather(args);
        for (int r = 0; r < P; ++r)
          EXPECT_TRUE(fctest::same_bytes("all_gather", r, recv[r].data(), want.data(), want.size()));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Broadcast

TEST(Broadcast, EveryRootAndCountZero) {
  for (int P : fctest::kWorldSizes) {
    for (int root = 0; root < P; ++root) {
      for (std::int64_t count : {0, 1, 6}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(fctest::str("P ", P, " root ", root, " count ", count,
                                   in_place ? " in place" : ""));
          std::vector<std::int32_t> data(static_cast<std::size_t>(count));
          for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<std::int32_t>(100 * root + i);
          std::vector<std::vector<std::int32_t>> recv(P, std::vector<std::int32_t>(count, -1));
          if (in_place) recv[root] = data;
          std::vector<fusedcoll::BroadcastArgs> args(P);
          for (int r = 0; r < P; ++r) {
            // Only the root's send is read; the others pass null. With count 0 all pass null.
            const void* s = r == root ? (in_place ? recv[r].data() : data.data()) : nullptr;
            void* d = recv[r].data();
            if (count == 0) s = nullptr, d = nullptr;
            args[r] = {s, d, count, DType::i32, root};
          }
          fusedcoll::ref::broadcast(args);
          for (int r = 0; r < P; ++r) EXPECT_EQ(recv[r], data) << "rank " << r;
        }
      }
    }
  }
}

}  // namespace
