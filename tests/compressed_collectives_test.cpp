// ref/'s compressed collectives against independent loops written from docs/compression.md
// ("Wire semantics") with the scalar codecs: scales from the agreed amax (max over every rank,
// per tensor or per block), headroom P for sum/avg, encode(x * s) and decode(c) / s at the pinned
// points of each algorithm. Also: integer inputs whose every partial sum is representable come
// out exactly as without compression, argument errors, and NaN rules.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "common/check.hpp"
#include "common/errors.hpp"
#include "fusedcoll/collectives.hpp"
#include "fusedcoll/compression.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace {

using fusedcoll::AllGatherArgs;
using fusedcoll::AllReduceAlgo;
using fusedcoll::AllReduceArgs;
using fusedcoll::AllToAllvArgs;
using fusedcoll::CompressionOptions;
using fusedcoll::DType;
using fusedcoll::ReduceOp;
using fusedcoll::ReduceScatterArgs;
using fusedcoll::Scaling;
using fusedcoll::WireFormat;
using Floats = std::vector<float>;

const int kWorlds[] = {1, 2, 3, 4, 8};

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

std::vector<Floats> inputs(int P, std::int64_t n, fusedcoll::ValueMode mode, std::uint64_t seed) {
  std::vector<Floats> v(P, Floats(static_cast<std::size_t>(n)));
  for (int r = 0; r < P; ++r)
    fusedcoll::fill_values(v[r].data(), n, DType::f32, seed, 1, r, mode);
  return v;
}

// --- The independent model ---------------------------------------------------------------------

/// Scalar round trip of one value with scale s (s = 0: unscaled).
float round_trip(WireFormat f, float x, float s) {
  const float v = s > 0 ? x * s : x;
  float back = 0;
  switch (f) {
    case WireFormat::f16: back = fusedcoll::f16_to_f32(fusedcoll::f32_to_f16(v)); break;
    case WireFormat::bf16: back = fusedcoll::bf16_to_f32(fusedcoll::f32_to_bf16(v)); break;
    case WireFormat::fp8_e4m3: back = fusedcoll::e4m3_to_f32(fusedcoll::f32_to_e4m3(v)); break;
    case WireFormat::fp8_e5m2: back = fusedcoll::e5m2_to_f32(fusedcoll::f32_to_e5m2(v)); break;
    case WireFormat::none: back = v; break;
  }
  return s > 0 ? back / s : back;
}

/// docs/compression.md, "Scaling": max / (amax * headroom) in double, pow2 rounds down.
float model_scale(WireFormat f, float amax, double headroom, bool pow2) {
  if (amax == 0) return 1.0f;
  double s = double(fusedcoll::wire_max(f)) / (double(amax) * headroom);
  if (pow2) s = std::exp2(std::floor(std::log2(s)));
  return static_cast<float>(s);
}

/// Per-element scales (0 = unscaled) for an index space of n, from every rank's values there.
Floats model_scales(const CompressionOptions& w, const std::vector<Floats>& y, std::int64_t n,
                    double headroom) {
  Floats s(static_cast<std::size_t>(n), 0.0f);
  const Scaling sc = fusedcoll::resolved_scaling(w);
  if (sc == Scaling::none) return s;
  const std::int64_t B = sc == Scaling::per_block ? w.block : std::max<std::int64_t>(n, 1);
  for (std::int64_t b0 = 0; b0 < n; b0 += B) {
    float amax = 0;
    for (const Floats& v : y)
      for (std::int64_t i = b0; i < std::min(n, b0 + B); ++i) amax = std::max(amax, std::fabs(v[i]));
    const float scale = model_scale(w.format, amax, headroom, w.pow2_scale);
    for (std::int64_t i = b0; i < std::min(n, b0 + B); ++i) s[i] = scale;
  }
  return s;
}

