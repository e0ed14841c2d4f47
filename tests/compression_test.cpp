// The codecs (compression.hpp) against an independent reference (tests/common/codec_ref.hpp) and
// against Eigen's half and bfloat16; the batch paths against the scalar codecs bit for bit; the
// NaN / infinity / overflow rules; scaling, error feedback and the Compression object.
//
// The default suite checks every code of every format and about 10^7 f32 patterns per format and
// overflow mode: every exponent with edge mantissas, every halfway point between neighbouring
// codes and its f32 neighbours, zeros, subnormals, NaN payloads, infinities, and random bits. The
// long suite (compression_long_test, ctest label `long`) checks all 2^32 patterns.

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/codec_ref.hpp"
#include "common/errors.hpp"
#include "fusedcoll/compression.hpp"
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "fusedcoll/inputs.hpp"

namespace {

using fctest::CodecFormat;
using fctest::patterns;
using fusedcoll::Overflow;
using fusedcoll::WireFormat;

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

std::string hex(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// --- Decoding: every code --------------------------------------------------------------------

class EveryFormat : public ::testing::TestWithParam<const CodecFormat*> {};

TEST_P(EveryFormat, EveryCodeDecodesToItsDefinedValue) {
  const CodecFormat& f = *GetParam();
  const std::uint32_t n = 1u << f.bits;
  int failures = 0;
  for (std::uint32_t c = 0; c < n; ++c) {
    const float got = fctest::lib_decode(f, c);
    if (!fctest::same_value(fctest::decode_ref(f, c), got) && ++failures <= 8)
      ADD_FAILURE() << f.name << " code " << hex(c) << " decodes to " << got << " ("
                    << hex(bits(got)) << "), want " << fctest::decode_ref(f, c).magnitude;
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(EveryFormat, BatchDecodeEqualsScalarBitwise) {
  const CodecFormat& f = *GetParam();
  const std::uint32_t n = 1u << f.bits;
  const std::size_t elem = fusedcoll::wire_size(f.wire);
  // One element of slack in front: the batch path must not assume alignment.
  std::vector<std::byte> codes((n + 1) * elem);
  for (std::uint32_t c = 0; c < n; ++c) std::memcpy(&codes[(c + 1) * elem], &c, elem);  // LE
  std::vector<float> out(n + 1);
  fusedcoll::decode(f.wire, codes.data() + elem, out.data() + 1, n);
  for (std::uint32_t c = 0; c < n; ++c)
    ASSERT_EQ(bits(out[c + 1]), bits(fctest::lib_decode(f, c))) << f.name << " code " << hex(c);
  // Scaled: decode(c) / s, one IEEE division; also for the power-of-two scales that the codecs
  // divide by multiplying with the exact reciprocal (2^127 is divided: its reciprocal is
  // subnormal).
  for (const float s : {3.0f, 0.25f, 0x1p100f, 0x1p-100f, 0x1p-126f, 0x1p126f, 0x1p127f}) {
    fusedcoll::decode_scaled(f.wire, codes.data() + elem, out.data() + 1, n, s);
    for (std::uint32_t c = 0; c < n; ++c) {
      const float want = fctest::lib_decode(f, c) / s;
      ASSERT_TRUE(bits(out[c + 1]) == bits(want) || (std::isnan(want) && std::isnan(out[c + 1])))
          << f.name << " scaled by " << s << ", code " << hex(c);
    }
  }
}

TEST_P(EveryFormat, EncodeMatchesReferenceOnTenMillionPatterns) {
  const CodecFormat& f = *GetParam();
  const auto& p = patterns();
  ASSERT_GE(p.size(), 10'000'000u);
  for (Overflow o : {Overflow::saturate, Overflow::ieee}) {
    int failures = 0;
    for (std::uint32_t u : p) {
      const float x = from_bits(u);
      const std::uint32_t code = fctest::lib_encode(f, x, o);
      const fctest::RefValue want = fctest::encode_ref(f, x, o);
      if (!fctest::same_value(want, fctest::lib_decode(f, code)) && ++failures <= 8)
        ADD_FAILURE() << f.name << " " << to_string(o) << ": x = " << x << " (" << hex(u)
                      << ") encodes to " << hex(code) << ", want " << (want.negative ? "-" : "")
                      << (want.nan ? "NaN" : std::to_string(want.magnitude));
    }
    EXPECT_EQ(failures, 0) << f.name << " " << to_string(o);
  }
}

TEST_P(EveryFormat, BatchEncodeEqualsScalarBitwise) {
  const CodecFormat& f = *GetParam();
  const auto& p = patterns();
  const std::size_t elem = fusedcoll::wire_size(f.wire);
  std::vector<float> in(p.size() + 1);
  for (std::size_t i = 0; i < p.size(); ++i) in[i + 1] = from_bits(p[i]);
  std::vector<std::byte> out((p.size() + 1) * elem);
  for (Overflow o : {Overflow::saturate, Overflow::ieee}) {
    // Odd start and length: the tail loop and misaligned vectors are exercised too.
    fusedcoll::encode(f.wire, in.data() + 1, out.data() + elem, std::int64_t(p.size()), o);
    for (std::size_t i = 0; i < p.size(); ++i) {
      std::uint32_t got = 0;
      std::memcpy(&got, &out[(i + 1) * elem], elem);
      ASSERT_EQ(got, fctest::lib_encode(f, in[i + 1], o))
          << f.name << " " << to_string(o) << " x = " << hex(p[i]) << " at " << i;
    }
  }
  // Scaled: encode(x * s), the product rounded to f32 first; a non-power-of-two scale in both
  // overflow modes, and a power of two (what pow2_scale gives), which moves values across the
  // format's overflow and subnormal boundaries without rounding the product.
  const std::int64_t n = 1'000'003;
  for (const auto& [s, o] : {std::pair{0.3f, Overflow::saturate}, std::pair{0.3f, Overflow::ieee},
                             std::pair{64.0f, Overflow::saturate}}) {
    fusedcoll::encode_scaled(f.wire, in.data() + 1, out.data() + elem, n, s, o);
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint32_t got = 0;
      std::memcpy(&got, &out[(i + 1) * elem], elem);
      ASSERT_EQ(got, fctest::lib_encode(f, in[i + 1] * s, o))
          << f.name << " " << to_string(o) << " scale " << s << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, EveryFormat,
                         ::testing::Values(&fctest::kF16, &fctest::kBF16, &fctest::kE4M3,
                                           &fctest::kE5M2),
                         [](const auto& p) { return std::string(p.param->name); });

// --- Eigen's 16-bit types as a second opinion ----------------------------------------------------

TEST(Codecs, F16AgreesWithEigenHalf) {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const float mine = fusedcoll::f16_to_f32(static_cast<std::uint16_t>(c));
    const float eigen = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(std::uint16_t(c)));
    ASSERT_TRUE(bits(mine) == bits(eigen) || (std::isnan(mine) && std::isnan(eigen))) << hex(c);
  }
  for (std::uint32_t u : patterns()) {
    const float x = from_bits(u);
    const std::uint16_t eigen = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(x));
    const std::uint16_t mine = fusedcoll::f32_to_f16(x, Overflow::ieee);  // Eigen overflows to inf
    if (std::isnan(x))
      ASSERT_TRUE(std::isnan(fusedcoll::f16_to_f32(mine))) << hex(u);
    else
      ASSERT_EQ(mine, eigen) << "x = " << x << " (" << hex(u) << ")";
  }
}

TEST(Codecs, Bf16AgreesWithEigenBfloat16) {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const float mine = fusedcoll::bf16_to_f32(static_cast<std::uint16_t>(c));
    const float eigen =
        static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(std::uint16_t(c)));
    ASSERT_TRUE(bits(mine) == bits(eigen) || (std::isnan(mine) && std::isnan(eigen))) << hex(c);
  }
  for (std::uint32_t u : patterns()) {
    const float x = from_bits(u);
    const std::uint16_t eigen = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(x));
    const std::uint16_t mine = fusedcoll::f32_to_bf16(x, Overflow::ieee);
    if (std::isnan(x))
      ASSERT_TRUE(std::isnan(fusedcoll::bf16_to_f32(mine))) << hex(u);
    else
      ASSERT_EQ(mine, eigen) << "x = " << x << " (" << hex(u) << ")";
  }
}

