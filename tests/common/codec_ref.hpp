#pragma once
/// @file
/// An independent reference for the codecs, written from the format definitions in double
/// arithmetic (no bit tricks shared with core/codec.cpp): a code's value is
/// (-1)^s * 2^(e - bias) * (1 + m / 2^M) (normal) or (-1)^s * 2^(1 - bias) * (m / 2^M)
/// (subnormal); encoding picks the multiple of the binade's spacing nearest to |x| with
/// `nearbyint` (round half to even in the default rounding mode), then applies the overflow rule.

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fusedcoll/compression.hpp"
#include "fusedcoll/inputs.hpp"

namespace fctest {

struct CodecFormat {
  const char* name;
  fusedcoll::WireFormat wire;
  int ebits, mbits, bias;
  bool has_inf;  ///< IEEE-style: all-ones exponent = inf (m = 0) or NaN; else only S.1..1.1..1 is NaN
  double max;
  int bits;
};

inline const CodecFormat kF16{"f16", fusedcoll::WireFormat::f16, 5, 10, 15, true, 65504.0, 16};
inline const CodecFormat kBF16{"bf16", fusedcoll::WireFormat::bf16, 8, 7, 127, true,
                               0x1.FEp127, 16};
inline const CodecFormat kE4M3{"e4m3", fusedcoll::WireFormat::fp8_e4m3, 4, 3, 7, false, 448.0, 8};
inline const CodecFormat kE5M2{"e5m2", fusedcoll::WireFormat::fp8_e5m2, 5, 2, 15, true, 57344.0,
                               8};
inline const CodecFormat* const kAllFormats[] = {&kF16, &kBF16, &kE4M3, &kE5M2};

/// A value as the definitions see it.
struct RefValue {
  bool nan = false;
  bool negative = false;
  double magnitude = 0;  ///< may be +inf
};

inline RefValue decode_ref(const CodecFormat& f, std::uint32_t code) {
  RefValue v;
  v.negative = (code >> (f.bits - 1)) & 1u;
  const std::uint32_t e = (code >> f.mbits) & ((1u << f.ebits) - 1u);
  const std::uint32_t m = code & ((1u << f.mbits) - 1u);
  const std::uint32_t e_all = (1u << f.ebits) - 1u, m_all = (1u << f.mbits) - 1u;
  if (f.has_inf && e == e_all) {
    if (m == 0) v.magnitude = INFINITY;
    else v.nan = true;
    return v;
  }
  if (!f.has_inf && e == e_all && m == m_all) {
    v.nan = true;
    return v;
  }
  v.magnitude = e == 0 ? std::ldexp(double(m), 1 - f.bias - f.mbits)
                       : std::ldexp(double((1u << f.mbits) + m), int(e) - f.bias - f.mbits);
  return v;
}

inline RefValue encode_ref(const CodecFormat& f, float x, fusedcoll::Overflow overflow) {
  const bool saturate = overflow == fusedcoll::Overflow::saturate;
  RefValue r;
  r.negative = std::signbit(x);
  if (std::isnan(x)) {
    r.nan = true;
    return r;
  }
  const double v = std::fabs(double(x));
  auto overflowed = [&] {
    if (saturate) r.magnitude = f.max;
    else if (f.has_inf) r.magnitude = INFINITY;
    else r.nan = true;
    return r;
  };
  if (std::isinf(v)) {
    if (f.has_inf) {
      r.magnitude = INFINITY;
      return r;
    }
    return overflowed();
  }
  if (v == 0) return r;
  int k = 0;
  (void)std::frexp(v, &k);  // v in [2^(k-1), 2^k)
  const int e = std::max(k - 1, 1 - f.bias);
  const double spacing = std::ldexp(1.0, e - f.mbits);
  const double rounded = std::nearbyint(v / spacing) * spacing;
  if (rounded > f.max) return overflowed();
  r.magnitude = rounded;
  return r;
}

/// True when `got` (a float) is the value `want` describes: same NaN-ness and sign, and the same
/// magnitude.
inline bool same_value(const RefValue& want, float got) {
  if (want.nan) return std::isnan(got) && std::signbit(got) == want.negative;
  return !std::isnan(got) && std::signbit(got) == want.negative &&
         std::fabs(double(got)) == want.magnitude;
}

/// The library's scalar codec of a format, by format.
inline std::uint32_t lib_encode(const CodecFormat& f, float x, fusedcoll::Overflow o) {
  switch (f.wire) {
    case fusedcoll::WireFormat::f16: return fusedcoll::f32_to_f16(x, o);
    case fusedcoll::WireFormat::bf16: return fusedcoll::f32_to_bf16(x, o);
    case fusedcoll::WireFormat::fp8_e4m3: return fusedcoll::f32_to_e4m3(x, o);
    default: return fusedcoll::f32_to_e5m2(x, o);
  }
}
inline float lib_decode(const CodecFormat& f, std::uint32_t c) {
  switch (f.wire) {
    case fusedcoll::WireFormat::f16: return fusedcoll::f16_to_f32(static_cast<std::uint16_t>(c));
    case fusedcoll::WireFormat::bf16: return fusedcoll::bf16_to_f32(static_cast<std::uint16_t>(c));
    case fusedcoll::WireFormat::fp8_e4m3: return fusedcoll::e4m3_to_f32(static_cast<std::uint8_t>(c));
    default: return fusedcoll::e5m2_to_f32(static_cast<std::uint8_t>(c));
  }
}

/// The f32 patterns every codec test runs (about 10^7, reproducible): every exponent and sign
/// with rounding-relevant mantissas, every halfway point between neighbouring codes of every
/// format and its f32 neighbours, the overflow thresholds, zeros, infinities, NaN payloads,
/// f32 subnormals with a stride, and random bits.
inline const std::vector<std::uint32_t>& patterns() {
  static const std::vector<std::uint32_t> p = [] {
    std::vector<std::uint32_t> v;
    // Every exponent field and sign with edge and rounding-relevant mantissas: the lowest bits
    // around each format's rounding position (bits 13, 16, 20, 21 are the first dropped bits).
    const std::uint32_t mantissas[] = {0,        1,        2,        0x7FFFFF, 0x7FFFFE, 0x400000,
                                       0x400001, 0x3FFFFF, 0x1000,   0x1FFF,   0x2000,   0x3000,
                                       0x8000,   0xFFFF,   0x10000,  0x18000,  0x80000,  0xFFFFF,
                                       0x100000, 0x180000, 0x200000, 0x300000, 0x2FFFFF, 0x500000};
    for (std::uint32_t s = 0; s < 2; ++s)
      for (std::uint32_t e = 0; e < 256; ++e)
        for (std::uint32_t m : mantissas) v.push_back((s << 31) | (e << 23) | m);
    // Halfway points between neighbouring codes of every format, and their f32 neighbours.
    for (const CodecFormat* f : kAllFormats) {
      const std::uint32_t n = 1u << (f->bits - 1);  // positive codes
      for (std::uint32_t c = 0; c + 1 < n; ++c) {
        const RefValue a = decode_ref(*f, c), b = decode_ref(*f, c + 1);
        if (a.nan || b.nan || std::isinf(b.magnitude)) continue;
        const float mid = static_cast<float>((a.magnitude + b.magnitude) / 2);  // exact
        for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
          v.push_back(std::bit_cast<std::uint32_t>(x));
          v.push_back(std::bit_cast<std::uint32_t>(-x));
        }
      }
      // Just past the largest finite value: the halfway point to the next binade step.
      const double step = std::ldexp(1.0, int(std::floor(std::log2(f->max))) - f->mbits);
      const float over = static_cast<float>(f->max + step / 2);
      for (float x : {over, std::nextafter(over, 0.0f), std::nextafter(over, INFINITY)}) {
        v.push_back(std::bit_cast<std::uint32_t>(x));
        v.push_back(std::bit_cast<std::uint32_t>(-x));
      }
    }
    // Specials: zeros, infinities, NaN payloads (quiet and signalling, both signs).
    for (std::uint32_t s : {0u, 0x80000000u}) {
      for (std::uint32_t m : {0u, 1u, 0x1FFFu, 0x2000u, 0x200000u, 0x3FFFFFu, 0x400000u,
                              0x400001u, 0x7FFFFFu, 0x155555u, 0x2AAAAAu})
        v.push_back(s | 0x7F800000u | m);  // m = 0: inf
      v.push_back(s);
    }
    // All f32 subnormals with a stride, and random patterns up to 10^7 in all.
    for (std::uint32_t m = 1; m < 0x800000u; m += 97) v.push_back(m);
    std::uint64_t i = 0;
    while (v.size() < 10'000'000) v.push_back(static_cast<std::uint32_t>(fusedcoll::hash_draw(7, 3, 0, i++)));
    return v;
  }();
  return p;
}

}  // namespace fctest