float op_apply(float a, float b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return a + b;
    case ReduceOp::min: return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a);
    case ReduceOp::max: return std::isnan(a) ? a : std::isnan(b) ? b : (b > a ? b : a);
  }
  return 0;
}

/// The pinned compressed AllReduce, element by element.
Floats model_all_reduce(const std::vector<Floats>& x, ReduceOp op, AllReduceAlgo algo,
                        const CompressionOptions& w) {
  const int P = static_cast<int>(x.size());
  const std::int64_t n = std::ssize(x[0]);
  std::vector<Floats> y = x;
  if (op == ReduceOp::avg && w.predivide)
    for (auto& v : y)
      for (float& e : v) e = e / float(P);
  const bool grows = op == ReduceOp::sum || op == ReduceOp::avg;
  const Floats s = model_scales(w, y, n, grows ? P : 1);
  const bool divide = op == ReduceOp::avg && !w.predivide;
  Floats out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    // Which chunk owns i (chunk_of: the first count % P chunks are one longer).
    const std::int64_t base = n / P, extra = n % P;
    int c = 0;
    for (std::int64_t at = 0; c < P; ++c) {
      const std::int64_t len = base + (c < extra ? 1 : 0);
      if (i < at + len) break;
      at += len;
    }
    auto rt = [&](float v) { return round_trip(w.format, v, s[i]); };
    float acc;
    if (algo == AllReduceAlgo::direct || P == 1) {
      acc = rt(y[0][i]);
      for (int p = 1; p < P; ++p) acc = op_apply(acc, rt(y[p][i]), op);
    } else {
      // ring: the running value starts after the owner; chain: every element starts at rank 0.
      const int first = algo == AllReduceAlgo::ring ? (c + 1) % P : 0;
      acc = y[first][i];
      for (int k = 1; k < P; ++k) acc = op_apply(rt(acc), y[(first + k) % P][i], op);
    }
    if (divide) acc = acc / float(P);
    out[i] = rt(acc);
  }
  return out;
}

Floats ref_all_reduce(std::vector<Floats> x, ReduceOp op, AllReduceAlgo algo,
                      const CompressionOptions& w, bool in_place = false) {
  const int P = static_cast<int>(x.size());
  const std::int64_t n = std::ssize(x[0]);
  std::vector<Floats> out(P, Floats(static_cast<std::size_t>(n), -7.0f));
  std::vector<AllReduceArgs> args;
  for (int r = 0; r < P; ++r)
    args.push_back({x[r].data(), in_place ? x[r].data() : out[r].data(), n, DType::f32, op, algo, w});
  fusedcoll::ref::all_reduce(args);
  for (int r = 1; r < P; ++r) {
    const Floats& a = in_place ? x[0] : out[0];
    const Floats& b = in_place ? x[r] : out[r];
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "rank " << r << " differs";
  }
  return in_place ? x[0] : out[0];
}

void expect_bits(const Floats& want, const Floats& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (bits(want[i]) != bits(got[i]) && !(std::isnan(want[i]) && std::isnan(got[i])) &&
        ++bad <= 5)
      ADD_FAILURE() << what << ": index " << i << " want " << want[i] << " got " << got[i];
  EXPECT_EQ(bad, 0) << what;
}

// --- AllReduce --------------------------------------------------------------------------------

std::vector<CompressionOptions> wire_options() {
  return {
      {.format = WireFormat::f16},
      {.format = WireFormat::bf16},
      {.format = WireFormat::fp8_e4m3},  // automatic: per tensor
      {.format = WireFormat::fp8_e4m3, .pow2_scale = true},
      {.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block, .block = 64},
      {.format = WireFormat::fp8_e5m2, .scaling = Scaling::per_block, .block = 100, .pow2_scale = true},
      {.format = WireFormat::fp8_e5m2, .scaling = Scaling::none},
      {.format = WireFormat::f16, .scaling = Scaling::per_tensor},
  };
}