// --- Hand-picked codes, NaN and infinity rules ---------------------------------------------------

TEST(Codecs, HandPickedCodes) {
  EXPECT_EQ(fusedcoll::f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(fusedcoll::f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(fusedcoll::f32_to_e5m2(1.0f), 0x3C);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(-2.0f), 0xC0);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(fusedcoll::f32_to_e5m2(57344.0f), 0x7B);
  EXPECT_EQ(fusedcoll::f32_to_f16(65504.0f), 0x7BFF);
  // E4M3 subnormals: 2^-9 is code 1; 2^-10 is a tie between 0 and 1 (even: 0); 3 * 2^-10 a tie
  // between codes 1 and 2 (even: 2).
  EXPECT_EQ(fusedcoll::f32_to_e4m3(0x1p-9f), 0x01);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(0x1p-10f), 0x00);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(-0x1p-10f), 0x80);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(0x1.2p0f), 0x39);  // 1.125: exact
  EXPECT_EQ(fusedcoll::f32_to_e4m3(0x1.1p0f), 0x38);  // 1.0625: tie between 1.0 and 1.125: even
  EXPECT_EQ(fusedcoll::f32_to_e4m3(0x1.3p0f), 0x3A);  // 1.1875: tie between 1.125 and 1.25
  EXPECT_EQ(fusedcoll::f32_to_f16(0x1p-24f), 0x0001);  // smallest f16 subnormal
  EXPECT_EQ(fusedcoll::f32_to_f16(0x1p-25f), 0x0000);  // its half: tie to even 0
  EXPECT_EQ(fusedcoll::f32_to_bf16(from_bits(0x3F808000u)), 0x3F80);  // tie, even
  EXPECT_EQ(fusedcoll::f32_to_bf16(from_bits(0x3F818000u)), 0x3F82);  // tie, odd: up
  EXPECT_EQ(fusedcoll::e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(fusedcoll::e5m2_to_f32(0x01), 0x1p-16f);
  EXPECT_EQ(fusedcoll::e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fusedcoll::e5m2_to_f32(0x7B), 57344.0f);
}

