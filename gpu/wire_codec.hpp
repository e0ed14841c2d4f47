#pragma once
// The wire codecs of the GPU backend (f32 <-> f16 / bf16 / FP8 E4M3 / E5M2, docs/compression.md),
// written as `__host__ __device__` code: the kernels call them, and the host compiler builds the
// same header so that the normal test suite checks every code and >= 10^6 f32 patterns against
// the CPU codecs (core/codec.cpp) on a machine without a GPU (tests/gpu_codec_test.cpp); the
// `gpu` suite repeats the comparison on the device.
//
// The rounding is integer-only (guard bits and ties to even on the significand), not core's
// "magic number" float add, for two reasons: a device's denormal mode (-ftz, AMD's denorm
// defaults) cannot change a bit of it, and it is a second, independent derivation of the same
// codes, so the exhaustive comparison against the CPU codecs tests something. The only float
// operations are the scale's multiply and divide, spelled as correctly rounded intrinsics on the
// device (FMA contraction and fast division cannot touch them).

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
// The device pass's intrinsics (__float_as_uint, __fmul_rn, ...): nvcc declares them itself,
// hipcc only through hip_runtime.h, which portability.hpp includes. The host compiler sees none
// of it: the normal suite builds this header without a GPU toolchain.
#include "gpu/portability.hpp"
#define FC_HD __host__ __device__
#else
#define FC_HD
#endif
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define FC_DEVICE_PASS 1
#else
#define FC_DEVICE_PASS 0
#endif