TEST(CompressedAllReduce, MatchesThePinnedLoop) {
  for (int P : kWorlds)
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{1000}})
      for (const auto& w0 : wire_options())
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
          for (bool predivide : {false, true})
            for (AllReduceAlgo algo : {AllReduceAlgo::direct, AllReduceAlgo::ring, AllReduceAlgo::chain}) {
              if (predivide && op != ReduceOp::avg) continue;
              CompressionOptions w = w0;
              w.predivide = predivide;
              const auto x = inputs(P, n, fusedcoll::ValueMode::random, 11 + P);
              const std::string what = fctest::str(
                  "P=", P, " n=", n, " ", to_string(w.format), " ", to_string(w.scaling),
                  " pow2=", w.pow2_scale, " ", to_string(op), " predivide=", predivide, " ",
                  to_string(algo));
              expect_bits(model_all_reduce(x, op, algo, w), ref_all_reduce(x, op, algo, w), what);
            }
}

TEST(CompressedAllReduce, InPlaceGivesTheSameBits) {
  const CompressionOptions w{.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block, .block = 32};
  for (int P : kWorlds)
    for (AllReduceAlgo algo : {AllReduceAlgo::direct, AllReduceAlgo::ring, AllReduceAlgo::chain}) {
      const auto x = inputs(P, 333, fusedcoll::ValueMode::random, 5);
      expect_bits(ref_all_reduce(x, ReduceOp::sum, algo, w),
                  ref_all_reduce(x, ReduceOp::sum, algo, w, true), fctest::str("P=", P));
    }
}

TEST(CompressedAllReduce, ExactWhenEveryPartialSumIsRepresentable) {
  // Integers in [-4, 4]: every partial sum of up to 8 of them is an integer below 2^8, exact in
  // f16 and bf16, so the compressed result equals the uncompressed one bit for bit.
  for (int P : kWorlds)
    for (WireFormat f : {WireFormat::f16, WireFormat::bf16})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::max})
        for (AllReduceAlgo algo : {AllReduceAlgo::direct, AllReduceAlgo::ring, AllReduceAlgo::chain}) {
          const auto x = inputs(P, 1000, fusedcoll::ValueMode::integer, 3);
          expect_bits(ref_all_reduce(x, op, algo, {}), ref_all_reduce(x, op, algo, {.format = f}),
                      fctest::str("P=", P, " ", to_string(f), " ", to_string(op)));
        }
}

// f16, P = 3, one element: 1, 2^-11, 2^-11. direct encodes each contribution (all exact in f16)
// and sums to 1 + 2^-10; the ring (chunk 0 starts at rank 1) adds the two small values first, also
// 1 + 2^-10; the chain encodes 1 + 2^-11 after rank 1, a tie that rounds to even, 1, and again
// after rank 2: 1.
TEST(CompressedAllReduce, ChainEncodesTheRunningValueFromRankZero) {
  const float tiny = std::ldexp(1.0f, -11);
  const std::vector<Floats> x = {{1.0f}, {tiny}, {tiny}};
  const CompressionOptions f16{.format = WireFormat::f16};
  const float sum = 1.0f + std::ldexp(1.0f, -10);
  EXPECT_EQ(ref_all_reduce(x, ReduceOp::sum, AllReduceAlgo::direct, f16)[0], sum);
  EXPECT_EQ(ref_all_reduce(x, ReduceOp::sum, AllReduceAlgo::ring, f16)[0], sum);
  EXPECT_EQ(ref_all_reduce(x, ReduceOp::sum, AllReduceAlgo::chain, f16)[0], 1.0f);
  // Uncompressed, chain is direct's order: (1 + 2^-11) + 2^-11 = 1 + 2^-10 exactly in f32.
  EXPECT_EQ(ref_all_reduce(x, ReduceOp::sum, AllReduceAlgo::chain, {})[0], sum);
}