TEST(Codecs, OverflowAndInfinityRules) {
  const float inf = std::numeric_limits<float>::infinity();
  // Finite overflow: saturate to ±max, or the IEEE rule (inf; E4M3: NaN).
  EXPECT_EQ(fusedcoll::f32_to_f16(65520.0f, Overflow::saturate), 0x7BFF);
  EXPECT_EQ(fusedcoll::f32_to_f16(65520.0f, Overflow::ieee), 0x7C00);
  EXPECT_EQ(fusedcoll::f32_to_f16(65519.996f, Overflow::ieee), 0x7BFF);  // rounds down to max
  EXPECT_EQ(fusedcoll::f32_to_f16(-1e9f, Overflow::saturate), 0xFBFF);
  EXPECT_EQ(fusedcoll::f32_to_bf16(std::numeric_limits<float>::max(), Overflow::saturate), 0x7F7F);
  EXPECT_EQ(fusedcoll::f32_to_bf16(std::numeric_limits<float>::max(), Overflow::ieee), 0x7F80);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(464.0f, Overflow::ieee), 0x7E);  // tie with even 448
  EXPECT_EQ(fusedcoll::f32_to_e4m3(464.1f, Overflow::ieee), 0x7F);  // NaN: E4M3 has no inf
  EXPECT_EQ(fusedcoll::f32_to_e4m3(-1000.0f, Overflow::saturate), 0xFE);
  EXPECT_EQ(fusedcoll::f32_to_e5m2(61440.0f, Overflow::ieee), 0x7C);  // tie with odd max: up
  EXPECT_EQ(fusedcoll::f32_to_e5m2(61440.0f, Overflow::saturate), 0x7B);
  EXPECT_EQ(fusedcoll::f32_to_e5m2(61439.99f, Overflow::ieee), 0x7B);
  // Infinities stay infinities where the format has them, in both modes.
  for (Overflow o : {Overflow::saturate, Overflow::ieee}) {
    EXPECT_EQ(fusedcoll::f32_to_f16(inf, o), 0x7C00);
    EXPECT_EQ(fusedcoll::f32_to_f16(-inf, o), 0xFC00);
    EXPECT_EQ(fusedcoll::f32_to_bf16(-inf, o), 0xFF80);
    EXPECT_EQ(fusedcoll::f32_to_e5m2(inf, o), 0x7C);
  }
  // E4M3 has none: inf saturates to ±448, or becomes NaN under the IEEE rule.
  EXPECT_EQ(fusedcoll::f32_to_e4m3(inf, Overflow::saturate), 0x7E);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(-inf, Overflow::saturate), 0xFE);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(inf, Overflow::ieee), 0x7F);
  EXPECT_EQ(fusedcoll::f32_to_e4m3(-inf, Overflow::ieee), 0xFF);
  EXPECT_TRUE(std::isinf(fusedcoll::e5m2_to_f32(0xFC)) && fusedcoll::e5m2_to_f32(0xFC) < 0);
}