namespace fusedcoll::gpu::codec {

FC_HD inline std::uint32_t bits_of(float x) {
#if FC_DEVICE_PASS
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FC_HD inline float float_of(std::uint32_t u) {
#if FC_DEVICE_PASS
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// A NaN operand of a product or quotient comes out quietened with its sign and payload, the
/// first operand's if both are NaN: what x86 and AArch64 (default-NaN mode off) do and ref/ relies
/// on (docs/semantics.md, "NaN results"). NVIDIA's and AMD's units return one canonical NaN
/// (0x7FFFFFFF) instead, so the rule is spelled out, on both passes so that the CPU simulation
/// runs the code the device runs. A NaN generated from non-NaN operands (0 * inf) cannot occur
/// here: every divisor and scale is finite and non-zero.
FC_HD inline bool propagate_nan(float a, float b, float& out) {
  if (a != a) {
    out = float_of(bits_of(a) | 0x400000u);
    return true;
  }
  if (b != b) {
    out = float_of(bits_of(b) | 0x400000u);
    return true;
  }
  return false;
}

/// IEEE binary32 product and quotient, rounded to nearest even (never fused, never approximated).
FC_HD inline float mul_rn(float a, float b) {
  float nan;
  if (propagate_nan(a, b, nan)) return nan;
#if FC_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FC_HD inline float div_rn(float a, float b) {
  float nan;
  if (propagate_nan(a, b, nan)) return nan;
#if FC_DEVICE_PASS
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FC_HD inline float add_rn(float a, float b) {
#if FC_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// The wire formats, numbered as `fusedcoll::WireFormat` (none = 0 is never encoded here).
enum Format : int { kF16 = 1, kBf16 = 2, kE4m3 = 3, kE5m2 = 4 };

/// A binary floating-point format with `E` exponent and `M` mantissa bits.
struct Fmt {
  int E, M, bias, bits;
  bool ieee_specials;  ///< all-ones exponent = inf / NaN (f16, bf16, E5M2); E4M3: only S.1111.111
                       ///< is NaN
};

FC_HD inline Fmt fmt_of(int format) {
  switch (format) {
    case kF16:
      return {5, 10, 15, 16, true};
    case kBf16:
      return {8, 7, 127, 16, true};
    case kE4m3:
      return {4, 3, 7, 8, false};
    default:
      return {5, 2, 15, 8, true};  // kE5m2
  }
}

/// Bytes per encoded element.
FC_HD inline int wire_bytes(int format) { return format == kF16 || format == kBf16 ? 2 : 1; }

/// Index of the highest set bit of `v` (> 0).
FC_HD inline int top_bit(std::uint32_t v) {
  int n = 0;
  while (v >>= 1) ++n;
  return n;
}

/// The magnitude code of `a` = |x| (finite, as binary32 bits) rounded to nearest even into `f`,
/// with no overflow handling: may exceed the largest finite code.
FC_HD inline std::uint32_t round_magnitude(const Fmt& f, std::uint32_t a) {
  const std::uint32_t e = a >> 23, m = a & 0x7FFFFFu;
  // |x| = sig * 2^(exp2), sig an integer of at most 24 bits.
  const std::uint32_t sig = e == 0 ? m : (m | 0x800000u);
  const int exp2 = (e == 0 ? 1 : static_cast<int>(e)) - 150;
  // Below the format's smallest normal 2^(1 - bias) the grid is 2^(1 - bias - M); above, the
  // grid of |x|'s own binade, 2^(e - 127 - M).
  const int min_normal_e = 1 - f.bias;
  const int unbiased = static_cast<int>(e) - 127;
  const bool normal = e != 0 && unbiased >= min_normal_e;
  const int grid = normal ? unbiased - f.M : min_normal_e - f.M;
  const int shift = grid - exp2;  // >= 1 for every format here (M < 23)
  if (shift > 31) return 0;       // below half the smallest subnormal: rounds to zero
  const std::uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
  const std::uint32_t up = rem > half || (rem == half && (q & 1u)) ? 1u : 0u;
  if (!normal) return q + up;  // a carry lands on the smallest normal's code, as it should
  // q holds the implicit bit at position M: replace it with the biased exponent.
  const std::uint32_t biased = static_cast<std::uint32_t>(unbiased + f.bias);
  return ((biased << f.M) | (q & ((1u << f.M) - 1u))) + up;
}

/// f32 -> the format's code (round to nearest even; `saturate`: finite overflow gives +-max and,
/// in E4M3, +-inf gives +-max; otherwise +-inf / NaN as the format allows). NaNs keep their sign
/// and the top payload bits that fit, quietened (docs/compression.md, "Conversions").
FC_HD inline std::uint32_t encode(int format, float x, bool saturate) {
  const std::uint32_t u = bits_of(x), a = u & 0x7FFFFFFFu;
  const Fmt f = fmt_of(format);
  const std::uint32_t sign = (u >> 31) << (f.bits - 1);
  const std::uint32_t exp_ones = (1u << f.E) - 1u;
  const std::uint32_t inf = exp_ones << f.M;  // IEEE-style formats only
  const std::uint32_t max = f.ieee_specials ? inf - 1u : (inf | ((1u << f.M) - 1u)) - 1u;
  const std::uint32_t nan_e4m3 = (exp_ones << f.M) | ((1u << f.M) - 1u);
  if (a > 0x7F800000u) {
    // Quiet NaN with the payload's top bits: f16 keeps 9, bf16 6, E5M2 1 (the quiet bit of each
    // is the mantissa's top bit; bf16's is set on the shifted bits, as `(u >> 16) | 0x40`).
    if (format == kE4m3) return sign | nan_e4m3;
    const int keep = f.M - 1;
    const std::uint32_t payload = (a >> (23 - f.M)) & ((1u << keep) - 1u);
    return sign | inf | (1u << keep) | payload;
  }
  if (a == 0x7F800000u) return sign | (f.ieee_specials ? inf : (saturate ? max : nan_e4m3));
  const std::uint32_t code = round_magnitude(f, a);
  if (code > max) return sign | (saturate ? max : (f.ieee_specials ? inf : nan_e4m3));
  return sign | code;
}

/// The format's code -> f32, exactly. NaNs come back quiet: f16 / E5M2 with their payload,
/// E4M3's NaN as 0x7FC00000 with the sign, bf16 as its bits (already a binary32 prefix).
FC_HD inline float decode(int format, std::uint32_t c) {
  if (format == kBf16) return float_of(c << 16);
  const Fmt f = fmt_of(format);
  const std::uint32_t sign = ((c >> (f.bits - 1)) & 1u) << 31;
  const std::uint32_t e = (c >> f.M) & ((1u << f.E) - 1u), m = c & ((1u << f.M) - 1u);
  const std::uint32_t exp_ones = (1u << f.E) - 1u;
  if (f.ieee_specials && e == exp_ones)
    return float_of(sign | 0x7F800000u | (m << (23 - f.M)) | (m != 0 ? 0x400000u : 0u));
  if (!f.ieee_specials && e == exp_ones && m == (1u << f.M) - 1u)
    return float_of(sign | 0x7FC00000u);
  if (e == 0) {
    if (m == 0) return float_of(sign);
    // m * 2^(1 - bias - M), normalised: the top bit n of m becomes the implicit bit.
    const int n = top_bit(m);
    const std::uint32_t exp_field = static_cast<std::uint32_t>(n + 1 - f.bias - f.M + 127);
    return float_of(sign | (exp_field << 23) | ((m << (23 - n)) & 0x7FFFFFu));
  }
  return float_of(sign | ((e - static_cast<std::uint32_t>(f.bias) + 127u) << 23) |
                  (m << (23 - f.M)));
}

/// What the kernels need of one call's wire: the format, the overflow mode and the agreed scales
/// (WirePlan, include/fusedcoll/detail/wire.hpp), as plain device-copyable values. Element index
/// `i` uses scales[i / block] (block > 0), scales[0] (block == 0), or no scale (scales null).
struct Wire {
  int format = 0;  ///< 0: none (uncompressed)
  bool saturate = true;
  std::int64_t block = 0;
  const float* scales = nullptr;

  FC_HD int bytes() const { return wire_bytes(format); }
  FC_HD float scale_at(std::int64_t i) const { return scales[block > 0 ? i / block : 0]; }
  /// encode(v * s_i), the product rounded first.
  FC_HD std::uint32_t encode_at(float v, std::int64_t i) const {
    if (scales != nullptr) v = mul_rn(v, scale_at(i));
    return encode(format, v, saturate);
  }
  /// decode(c) / s_i.
  FC_HD float decode_at(std::uint32_t c, std::int64_t i) const {
    const float v = decode(format, c);
    return scales != nullptr ? div_rn(v, scale_at(i)) : v;
  }
  /// What a receiver gets when `v` is sent: decode(encode(v)) at index `i`.
  FC_HD float round_trip(float v, std::int64_t i) const { return decode_at(encode_at(v, i), i); }
  FC_HD void store(void* base, std::int64_t e, std::uint32_t code) const {
    if (bytes() == 2)
      static_cast<std::uint16_t*>(base)[e] = static_cast<std::uint16_t>(code);
    else
      static_cast<std::uint8_t*>(base)[e] = static_cast<std::uint8_t>(code);
  }
  FC_HD std::uint32_t load(const void* base, std::int64_t e) const {
    return bytes() == 2 ? static_cast<const std::uint16_t*>(base)[e]
                        : static_cast<const std::uint8_t*>(base)[e];
  }
};

}  // namespace fusedcoll::gpu::codec