TEST(CompressedAllReduce, CompressionChangesBitsOnRandomData) {
  // Not a tautology: on random data the wire rounding shows in the result.
  const auto x = inputs(4, 1000, fusedcoll::ValueMode::random, 9);
  const Floats plain = ref_all_reduce(x, ReduceOp::sum, AllReduceAlgo::ring, {});
  const Floats fp8 = ref_all_reduce(x, ReduceOp::sum, AllReduceAlgo::ring,
                                    {.format = WireFormat::fp8_e4m3});
  int differ = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) differ += bits(plain[i]) != bits(fp8[i]);
  EXPECT_GT(differ, 900);
  // ... and stays close: E4M3 keeps 3 mantissa bits, P - 1 + 2 roundings of at most 2^-4 relative
  // to the amax-scaled range.
  float amax = 0;
  for (float v : plain) amax = std::max(amax, std::fabs(v));
  for (std::size_t i = 0; i < plain.size(); ++i)
    EXPECT_LE(std::fabs(plain[i] - fp8[i]), 0.5f * amax) << i;
}

TEST(CompressedAllReduce, NanRules) {
  auto x = inputs(3, 10, fusedcoll::ValueMode::random, 1);
  x[1][4] = NAN;
  // Unscaled: NaN in, NaN out at that element only.
  const Floats r = ref_all_reduce(x, ReduceOp::sum, AllReduceAlgo::ring, {.format = WireFormat::f16});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(std::isnan(r[i]), i == 4) << i;
  // Scaled: no scale can represent a NaN amax; the call is rejected.
  std::vector<Floats> out(3, Floats(10));
  std::vector<AllReduceArgs> args;
  for (int q = 0; q < 3; ++q)
    args.push_back({x[q].data(), out[q].data(), 10, DType::f32, ReduceOp::sum,
                    AllReduceAlgo::direct, {.format = WireFormat::fp8_e4m3}});
  EXPECT_INVALID(fusedcoll::ref::all_reduce(args), "amax");
}

// --- ReduceScatter, AllGather, All-to-All(v) ------------------------------------------------------

TEST(CompressedReduceScatter, MatchesThePinnedLoop) {
  for (int P : kWorlds)
    for (const auto& w : wire_options())
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        std::vector<std::int64_t> counts(P);
        for (int q = 0; q < P; ++q) counts[q] = (q % 3 == 1) ? 0 : 5 + 37 * q;  // uneven, zeros
        std::int64_t total = 0;
        for (auto c : counts) total += c;
        const auto x = inputs(P, total, fusedcoll::ValueMode::random, 21);
        std::vector<Floats> out(P);
        std::vector<ReduceScatterArgs> args;
        for (int q = 0; q < P; ++q) {
          out[q].assign(static_cast<std::size_t>(counts[q]), -7.0f);
          args.push_back({x[q].data(), out[q].data(), counts, DType::f32, op, w});
        }
        fusedcoll::ref::reduce_scatter(args);
        // Model: rank order, every contribution round-tripped, no final encode.
        const Floats s = model_scales(w, x, total, P);
        std::int64_t at = 0;
        for (int q = 0; q < P; ++q) {
          Floats want(static_cast<std::size_t>(counts[q]));
          for (std::int64_t i = 0; i < counts[q]; ++i) {
            float acc = round_trip(w.format, x[0][at + i], s[at + i]);
            for (int p = 1; p < P; ++p) acc = acc + round_trip(w.format, x[p][at + i], s[at + i]);
            want[i] = op == ReduceOp::avg ? acc / float(P) : acc;
          }
          expect_bits(want, out[q], fctest::str("P=", P, " q=", q, " ", to_string(w.format)));
          at += counts[q];
        }
      }
}