TEST(Codecs, NanInNanOut) {
  for (std::uint32_t payload : {0x400000u, 0x1u, 0x7FFFFFu, 0x200000u, 0x2000u}) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const float x = from_bits(sign | 0x7F800000u | payload);
      ASSERT_TRUE(std::isnan(x));
      for (Overflow o : {Overflow::saturate, Overflow::ieee}) {
        for (const CodecFormat* f : fctest::kAllFormats) {
          const float back = fctest::lib_decode(*f, fctest::lib_encode(*f, x, o));
          EXPECT_TRUE(std::isnan(back)) << f->name << " payload " << hex(payload);
          EXPECT_EQ(std::signbit(back), sign != 0) << f->name;
        }
      }
      // The documented codes: E4M3 S.1111.111; E5M2 quiet S.11111.1x; f16 keeps 9 payload bits.
      EXPECT_EQ(fusedcoll::f32_to_e4m3(x), sign ? 0xFF : 0x7F);
      EXPECT_EQ(fusedcoll::f32_to_e5m2(x) & 0x7E, 0x7E);
      EXPECT_EQ(fusedcoll::f32_to_f16(x), (sign >> 16) | 0x7E00 | ((payload >> 13) & 0x1FF));
    }
  }
  // Decoded NaNs are quiet.
  EXPECT_EQ(bits(fusedcoll::e4m3_to_f32(0x7F)), 0x7FC00000u);
  EXPECT_EQ(bits(fusedcoll::e4m3_to_f32(0xFF)), 0xFFC00000u);
  EXPECT_EQ(bits(fusedcoll::f16_to_f32(0x7D00)), 0x7FE00000u);
}

TEST(Codecs, BatchRejectsBadArguments) {
  float x[4] = {1, 2, 3, 4};
  std::uint16_t h[4];
  EXPECT_INVALID(fusedcoll::encode(WireFormat::f16, x, h, -1), "negative");
  EXPECT_INVALID(fusedcoll::encode(WireFormat::f16, nullptr, h, 4), "null");
  EXPECT_INVALID(fusedcoll::decode(WireFormat::f16, h, nullptr, 4), "null");
  EXPECT_INVALID(fusedcoll::encode(static_cast<WireFormat>(9), x, h, 4), "wire format", 9);
  EXPECT_INVALID(fusedcoll::encode(WireFormat::f16, x, h, 4, static_cast<Overflow>(5)),
                 "overflow", 5);
  EXPECT_INVALID(fusedcoll::encode_scaled(WireFormat::f16, x, h, 4, 0.0f), "scale");
  EXPECT_INVALID(fusedcoll::encode_scaled(WireFormat::f16, x, h, 4, NAN), "scale");
  EXPECT_INVALID(fusedcoll::decode_scaled(WireFormat::f16, h, x, 4, -1.0f), "scale");
  EXPECT_INVALID((void)fusedcoll::wire_size(static_cast<WireFormat>(7)), "wire format", 7);
  fusedcoll::encode(WireFormat::f16, nullptr, nullptr, 0);  // empty: nothing to touch
}

// --- Scaling -----------------------------------------------------------------------------------