TEST(CompressedAllGather, EveryContributionArrivesRoundTripped) {
  for (int P : kWorlds)
    for (const auto& w : wire_options()) {
      std::vector<std::int64_t> counts(P);
      for (int q = 0; q < P; ++q) counts[q] = (q % 3 == 1) ? 0 : 3 + 71 * q;
      std::int64_t total = 0, longest = 0;
      for (auto c : counts) total += c, longest = std::max(longest, c);
      std::vector<Floats> x(P), out(P, Floats(static_cast<std::size_t>(total), -7.0f));
      for (int r = 0; r < P; ++r) {
        x[r].resize(static_cast<std::size_t>(counts[r]));
        fusedcoll::fill_values(x[r].data(), counts[r], DType::f32, 4, 2, r,
                               fusedcoll::ValueMode::random);
      }
      std::vector<AllGatherArgs> args;
      for (int r = 0; r < P; ++r) args.push_back({x[r].data(), out[r].data(), counts, DType::f32, w});
      fusedcoll::ref::all_gather(args);
      // Blocks restart in every contribution; the amax of block k is over every rank's block k.
      std::vector<Floats> padded(P, Floats(static_cast<std::size_t>(longest), 0.0f));
      for (int r = 0; r < P; ++r) std::copy(x[r].begin(), x[r].end(), padded[r].begin());
      const Floats s = model_scales(w, padded, longest, 1);
      Floats want;
      for (int r = 0; r < P; ++r)
        for (std::int64_t i = 0; i < counts[r]; ++i) want.push_back(round_trip(w.format, x[r][i], s[i]));
      for (int r = 0; r < P; ++r)
        expect_bits(want, out[r], fctest::str("P=", P, " rank ", r, " ", to_string(w.format)));
    }
}

TEST(CompressedAllToAll, EverySegmentArrivesRoundTripped) {
  for (int P : kWorlds) {
    const CompressionOptions w{.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block,
                               .block = 16, .pow2_scale = true};
    const std::int64_t count = 40;
    const auto x = inputs(P, count * P, fusedcoll::ValueMode::random, 8);
    std::vector<Floats> out(P, Floats(static_cast<std::size_t>(count * P), -7.0f));
    std::vector<AllToAllvArgs> args;
    for (int r = 0; r < P; ++r) {
      args.push_back(fusedcoll::make_alltoall(x[r].data(), out[r].data(), count, DType::f32, P));
      args.back().wire = w;
    }
    fusedcoll::ref::all_to_allv(args);
    // Segment-local blocks; the amax of block k over every segment of every rank.
    std::vector<Floats> segs;
    for (int r = 0; r < P; ++r)
      for (int q = 0; q < P; ++q) segs.emplace_back(x[r].begin() + q * count, x[r].begin() + (q + 1) * count);
    const Floats s = model_scales(w, segs, count, 1);
    for (int q = 0; q < P; ++q) {
      Floats want;
      for (int r = 0; r < P; ++r)
        for (std::int64_t i = 0; i < count; ++i) want.push_back(round_trip(w.format, x[r][q * count + i], s[i]));
      expect_bits(want, out[q], fctest::str("P=", P, " rank ", q));
    }
  }
}

// --- Arguments ------------------------------------------------------------------------------------

TEST(CompressedArgs, OnlyF32CanBeCompressed) {
  std::int32_t a[4] = {}, b[4] = {};
  AllReduceArgs ar{a, b, 4, DType::i32, ReduceOp::sum, AllReduceAlgo::direct, {.format = WireFormat::f16}};
  EXPECT_INVALID(fusedcoll::check(ar, 0, 1), "f32", "f16");
  AllGatherArgs ag{a, b, {4}, DType::i32, {.format = WireFormat::bf16}};
  EXPECT_INVALID(fusedcoll::check(ag, 0, 1), "f32");
  ReduceScatterArgs rs{a, b, {4}, DType::i64, ReduceOp::sum, {.format = WireFormat::fp8_e5m2}};
  EXPECT_INVALID(fusedcoll::check(rs, 0, 1), "f32");
  auto aa = fusedcoll::make_alltoall(a, b, 4, DType::i32, 1);
  aa.wire.format = WireFormat::fp8_e4m3;
  EXPECT_INVALID(fusedcoll::check(aa, 0, 1), "f32");
  // The byte-moving collectives stay any-dtype without compression.
  aa.wire = {};
  EXPECT_TRUE(fusedcoll::can_implement(aa, 0, 1).ok());
}

TEST(CompressedArgs, BadOptionsAreInvalid) {
  float a[4] = {}, b[4] = {};
  AllReduceArgs ar{a, b, 4, DType::f32, ReduceOp::sum, AllReduceAlgo::direct,
                   {.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block, .block = 0}};
  EXPECT_INVALID(fusedcoll::check(ar, 0, 1), "block", 0);
  ar.wire = {.format = static_cast<WireFormat>(12)};
  EXPECT_INVALID(fusedcoll::check(ar, 0, 1), "wire format", 12);
  ar.wire = {.format = WireFormat::f16, .overflow = static_cast<fusedcoll::Overflow>(3)};
  EXPECT_INVALID(fusedcoll::check(ar, 0, 1), "overflow", 3);
  ar.wire = {.format = WireFormat::f16, .scaling = static_cast<Scaling>(9)};
  EXPECT_INVALID(fusedcoll::check(ar, 0, 1), "scaling", 9);
}

TEST(CompressedArgs, RanksMustAgreeOnTheWire) {
  float a[4] = {}, b[4] = {};
  const AllReduceArgs base{a, b, 4, DType::f32, ReduceOp::sum, AllReduceAlgo::ring,
                           {.format = WireFormat::fp8_e4m3}};
  const std::vector<std::function<void(CompressionOptions&)>> changes = {
      [](auto& w) { w.format = WireFormat::fp8_e5m2; },
      [](auto& w) { w.overflow = fusedcoll::Overflow::ieee; },
      [](auto& w) { w.scaling = Scaling::per_block; },
      [](auto& w) { w.block = 128; },
      [](auto& w) { w.pow2_scale = true; },
      [](auto& w) { w.predivide = true; },
  };
  for (const auto& change : changes) {
    AllReduceArgs other = base;
    change(other.wire);
    EXPECT_INVALID(fusedcoll::check_consistent(base, 0, other, 2), "rank", 0, 2, "wire");
    ReduceScatterArgs r0{a, b, {2, 2}, DType::f32, ReduceOp::sum, base.wire}, r1 = r0;
    r1.wire = other.wire;
    EXPECT_INVALID(fusedcoll::check_consistent(r0, 0, r1, 1), "wire");
    AllGatherArgs g0{a, b, {2, 2}, DType::f32, base.wire}, g1 = g0;
    g1.wire = other.wire;
    EXPECT_INVALID(fusedcoll::check_consistent(g0, 0, g1, 1), "wire");
    auto t0 = fusedcoll::make_alltoall(a, b, 2, DType::f32, 2), t1 = t0;
    t0.wire = base.wire;
    t1.wire = other.wire;
    EXPECT_INVALID(fusedcoll::check_consistent(t0, 0, t1, 1), "wire");
  }
  // ref/ checks the whole world before anything moves.
  Floats x0(4, 1), x1(4, 1), y0(4), y1(4);
  AllReduceArgs c0{x0.data(), y0.data(), 4, DType::f32, ReduceOp::sum, AllReduceAlgo::direct,
                   {.format = WireFormat::f16}};
  AllReduceArgs c1 = c0;
  c1.send = x1.data();
  c1.recv = y1.data();
  c1.wire.format = WireFormat::bf16;
  const std::vector<AllReduceArgs> world = {c0, c1};
  EXPECT_INVALID(fusedcoll::ref::all_reduce(world), "wire format");
  EXPECT_EQ(y0, Floats(4, 0.0f));
}

}  // namespace