TEST(Scaling, ScaleForIsDefined) {
  // 448 / (2 * 4) = 56; pow2 rounds down to 32.
  EXPECT_EQ(fusedcoll::scale_for(WireFormat::fp8_e4m3, 2.0f, 4.0f, false), 56.0f);
  EXPECT_EQ(fusedcoll::scale_for(WireFormat::fp8_e4m3, 2.0f, 4.0f, true), 32.0f);
  EXPECT_EQ(fusedcoll::scale_for(WireFormat::fp8_e4m3, 448.0f, 1.0f, true), 1.0f);
  EXPECT_EQ(fusedcoll::scale_for(WireFormat::fp8_e5m2, 0.0f, 8.0f, false), 1.0f);
  EXPECT_EQ(fusedcoll::scale_for(WireFormat::fp8_e4m3, 3.0f, 1.0f, false),
            static_cast<float>(448.0 / 3.0));
  // Tiny and huge amax: clamped so that the scale and its inverse stay normal floats.
  EXPECT_EQ(fusedcoll::scale_for(WireFormat::fp8_e4m3, 1e-45f, 1.0f, true), 0x1p127f);
  EXPECT_EQ(fusedcoll::scale_for(WireFormat::bf16, 3e38f, 8.0f, true), 0.125f);
  // Scaled values stay in range: amax * scale * headroom <= max.
  for (float amax : {1e-3f, 0.37f, 1.0f, 5.5f, 1e4f})
    for (float head : {1.0f, 3.0f, 8.0f})
      for (bool p2 : {false, true}) {
        const float s = fusedcoll::scale_for(WireFormat::fp8_e4m3, amax, head, p2);
        EXPECT_LE(double(amax) * s * head, 448.0 * (1 + 1e-6)) << amax << " " << head;
        int e = 0;
        if (p2) {
          EXPECT_EQ(std::frexp(s, &e), 0.5f) << s;
        }
      }
}

TEST(Scaling, NonFiniteAmaxIsInvalid) {
  EXPECT_INVALID((void)fusedcoll::scale_for(WireFormat::fp8_e4m3, NAN, 1, false), "amax");
  EXPECT_INVALID((void)fusedcoll::scale_for(WireFormat::fp8_e4m3, INFINITY, 1, false), "amax");
  EXPECT_INVALID((void)fusedcoll::scale_for(WireFormat::fp8_e4m3, -1.0f, 1, false), "amax");
  EXPECT_INVALID((void)fusedcoll::scale_for(WireFormat::fp8_e4m3, 1.0f, 0.5f, false), "headroom");
}

TEST(Scaling, BlockAmax) {
  const std::vector<float> x = {1, -7, 2, 0, -0.5f, 3, 9, -10, 4};
  EXPECT_EQ(fusedcoll::block_amax(x, 4), (std::vector<float>{7, 10, 4}));
  EXPECT_EQ(fusedcoll::block_amax(x, 0), (std::vector<float>{10}));
  EXPECT_TRUE(fusedcoll::block_amax({}, 4).empty());
  std::vector<float> y = x;
  y[5] = NAN;
  const auto t = fusedcoll::block_amax(y, 4);
  EXPECT_EQ(t[0], 7);
  EXPECT_TRUE(std::isnan(t[1]));
}

// The amax scan's vector paths (every lane, the unrolled body and the tail) against a plain loop:
// the exact maximum magnitude, or NaN when any element is NaN; infinities, -0 and subnormals.
TEST(Scaling, BlockAmaxEqualsAPlainLoop) {
  const auto& p = patterns();
  auto plain = [](const float* x, std::int64_t n) {
    float m = 0;
    bool nan = false;
    for (std::int64_t i = 0; i < n; ++i) {
      nan |= std::isnan(x[i]);
      m = std::max(m, std::fabs(x[i]));
    }
    return nan ? NAN : m;
  };
  std::vector<float> finite;
  for (std::uint32_t u : p)
    if (!std::isnan(from_bits(u))) finite.push_back(from_bits(u));
  std::uint64_t state = 7;
  for (int trial = 0; trial < 2000; ++trial) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::int64_t n = static_cast<std::int64_t>((state >> 33) % 300);
    const std::int64_t at = static_cast<std::int64_t>((state >> 13) % (finite.size() - 300));
    std::vector<float> x(finite.begin() + at, finite.begin() + at + n);
    // Small values only, so that the maximum is not always an infinity.
    const int shift = static_cast<int>((state >> 40) % 64) - 40;
    for (float& v : x) {
      int e = 0;
      v = std::ldexp(std::frexp(v, &e), shift);
    }
    if (n > 0) x[static_cast<std::size_t>((state >> 20) % static_cast<std::uint64_t>(n))] = -0.0f;
    const auto t = fusedcoll::block_amax(x, 0);
    ASSERT_EQ(t.size(), n > 0 ? 1u : 0u);
    if (n > 0) {
      ASSERT_EQ(bits(t[0]), bits(plain(x.data(), n))) << "n " << n << " trial " << trial;
    }
  }
  // A NaN or an infinity in every position of a buffer longer than the widest unrolled body.
  std::vector<float> x(200);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = from_bits(0x00000001u + std::uint32_t(i) * 0x00800001u) * (i % 2 ? -1.0f : 1.0f);
  const float base = plain(x.data(), std::ssize(x));
  EXPECT_EQ(bits(fusedcoll::block_amax(x, 0)[0]), bits(base));
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::vector<float> y = x;
    y[i] = from_bits(0xFF800001u);  // a negative signalling NaN
    EXPECT_TRUE(std::isnan(fusedcoll::block_amax(y, 0)[0])) << i;
    y[i] = -INFINITY;
    EXPECT_EQ(fusedcoll::block_amax(y, 0)[0], INFINITY) << i;
    EXPECT_EQ(fusedcoll::block_amax(y, 16)[i / 16], INFINITY) << i;
  }
}

// --- The Compression object ----------------------------------------------------------------------

TEST(CompressionObject, SixteenBitRoundTripsAreExactOnRepresentableValues) {
  std::vector<float> x;
  for (int i = -2048; i <= 2048; ++i) x.push_back(float(i));  // exact in f16 and... f16 only
  for (auto c : {fusedcoll::Compression::fp16(), fusedcoll::Compression::none()}) {
    const auto z = c.compress(x);
    EXPECT_EQ(z.payload.size(), x.size() * fusedcoll::wire_size(c.options().format));
    EXPECT_EQ(fusedcoll::Compression::decompress(z), x);
  }
  std::vector<float> y;
  for (int i = -256; i <= 256; ++i) y.push_back(float(i));  // exact in bf16 (8 bits)
  EXPECT_EQ(fusedcoll::Compression::decompress(fusedcoll::Compression::bf16().compress(y)), y);
}

TEST(CompressionObject, Fp8ScaledPerTensorAndPerBlock) {
  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::ldexp(1.0f + float(i % 7) / 8, -int(i / 100)) * (i % 2 ? -1.0f : 1.0f);
  for (auto fmt : {WireFormat::fp8_e4m3, WireFormat::fp8_e5m2}) {
    for (auto scaling : {fusedcoll::Scaling::per_tensor, fusedcoll::Scaling::per_block}) {
      fusedcoll::Compression c({.format = fmt, .scaling = scaling, .block = 100});
      const auto z = c.compress(x);
      ASSERT_EQ(z.ctx.scales.size(), scaling == fusedcoll::Scaling::per_block ? 10u : 1u);
      const auto back = fusedcoll::Compression::decompress(z);
      // Per block, every block's amax maps onto the format's max: the relative error is that
      // of the format's mantissa (2^-4 for E4M3, 2^-3 for E5M2) for every normal-range value.
      const double tol = fmt == WireFormat::fp8_e4m3 ? 0x1p-4 : 0x1p-3;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (scaling == fusedcoll::Scaling::per_block || i < 400) {
          EXPECT_LE(std::fabs(back[i] - x[i]), tol * std::fabs(x[i]) + 1e-30)
              << to_string(fmt) << " " << to_string(scaling) << " i=" << i;
        }
      }
    }
  }
  // Unscaled E4M3 flushes small values to zero: the reason scaling exists.
  fusedcoll::Compression raw({.format = WireFormat::fp8_e4m3, .scaling = fusedcoll::Scaling::none});
  EXPECT_EQ(fusedcoll::Compression::decompress(raw.compress(std::vector<float>{1e-4f}))[0], 0.0f);
  EXPECT_NE(fusedcoll::Compression::decompress(
                fusedcoll::Compression::fp8_e4m3().compress(std::vector<float>{1e-4f}))[0],
            0.0f);
}

TEST(CompressionObject, AgreedAmaxAndHeadroom) {
  const std::vector<float> x = {0.5f, -0.25f, 0.125f};
  auto c = fusedcoll::Compression::fp8_e4m3();
  // An amax agreed with other ranks (larger than the local one) and headroom 4: scale
  // 2^floor(log2(448 / 8)) = 32.
  const std::vector<float> amax = {2.0f};
  const auto z = c.compress(x, amax, 4.0f);
  EXPECT_EQ(z.ctx.scales, (std::vector<float>{32.0f}));
  EXPECT_EQ(fusedcoll::Compression::decompress(z), x);  // exact: small powers of two
  const std::vector<float> nan_amax = {NAN};
  EXPECT_INVALID((void)c.compress(x, nan_amax), "amax");
  const std::vector<float> two = {1.0f, 1.0f};
  EXPECT_INVALID((void)c.compress(x, two), "amax");
  std::vector<float> with_nan = x;
  with_nan[1] = NAN;
  EXPECT_INVALID((void)c.compress(with_nan), "amax");  // scaling cannot represent a NaN
  // Unscaled, a NaN passes through as NaN.
  const auto back = fusedcoll::Compression::decompress(fusedcoll::Compression::fp16().compress(with_nan));
  EXPECT_TRUE(std::isnan(back[1]));
}

TEST(CompressionObject, DecompressChecksTheContext) {
  auto c = fusedcoll::Compression::fp16();
  const std::vector<float> x = {1, 2, 3};
  auto z = c.compress(x);
  std::vector<float> out(3);
  EXPECT_INVALID(fusedcoll::Compression::decompress(std::span(z.payload).first(4), z.ctx, out),
                 "payload");
  std::vector<float> short_out(2);
  EXPECT_INVALID(fusedcoll::Compression::decompress(z.payload, z.ctx, short_out), "output");
  auto bad = fusedcoll::Compression::fp8_e4m3().compress(x);
  bad.ctx.scales = {0.0f};
  out.assign(3, 0);
  EXPECT_INVALID(fusedcoll::Compression::decompress(bad.payload, bad.ctx, out), "scale");
  EXPECT_INVALID(fusedcoll::Compression({.format = WireFormat::fp8_e4m3,
                                         .scaling = fusedcoll::Scaling::per_block, .block = 0}),
                 "block");
}

TEST(CompressionObject, ErrorFeedbackCarriesTheResidual) {
  // A value below E4M3's resolution at this scale: without feedback it is lost every step; with
  // feedback the decoded values sum to the inputs' sum minus the last residual, exactly as
  // defined (residual = sent - received, sent = input + previous residual).
  fusedcoll::Compression c({.format = WireFormat::fp8_e4m3, .scaling = fusedcoll::Scaling::none},
                           /*error_feedback=*/true);
  const std::vector<float> x = {1.0f + 1.0f / 32, 0.001f};
  std::vector<float> prev_residual = {0, 0};
  double sum_in = 0, sum_out = 0;
  for (int step = 0; step < 64; ++step) {
    const auto z = c.compress(x);
    const auto got = fusedcoll::Compression::decompress(z);
    const auto res = c.residual();
    ASSERT_EQ(res.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      const float sent = x[i] + prev_residual[i];
      EXPECT_EQ(res[i], sent - got[i]) << "step " << step << " i " << i;
      prev_residual[i] = res[i];
    }
    sum_in += x[0];
    sum_out += got[0];
  }
  EXPECT_NEAR(sum_out, sum_in, 0.07);  // without feedback: 64 * 1/32 = 2 lost
  EXPECT_INVALID((void)c.compress(std::vector<float>{1, 2, 3}), "size");
  c.reset_residual();
  EXPECT_TRUE(c.residual().empty());
  EXPECT_EQ(c.compress(std::vector<float>{1, 2, 3}).ctx.count, 3);
}

TEST(CompressionObject, ErrorFeedbackDropsNonFiniteResiduals) {
  fusedcoll::ErrorFeedback ef;
  std::vector<float> sent = {1.0f, NAN, INFINITY};
  const std::vector<float> got = {0.5f, NAN, 65504.0f};
  ef.update(sent, got);
  EXPECT_EQ(ef.residual()[0], 0.5f);
  EXPECT_EQ(ef.residual()[1], 0.0f);
  EXPECT_EQ(ef.residual()[2], 0.0f);
  const std::vector<float> two = {1.0f, 2.0f};
  EXPECT_INVALID(ef.update(sent, two), "sizes differ");
  std::vector<float> four(4);
  EXPECT_INVALID(ef.apply(four), "changed size");
  EXPECT_INVALID(ef.update(four, four), "changed size");
}

// detail::wire_reduce, the fused step of the compressed reductions, against the unfused sequence
// of codec and reduction calls it replaces: same bits for every format, scaling, op, source kind
// and position, over several of its blocks with a tail, with and without the final round trip.
TEST(WireReduce, SameBitsAsTheUnfusedPasses) {
  namespace d = fusedcoll::detail;
  using K = d::WireSource::Kind;
  const std::int64_t n = 5000, first = 123;
  std::vector<std::vector<float>> y(4, std::vector<float>(n));
  for (int r = 0; r < 4; ++r) {
    fusedcoll::fill_values(y[r].data(), n, fusedcoll::DType::f32, 7, r, 0,
                           fusedcoll::ValueMode::random);
    for (std::int64_t i = 0; i < n; i += 97) y[r][i] *= 1e5f;  // overflows unscaled fp8
  }
  for (const CodecFormat* f : fctest::kAllFormats) {
    for (int scaling = 0; scaling < 3; ++scaling) {
      fusedcoll::CompressionOptions o{.format = f->wire};
      o.scaling = scaling == 0 ? fusedcoll::Scaling::none
                               : (scaling == 1 ? fusedcoll::Scaling::per_tensor
                                               : fusedcoll::Scaling::per_block);
      o.block = 1000;
      o.pow2_scale = scaling == 1;
      std::vector<float> amax = d::empty_amax(o);
      for (const auto& v : y) d::accumulate_amax(o, amax, v.data(), first, n);
      const d::WirePlan plan = d::make_plan(o, amax, 4.0f);
      std::vector<std::vector<std::byte>> wire(4, std::vector<std::byte>(n * plan.elem()));
      for (int r = 0; r < 4; ++r) d::wire_encode(plan, y[r].data(), first, n, wire[r].data());
      for (fusedcoll::ReduceOp op : {fusedcoll::ReduceOp::sum, fusedcoll::ReduceOp::max,
                                     fusedcoll::ReduceOp::min, fusedcoll::ReduceOp::avg}) {
        const std::vector<std::vector<K>> shapes = {
            {K::round_trip, K::wire, K::wire, K::wire}, {K::wire, K::wire, K::round_trip, K::wire},
            {K::wire, K::plain}, {K::plain, K::round_trip}, {K::plain}, {K::round_trip}};
        for (const auto& shape : shapes) {
          // Unfused: decode / round trip each source into a buffer, fold, divide, round trip.
          std::vector<float> acc(n), val(n);
          std::vector<std::byte> tmp;
          std::vector<d::WireSource> srcs;
          for (std::size_t i = 0; i < shape.size(); ++i) {
            float* dst = i == 0 ? acc.data() : val.data();
            if (shape[i] == K::wire) {
              d::wire_decode(plan, wire[i].data(), first, n, dst);
              srcs.push_back({K::wire, wire[i].data()});
            } else {
              std::copy_n(y[i].data(), n, dst);
              if (shape[i] == K::round_trip) d::wire_round_trip(plan, dst, first, n, tmp);
              srcs.push_back({shape[i], y[i].data()});
            }
            if (i > 0) d::reduce_into(acc.data(), val.data(), n, fusedcoll::DType::f32, op);
          }
          const int divide = op == fusedcoll::ReduceOp::avg ? 4 : 0;
          if (divide) d::finish_average(acc.data(), n, fusedcoll::DType::f32, divide);
          std::vector<std::byte> want_fin(n * plan.elem());
          d::wire_encode(plan, acc.data(), first, n, want_fin.data());
          std::vector<float> want_rt(n);
          d::wire_decode(plan, want_fin.data(), first, n, want_rt.data());

          const std::string what = std::string(f->name) + " scaling " + std::to_string(scaling) +
                                   " op " + std::to_string(static_cast<int>(op)) + " sources " +
                                   std::to_string(shape.size());
          std::vector<float> out(n, -1.0f);
          d::wire_reduce(plan, op, srcs, first, n, divide, nullptr, out.data());
          EXPECT_EQ(std::memcmp(out.data(), acc.data(), n * 4), 0) << what << ": no final round trip";
          std::vector<std::byte> fin(n * plan.elem());
          d::wire_reduce(plan, op, srcs, first, n, divide, fin.data(), out.data());
          EXPECT_EQ(std::memcmp(fin.data(), want_fin.data(), fin.size()), 0) << what << ": fin";
          EXPECT_EQ(std::memcmp(out.data(), want_rt.data(), n * 4), 0) << what << ": rt(acc)";
          std::fill(fin.begin(), fin.end(), std::byte{0});
          d::wire_reduce(plan, op, srcs, first, n, divide, fin.data(), nullptr);
          EXPECT_EQ(std::memcmp(fin.data(), want_fin.data(), fin.size()), 0) << what << ": fin only";
        }
      }
    }
  }
}

}  // namespace
