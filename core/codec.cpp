// The f32 <-> f16 / bf16 / E4M3 / E5M2 codecs (include/fusedcoll/compression.hpp).
//
// One algorithm per format, written twice: as scalar code (the reference), and as a template over
// GCC vector types that the batch entry points instantiate for SSE2, AVX2 and AVX-512 and pick at
// run time, as core/kernels.cpp does. Both perform the same integer operations and the same single
// IEEE float add (the subnormal "magic number" rounding), so every lane yields the scalar bits;
// the tests compare them on every input class, and on all 2^32 patterns in the long suite. On
// AVX2 and AVX-512 the f16 conversions use the F16C/AVX-512 instructions instead, whose IEEE
// round-to-nearest-even and NaN quieting the scalar code reproduces (saturation is a clamp done
// before the instruction).
//
// Rounding relies on the default floating-point environment (round to nearest, no FTZ/DAZ), which
// is what every fusedcoll entry point runs under.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "fusedcoll/compression.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "fusedcoll/env.hpp"

#if defined(__FAST_MATH__)
#error "core/codec.cpp pins IEEE rounding; build it without -ffast-math"
#endif

#if defined(__x86_64__) || defined(__i386__)
#define FC_CODEC_X86 1
#include <immintrin.h>
#else
#define FC_CODEC_X86 0
#endif

#define FC_INLINE [[gnu::always_inline]] inline

// Wide vectors cross helper boundaries by reference (out-parameters), never by value: returning
// or passing one by value from code compiled for the baseline would change its ABI (-Wpsabi).

namespace fusedcoll {
namespace {

using std::int64_t;
using std::uint16_t;
using std::uint32_t;
using std::uint8_t;

// --- The formats -------------------------------------------------------------------------------
//
// A narrow float with kE exponent bits, kM mantissa bits and bias kBias, seen from binary32 bits
// `a = |x|`:
//  - a < kMinNormal (below the smallest normal of the format): the subnormal grid is a fixed-point
//    grid, so adding kMagic (a power of two whose ulp is the format's smallest subnormal) rounds
//    |x| onto it with one IEEE add; the code is the difference of the sum's bits and kMagic's.
//  - otherwise: round the 23-bit mantissa to kM bits by integer addition (ties to even via the
//    kept mantissa's lowest bit; a carry moves into the exponent, as it should) and rebias.
//  - a > kOverflowBits: the rounded magnitude exceeds the largest finite value.

// The constants every format derives from its mantissa bits and bias (binary32 bit patterns).
template <int M, int Bias, int Bits>
struct NarrowFloat {
  static constexpr int kM = M, kBias = Bias, kBits = Bits;
  static constexpr uint32_t kMinNormal = uint32_t(127 - kBias + 1) << 23;
  static constexpr uint32_t kMagic = uint32_t((127 - kBias) + (23 - kM) + 1) << 23;
};

struct F16 : NarrowFloat<10, 15, 16> {
  static constexpr uint32_t kOverflowBits = 0x477FEFFFu;  // 65520 (a tie with odd 65504) rounds up
  static constexpr uint32_t kMax = 0x7BFF, kInf = 0x7C00;
  static constexpr bool kHasInf = true;
  static constexpr uint32_t nan(uint32_t a) { return 0x7E00u | ((a >> 13) & 0x1FFu); }
};

struct E5M2 : NarrowFloat<2, 15, 8> {
  static constexpr uint32_t kOverflowBits = 0x476FFFFFu;  // 61440 (a tie with odd 57344) rounds up
  static constexpr uint32_t kMax = 0x7B, kInf = 0x7C;
  static constexpr bool kHasInf = true;
  static constexpr uint32_t nan(uint32_t a) { return 0x7Eu | ((a >> 21) & 1u); }
};

struct E4M3 : NarrowFloat<3, 7, 8> {
  static constexpr uint32_t kOverflowBits = 0x43E80000u;  // 464, a tie with even 448, rounds down
  static constexpr uint32_t kMax = 0x7E, kInf = 0x7F;  // no infinity: the NaN code stands in
  static constexpr bool kHasInf = false;
  static constexpr uint32_t nan(uint32_t) { return 0x7Fu; }
};

template <class Fmt>
constexpr uint32_t overflow_code(bool saturate) {
  return saturate ? Fmt::kMax : Fmt::kInf;
}
template <class Fmt>
constexpr uint32_t inf_code(bool saturate) {
  return Fmt::kHasInf ? Fmt::kInf : (saturate ? Fmt::kMax : Fmt::kInf);
}

template <class Fmt>
uint32_t encode_scalar(float x, bool saturate) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 31) << (Fmt::kBits - 1);
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t code;
  if (a > 0x7F800000u) {
    code = Fmt::nan(a);
  } else if (a == 0x7F800000u) {
    code = inf_code<Fmt>(saturate);
  } else if (a > Fmt::kOverflowBits) {
    code = overflow_code<Fmt>(saturate);
  } else if (a < Fmt::kMinNormal) {
    const float magic = std::bit_cast<float>(Fmt::kMagic);
    code = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + magic) - Fmt::kMagic;
  } else {
    const uint32_t odd = (a >> (23 - Fmt::kM)) & 1u;
    code = (a + (uint32_t(Fmt::kBias - 127) << 23) + ((1u << (22 - Fmt::kM)) - 1u) + odd) >>
           (23 - Fmt::kM);
  }
  return sign | code;
}

uint32_t bf16_scalar(float x, bool saturate) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t a = u & 0x7FFFFFFFu, sign = (u >> 16) & 0x8000u;
  if (a > 0x7F800000u) return (u >> 16) | 0x40u;
  if (a == 0x7F800000u) return u >> 16;
  if (a >= 0x7F7F8000u) return sign | (saturate ? 0x7F7Fu : 0x7F80u);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

float f16_decode_scalar(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(m) * 0x1p-24f));
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

float e4m3_decode_scalar(uint32_t c) {
  const uint32_t sign = (c & 0x80u) << 24, m7 = c & 0x7Fu, e = m7 >> 3, m = m7 & 7u;
  if (m7 == 0x7F) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (e == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(m) * 0x1p-9f));
  return std::bit_cast<float>(sign | ((e + 120u) << 23) | (m << 20));
}

// --- Vector forms ----------------------------------------------------------------------------

template <int L>
struct Lanes {
  static constexpr int kLanes = L;
  typedef float F __attribute__((vector_size(4 * L)));
  typedef uint32_t U __attribute__((vector_size(4 * L)));
  typedef std::int32_t I __attribute__((vector_size(4 * L)));
  typedef uint16_t H __attribute__((vector_size(2 * L)));
  typedef uint8_t B __attribute__((vector_size(L)));
};

template <class V, class T>
FC_INLINE void splat(V& v, T c) {
  v = V{} + static_cast<decltype(v[0] + 0)>(c);
}

// Comparisons of magnitudes (< 2^31) are done on signed lanes: x86 has no unsigned compare.
template <class Fmt, class Vt>
FC_INLINE void encode_vec(typename Vt::U& out, const typename Vt::U& u, bool saturate) {
  using U = typename Vt::U;
  using I = typename Vt::I;
  using F = typename Vt::F;
  const U sign = (u >> 31) << (Fmt::kBits - 1);
  const U a = u & 0x7FFFFFFFu;
  const I ai = __builtin_bit_cast(I, a);
  const U odd = (a >> (23 - Fmt::kM)) & 1u;
  const U normal =
      (a + (uint32_t(Fmt::kBias - 127) << 23) + ((1u << (22 - Fmt::kM)) - 1u) + odd) >>
      (23 - Fmt::kM);
  const F sum = __builtin_bit_cast(F, a) + std::bit_cast<float>(Fmt::kMagic);
  const U sub = __builtin_bit_cast(U, sum) - Fmt::kMagic;
  U ov, inf, nan;
  splat(ov, overflow_code<Fmt>(saturate));
  splat(inf, inf_code<Fmt>(saturate));
  if constexpr (std::is_same_v<Fmt, F16>)
    nan = 0x7E00u | ((a >> 13) & 0x1FFu);
  else if constexpr (std::is_same_v<Fmt, E5M2>)
    nan = 0x7Eu | ((a >> 21) & 1u);
  else
    splat(nan, 0x7Fu);
  U code = ai < int(Fmt::kMinNormal) ? sub : normal;
  code = ai > int(Fmt::kOverflowBits) ? ov : code;
  code = ai == int(0x7F800000) ? inf : code;
  code = ai > int(0x7F800000) ? nan : code;
  out = sign | code;
}

template <class Vt>
FC_INLINE void bf16_vec(typename Vt::U& out, const typename Vt::U& u, bool saturate) {
  using U = typename Vt::U;
  using I = typename Vt::I;
  const U a = u & 0x7FFFFFFFu;
  const I ai = __builtin_bit_cast(I, a);
  U code = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const U sign = (u >> 16) & 0x8000u;
  code = ai >= int(0x7F7F8000) ? (sign | (saturate ? 0x7F7Fu : 0x7F80u)) : code;
  code = ai == int(0x7F800000) ? (u >> 16) : code;
  out = ai > int(0x7F800000) ? ((u >> 16) | 0x40u) : code;
}

template <class Vt>
FC_INLINE void f16_decode_vec(typename Vt::U& result, const typename Vt::U& h) {
  using U = typename Vt::U;
  using I = typename Vt::I;
  using F = typename Vt::F;
  const U sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  const I ei = __builtin_bit_cast(I, e), mi = __builtin_bit_cast(I, m);
  const U normal = sign | ((e + 112u) << 23) | (m << 13);
  const F subf = __builtin_convertvector(mi, F) * 0x1p-24f;
  const U sub = sign | __builtin_bit_cast(U, subf);
  U quiet_bit, zero;
  splat(quiet_bit, 0x400000u);
  splat(zero, 0u);
  const U quiet = mi != 0 ? quiet_bit : zero;
  const U special = sign | 0x7F800000u | (m << 13) | quiet;
  const U out = ei == 0 ? sub : normal;
  result = ei == 0x1F ? special : out;
}

template <class Vt>
FC_INLINE void e4m3_decode_vec(typename Vt::U& result, const typename Vt::U& c) {
  using U = typename Vt::U;
  using I = typename Vt::I;
  using F = typename Vt::F;
  const U sign = (c & 0x80u) << 24, m7 = c & 0x7Fu, e = m7 >> 3, m = m7 & 7u;
  const I ei = __builtin_bit_cast(I, e), m7i = __builtin_bit_cast(I, m7);
  const U normal = sign | ((e + 120u) << 23) | (m << 20);
  const F subf = __builtin_convertvector(__builtin_bit_cast(I, m), F) * 0x1p-9f;
  const U sub = sign | __builtin_bit_cast(U, subf);
  const U out = ei == 0 ? sub : normal;
  result = m7i == 0x7F ? (sign | 0x7FC00000u) : out;
}

// --- Instruction sets ----------------------------------------------------------------------------

struct IsaBase : Lanes<4> {};
#if FC_CODEC_X86
struct IsaAvx2 : Lanes<8> {};
struct IsaAvx512 : Lanes<16> {};
#endif

enum Kind { kF16 = 0, kBf16 = 1, kE4m3 = 2, kE5m2 = 3 };

template <int K>
using WireT = std::conditional_t<K == kF16 || K == kBf16, uint16_t, uint8_t>;

template <int K>
FC_INLINE uint32_t encode_one(float x, bool saturate) {
  if constexpr (K == kF16) return encode_scalar<F16>(x, saturate);
  else if constexpr (K == kBf16) return bf16_scalar(x, saturate);
  else if constexpr (K == kE4m3) return encode_scalar<E4M3>(x, saturate);
  else return encode_scalar<E5M2>(x, saturate);
}

template <int K>
FC_INLINE float decode_one(uint32_t c) {
  if constexpr (K == kF16) return f16_decode_scalar(c);
  else if constexpr (K == kBf16) return std::bit_cast<float>(c << 16);
  else if constexpr (K == kE4m3) return e4m3_decode_scalar(c);
  else return f16_decode_scalar(c << 8);
}

// The scaled decode's `x / scale`, as a multiplication by `inv` when that is exact.
template <class F>
FC_INLINE void unscale(F& x, float scale, float inv) {
  x = inv != 0 ? x * inv : x / scale;
}
FC_INLINE float unscaled(float x, float scale, float inv) {
  unscale(x, scale, inv);
  return x;
}

template <class Isa, int K, bool kScaled>
FC_INLINE void encode_loop(const float* in, void* out_v, int64_t n, float scale, bool saturate) {
  using F = typename Isa::F;
  using U = typename Isa::U;
  using W = WireT<K>;
  constexpr int L = Isa::kLanes;
  auto* out = static_cast<W*>(out_v);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    F x;
    __builtin_memcpy(&x, in + i, sizeof(x));
    if constexpr (kScaled) x = x * scale;
    U u = __builtin_bit_cast(U, x);
    {
      U code;
      if constexpr (K == kF16) encode_vec<F16, Isa>(code, u, saturate);
      else if constexpr (K == kBf16) bf16_vec<Isa>(code, u, saturate);
      else if constexpr (K == kE4m3) encode_vec<E4M3, Isa>(code, u, saturate);
      else encode_vec<E5M2, Isa>(code, u, saturate);
      if constexpr (sizeof(W) == 2) {
        const typename Isa::H h = __builtin_convertvector(code, typename Isa::H);
        __builtin_memcpy(out + i, &h, sizeof(h));
      } else {
        const typename Isa::B b = __builtin_convertvector(code, typename Isa::B);
        __builtin_memcpy(out + i, &b, sizeof(b));
      }
    }
  }
  for (; i < n; ++i) {
    float x = in[i];
    if constexpr (kScaled) x = x * scale;
    out[i] = static_cast<W>(encode_one<K>(x, saturate));
  }
}

template <class Isa, int K, bool kScaled>
FC_INLINE void decode_loop(const void* in_v, float* out, int64_t n, float scale, float inv) {
  using F = typename Isa::F;
  using U = typename Isa::U;
  using W = WireT<K>;
  constexpr int L = Isa::kLanes;
  const auto* in = static_cast<const W*>(in_v);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    F x;
    if constexpr (sizeof(W) == 2) {
      typename Isa::H h;
      __builtin_memcpy(&h, in + i, sizeof(h));
      const U c = __builtin_convertvector(h, U);
      U u;
      if constexpr (K == kF16) f16_decode_vec<Isa>(u, c);
      else u = c << 16;
      x = __builtin_bit_cast(F, u);
    } else {
      typename Isa::B b;
      __builtin_memcpy(&b, in + i, sizeof(b));
      const U c = __builtin_convertvector(b, U);
      U u;
      if constexpr (K == kE5m2) f16_decode_vec<Isa>(u, U(c << 8));
      else e4m3_decode_vec<Isa>(u, c);
      x = __builtin_bit_cast(F, u);
    }
    if constexpr (kScaled) unscale(x, scale, inv);
    __builtin_memcpy(out + i, &x, sizeof(x));
  }
  for (; i < n; ++i) {
    float x = decode_one<K>(in[i]);
    if constexpr (kScaled) unscale(x, scale, inv);
    out[i] = x;
  }
}

struct Job {
  const void* in;
  void* out;
  int64_t n;
  float scale;
  bool scaled;
  bool saturate;
  // Decode: 1 / scale when that is exact and normal (a power-of-two scale, as pow2_scale gives),
  // else 0. Multiplying by an exact reciprocal rounds the same real number as dividing does, so it
  // yields the division's bits at a fraction of its cost.
  float inv = 0;
};


template <class Isa, int K>
FC_INLINE void encode_job(const Job& j) {
  const auto* in = static_cast<const float*>(j.in);
  if (j.scaled) encode_loop<Isa, K, true>(in, j.out, j.n, j.scale, j.saturate);
  else encode_loop<Isa, K, false>(in, j.out, j.n, j.scale, j.saturate);
}
template <class Isa, int K>
FC_INLINE void decode_job(const Job& j) {
  auto* out = static_cast<float*>(j.out);
  if (j.scaled) decode_loop<Isa, K, true>(j.in, out, j.n, j.scale, j.inv);
  else decode_loop<Isa, K, false>(j.in, out, j.n, j.scale, j.inv);
}

using JobFn = void (*)(const Job&);
using AmaxFn = float (*)(const float*, int64_t);
struct CodecTable {
  JobFn encode[4];
  JobFn decode[4];
  AmaxFn amax;
};

// max |x[i]| as the integer max of the magnitudes' bits: for non-negative floats the integer order
// is the numeric order, and every NaN's bits exceed inf's, so the result is NaN exactly when an
// element is; -0 counts as 0. Four accumulators, so the loop is bound by loads, not by latency.
template <class Isa>
FC_INLINE float abs_max_loop(const float* x, int64_t n) {
  using I = typename Isa::I;
  constexpr int L = Isa::kLanes;
  I m0{}, m1{}, m2{}, m3{};
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    I v0, v1, v2, v3;
    __builtin_memcpy(&v0, x + i, sizeof(v0));
    __builtin_memcpy(&v1, x + i + L, sizeof(v1));
    __builtin_memcpy(&v2, x + i + 2 * L, sizeof(v2));
    __builtin_memcpy(&v3, x + i + 3 * L, sizeof(v3));
    v0 &= 0x7FFFFFFF;
    v1 &= 0x7FFFFFFF;
    v2 &= 0x7FFFFFFF;
    v3 &= 0x7FFFFFFF;
    m0 = v0 > m0 ? v0 : m0;
    m1 = v1 > m1 ? v1 : m1;
    m2 = v2 > m2 ? v2 : m2;
    m3 = v3 > m3 ? v3 : m3;
  }
  m0 = m1 > m0 ? m1 : m0;
  m2 = m3 > m2 ? m3 : m2;
  m0 = m2 > m0 ? m2 : m0;
  std::int32_t m = 0;
  for (int k = 0; k < L; ++k) m = std::max(m, std::int32_t(m0[k]));
  for (; i < n; ++i) m = std::max(m, std::bit_cast<std::int32_t>(x[i]) & 0x7FFFFFFF);
  return m > 0x7F800000 ? std::numeric_limits<float>::quiet_NaN() : std::bit_cast<float>(m);
}

#define FC_CODEC_ENTRIES(Isa, attr)                                                          \
  attr void enc_f16_##Isa(const Job& j) { encode_job<Isa, kF16>(j); }                        \
  attr void enc_bf16_##Isa(const Job& j) { encode_job<Isa, kBf16>(j); }                      \
  attr void enc_e4m3_##Isa(const Job& j) { encode_job<Isa, kE4m3>(j); }                      \
  attr void enc_e5m2_##Isa(const Job& j) { encode_job<Isa, kE5m2>(j); }                      \
  attr void dec_f16_##Isa(const Job& j) { decode_job<Isa, kF16>(j); }                        \
  attr void dec_bf16_##Isa(const Job& j) { decode_job<Isa, kBf16>(j); }                      \
  attr void dec_e4m3_##Isa(const Job& j) { decode_job<Isa, kE4m3>(j); }                      \
  attr void dec_e5m2_##Isa(const Job& j) { decode_job<Isa, kE5m2>(j); }                      \
  attr float amax_##Isa(const float* x, int64_t n) { return abs_max_loop<Isa>(x, n); }       \
  constexpr CodecTable kTable_##Isa = {                                                      \
      {&enc_f16_##Isa, &enc_bf16_##Isa, &enc_e4m3_##Isa, &enc_e5m2_##Isa},                   \
      {&dec_f16_##Isa, &dec_bf16_##Isa, &dec_e4m3_##Isa, &dec_e5m2_##Isa},                   \
      &amax_##Isa};

FC_CODEC_ENTRIES(IsaBase, )
#if FC_CODEC_X86
FC_CODEC_ENTRIES(IsaAvx2, __attribute__((target("avx2,f16c"))))
FC_CODEC_ENTRIES(IsaAvx512, __attribute__((target("avx512f,avx512vl,avx512bw"))))
#endif
#undef FC_CODEC_ENTRIES

#if FC_CODEC_X86
// binary16 with the conversion instructions (F16C; AVX-512F for 16 lanes). They are written out
// per set rather than as templates: GCC refuses to inline a target-specific intrinsic into a
// template compiled for the baseline (and the maskz forms dodge a GCC 12 false
// -Wmaybe-uninitialized on the unmasked AVX-512 ones). The instruction rounds to nearest even and quiets NaNs
// exactly as encode_scalar<F16> does; finite overflow becomes inf, so saturation clamps first.
__attribute__((target("avx2,f16c"))) void enc_f16_f16c(const Job& j) {
  const auto* in = static_cast<const float*>(j.in);
  auto* out = static_cast<uint16_t*>(j.out);
  const __m256 scale = _mm256_set1_ps(j.scale);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), sign_mask = _mm256_set1_epi32(INT32_MIN);
  const __m256i over = _mm256_set1_epi32(int(F16::kOverflowBits)), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i max = _mm256_set1_epi32(0x477FE000);  // 65504
  int64_t i = 0;
  for (; i + 8 <= j.n; i += 8) {
    __m256 x = _mm256_loadu_ps(in + i);
    if (j.scaled) x = _mm256_mul_ps(x, scale);
    if (j.saturate) {
      const __m256i u = _mm256_castps_si256(x), a = _mm256_and_si256(u, abs_mask);
      const __m256i ov = _mm256_and_si256(_mm256_cmpgt_epi32(a, over), _mm256_cmpgt_epi32(inf, a));
      const __m256i clamped = _mm256_or_si256(_mm256_and_si256(u, sign_mask), max);
      x = _mm256_castsi256_ps(_mm256_blendv_epi8(u, clamped, ov));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < j.n; ++i)
    out[i] = static_cast<uint16_t>(encode_scalar<F16>(j.scaled ? in[i] * j.scale : in[i], j.saturate));
}

__attribute__((target("avx2,f16c"))) void dec_f16_f16c(const Job& j) {
  const auto* in = static_cast<const uint16_t*>(j.in);
  auto* out = static_cast<float*>(j.out);
  const __m256 scale = _mm256_set1_ps(j.scale), inv = _mm256_set1_ps(j.inv);
  int64_t i = 0;
  for (; i + 8 <= j.n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    if (j.scaled) x = j.inv != 0 ? _mm256_mul_ps(x, inv) : _mm256_div_ps(x, scale);
    _mm256_storeu_ps(out + i, x);
  }
  for (; i < j.n; ++i)
    out[i] = j.scaled ? unscaled(f16_decode_scalar(in[i]), j.scale, j.inv) : f16_decode_scalar(in[i]);
}

__attribute__((target("avx512f,avx512vl,avx512bw"))) void enc_f16_avx512(const Job& j) {
  const auto* in = static_cast<const float*>(j.in);
  auto* out = static_cast<uint16_t*>(j.out);
  const __m512 scale = _mm512_set1_ps(j.scale);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), sign_mask = _mm512_set1_epi32(INT32_MIN);
  const __m512i over = _mm512_set1_epi32(int(F16::kOverflowBits)), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i max = _mm512_set1_epi32(0x477FE000);
  int64_t i = 0;
  for (; i + 16 <= j.n; i += 16) {
    __m512 x = _mm512_loadu_ps(in + i);
    if (j.scaled) x = _mm512_mul_ps(x, scale);
    if (j.saturate) {
      const __m512i u = _mm512_castps_si512(x), a = _mm512_and_si512(u, abs_mask);
      const __mmask16 ov = _mm512_cmpgt_epi32_mask(a, over) & _mm512_cmpgt_epi32_mask(inf, a);
      const __m512i clamped = _mm512_or_si512(_mm512_and_si512(u, sign_mask), max);
      x = _mm512_castsi512_ps(_mm512_mask_blend_epi32(ov, u, clamped));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_maskz_cvtps_ph(0xFFFF, x, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < j.n; ++i)
    out[i] = static_cast<uint16_t>(encode_scalar<F16>(j.scaled ? in[i] * j.scale : in[i], j.saturate));
}

__attribute__((target("avx512f,avx512vl,avx512bw"))) void dec_f16_avx512(const Job& j) {
  const auto* in = static_cast<const uint16_t*>(j.in);
  auto* out = static_cast<float*>(j.out);
  const __m512 scale = _mm512_set1_ps(j.scale), inv = _mm512_set1_ps(j.inv);
  int64_t i = 0;
  for (; i + 16 <= j.n; i += 16) {
    __m512 x = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    if (j.scaled) x = j.inv != 0 ? _mm512_mul_ps(x, inv) : _mm512_div_ps(x, scale);
    _mm512_storeu_ps(out + i, x);
  }
  for (; i < j.n; ++i)
    out[i] = j.scaled ? unscaled(f16_decode_scalar(in[i]), j.scale, j.inv) : f16_decode_scalar(in[i]);
}

// FP8 decode through the binary16 conversion. An E5M2 code is the top byte of the binary16 of the
// same value. An E4M3 code's exponent and mantissa, placed under binary16's (code << 7), read as
// the value times 2^-8, subnormals included (binary16's subnormal step 2^-24 is E4M3's 2^-9 times
// 2^-8), so one exact multiplication by 256 restores it; its NaN code (S.1111.111) is patched in,
// as e4m3_decode_scalar makes it (sign | quiet NaN). The instruction converts exactly and quiets
// NaNs as f16_decode_scalar does, so the bits are the scalar ones.
__attribute__((target("avx2,f16c"))) FC_INLINE void fp8_halves_f16c(const uint8_t* in, bool e4m3,
                                                                    __m256& lo, __m256& hi) {
  const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  if (!e4m3) {
    const __m256i h = _mm256_slli_epi16(w, 8);
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    return;
  }
  const __m256i h =
      _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16(0x3F80)),
                      _mm256_and_si256(_mm256_slli_epi16(w, 8), _mm256_set1_epi16(INT16_MIN)));
  const __m256 k256 = _mm256_set1_ps(256.0f);
  lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k256);
  hi = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k256);
  const __m256i m7 = _mm256_set1_epi16(0x7F);
  const __m256i nan16 = _mm256_cmpeq_epi16(_mm256_and_si256(w, m7), m7);
  const __m256 nan_lo = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(nan16)));
  const __m256 nan_hi = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(nan16, 1)));
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
  lo = _mm256_blendv_ps(lo, _mm256_or_ps(_mm256_and_ps(lo, sign), qnan), nan_lo);
  hi = _mm256_blendv_ps(hi, _mm256_or_ps(_mm256_and_ps(hi, sign), qnan), nan_hi);
}

template <int K>
__attribute__((target("avx2,f16c"))) void dec_fp8_f16c(const Job& j) {
  const auto* in = static_cast<const uint8_t*>(j.in);
  auto* out = static_cast<float*>(j.out);
  const __m256 scale = _mm256_set1_ps(j.scale), inv = _mm256_set1_ps(j.inv);
  int64_t i = 0;
  for (; i + 16 <= j.n; i += 16) {
    __m256 lo, hi;
    fp8_halves_f16c(in + i, K == kE4m3, lo, hi);
    if (j.scaled) {
      lo = j.inv != 0 ? _mm256_mul_ps(lo, inv) : _mm256_div_ps(lo, scale);
      hi = j.inv != 0 ? _mm256_mul_ps(hi, inv) : _mm256_div_ps(hi, scale);
    }
    _mm256_storeu_ps(out + i, lo);
    _mm256_storeu_ps(out + i + 8, hi);
  }
  for (; i < j.n; ++i)
    out[i] = j.scaled ? unscaled(decode_one<K>(in[i]), j.scale, j.inv) : decode_one<K>(in[i]);
}

template <int K>
__attribute__((target("avx512f,avx512vl,avx512bw"))) void dec_fp8_avx512(const Job& j) {
  const auto* in = static_cast<const uint8_t*>(j.in);
  auto* out = static_cast<float*>(j.out);
  const __m512 scale = _mm512_set1_ps(j.scale), inv = _mm512_set1_ps(j.inv);
  const __m512 k256 = _mm512_set1_ps(256.0f);
  const __m256i mag = _mm256_set1_epi16(0x3F80), sign16 = _mm256_set1_epi16(INT16_MIN);
  const __m256i qnan16 = _mm256_set1_epi16(0x7E00);
  const __m256i m7 = _mm256_set1_epi16(0x7F);
  int64_t i = 0;
  for (; i + 16 <= j.n; i += 16) {
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    __m512 x;
    if constexpr (K == kE5m2) {
      x = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_slli_epi16(w, 8));
    } else {
      // The NaN code becomes binary16's sign | 0x7E00, which converts to sign | 0x7FC00000 and
      // stays that through the multiplication.
      const __m256i s16 = _mm256_and_si256(_mm256_slli_epi16(w, 8), sign16);
      __m256i h = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(w, 7), mag), s16);
      const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(w, m7), m7);
      h = _mm256_mask_mov_epi16(h, nan, _mm256_or_si256(s16, qnan16));
      x = _mm512_mul_ps(_mm512_maskz_cvtph_ps(0xFFFF, h), k256);
    }
    if (j.scaled) x = j.inv != 0 ? _mm512_mul_ps(x, inv) : _mm512_div_ps(x, scale);
    _mm512_storeu_ps(out + i, x);
  }
  for (; i < j.n; ++i)
    out[i] = j.scaled ? unscaled(decode_one<K>(in[i]), j.scale, j.inv) : decode_one<K>(in[i]);
}

// FP8 encode with one float addition per element. With e the exponent of max(|x|, the format's
// smallest normal) and C(e) = 2^(e + 23 - kM) * (1 + mc / 2^23), mc = (e + bias - 1) << kM, the
// ulp of C(e) is the format's ulp at e (its subnormal step below the normals), and |x| < 2^(e+1)
// keeps C + |x| in C's binade. So fl(C + |x|) = C + RNE(|x| / ulp) * ulp, ties going to the even
// sum mantissa, which is the even quotient since mc is even: the sum's mantissa is mc + RNE(q),
// which is the code (exponent field (e + bias - 1) << kM plus the significand, whose leading bit,
// or a carry out of the rounding, adds the last exponent step; below the normals mc is 0 and q is
// the subnormal code). The low byte of the sum's bits is the code: the same rounding as
// encode_scalar's integer path and its subnormal add, for every finite |x| up to the clamp.
// |x| is clamped first: saturate to the largest finite value; ieee to the value that rounds to the
// overflow code (E4M3 480 -> S.1111.111; E5M2 61440, a tie that rounds up to inf). NaNs, and inf
// when saturating E5M2 (which keeps infinities), are patched in afterwards; the sign comes last.
// C(e) is a table lookup (vpermd / vpermt2d) on AVX-512, and three integer operations on AVX2.
template <class Fmt>
struct Fp8Round {
  static constexpr int kShift = 23 - Fmt::kM;
  static constexpr uint32_t kSatClamp = Fmt::kBias == 7 ? 0x43E00000u : 0x47600000u;   // 448, 57344
  static constexpr uint32_t kIeeeClamp = Fmt::kBias == 7 ? 0x43F00000u : 0x47700000u;  // 480, 61440
  // C(e) from the exponent field E of max(|x|, smallest normal): E + (E >> kShift) + kAdd.
  static constexpr uint32_t kAdd = (uint32_t(kShift) << 23) - (uint32_t(128 - Fmt::kBias) << Fmt::kM);
  static constexpr uint32_t c_of(uint32_t biased) {
    return (biased << 23) + (biased << Fmt::kM) + kAdd;
  }
  // C(e) indexed by the low bits of the biased exponent: E4M3's 15 exponents (121 .. 135) fit 16
  // entries, E5M2's 30 (113 .. 142) fit 32.
  static constexpr int kEntries = Fmt::kBias == 7 ? 16 : 32;
  struct Table {
    alignas(64) uint32_t c[32];
  };
  static constexpr Table table() {
    Table t{};
    const uint32_t lo = Fmt::kMinNormal >> 23, hi = kIeeeClamp >> 23;
    for (uint32_t b = lo; b <= hi; ++b) t.c[b % kEntries] = c_of(b);
    return t;
  }
};

template <class Fmt>
constexpr typename Fp8Round<Fmt>::Table kFp8Table = Fp8Round<Fmt>::table();

// The maskz forms dodge GCC 12's false -Wmaybe-uninitialized on the unmasked ones (as above).
template <class Fmt, bool kSat, bool kScaled>
__attribute__((target("avx512f,avx512vl,avx512bw"))) FC_INLINE void fp8_codes_avx512(
    const float* in, const __m512& scale, const __m512i& tlo, const __m512i& thi, __m512i& out) {
  using R = Fp8Round<Fmt>;
  __m512 x = _mm512_loadu_ps(in);
  if constexpr (kScaled) x = _mm512_mul_ps(x, scale);
  const __m512i u = _mm512_castps_si512(x);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i ac = _mm512_maskz_min_epi32(0xFFFF, a, _mm512_set1_epi32(int(kSat ? R::kSatClamp : R::kIeeeClamp)));
  const __m512i idx = _mm512_maskz_srli_epi32(0xFFFF, _mm512_maskz_max_epi32(0xFFFF, ac, _mm512_set1_epi32(int(Fmt::kMinNormal))), 23);
  __m512i c;
  if constexpr (R::kEntries == 16) c = _mm512_maskz_permutexvar_epi32(0xFFFF, idx, tlo);
  else c = _mm512_permutex2var_epi32(tlo, idx, thi);
  __m512i code = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(ac), _mm512_castsi512_ps(c)));
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  if constexpr (std::is_same_v<Fmt, E4M3>) {
    // ieee: NaN and inf were clamped to 480, the NaN code already; saturate: 0x7E + 1.
    if constexpr (kSat)
      code = _mm512_mask_add_epi32(code, _mm512_cmpgt_epi32_mask(a, inf), code, _mm512_set1_epi32(1));
  } else {
    // NaN: 0x7E | the top payload bit, which is (|x| >> 21) | 2 in the low 7 bits; saturated inf:
    // (|x| >> 21) is 0x7C there. (ieee inf was clamped to 61440, which gives 0x7C.)
    const __m512i t = _mm512_maskz_srli_epi32(0xFFFF, a, 21);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(a, inf);
    if constexpr (kSat)
      code = _mm512_mask_mov_epi32(code, _mm512_cmpeq_epi32_mask(a, inf), t);
    code = _mm512_mask_or_epi32(code, nan, t, _mm512_set1_epi32(2));
  }
  // (code & 0x7F) | (sign << 7), the other bits 0: a bitwise select by 0x7F.
  out = _mm512_ternarylogic_epi32(code, _mm512_maskz_srli_epi32(0xFFFF, u, 24), _mm512_set1_epi32(0x7F), 0xE4);
}

template <int K, bool kSat, bool kScaled>
__attribute__((target("avx512f,avx512vl,avx512bw"))) void enc_fp8_avx512_loop(const Job& j) {
  using Fmt = std::conditional_t<K == kE4m3, E4M3, E5M2>;
  const auto* in = static_cast<const float*>(j.in);
  auto* out = static_cast<uint8_t*>(j.out);
  const __m512 scale = _mm512_set1_ps(j.scale);
  const __m512i tlo = _mm512_load_si512(kFp8Table<Fmt>.c);
  const __m512i thi = _mm512_load_si512(kFp8Table<Fmt>.c + 16);
  // packus narrows within 128-bit lanes: lane L holds elements 4L..4L+3 of c0, c1, c2, c3.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const int64_t n = j.n;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512i c0, c1, c2, c3;
    fp8_codes_avx512<Fmt, kSat, kScaled>(in + i, scale, tlo, thi, c0);
    fp8_codes_avx512<Fmt, kSat, kScaled>(in + i + 16, scale, tlo, thi, c1);
    fp8_codes_avx512<Fmt, kSat, kScaled>(in + i + 32, scale, tlo, thi, c2);
    fp8_codes_avx512<Fmt, kSat, kScaled>(in + i + 48, scale, tlo, thi, c3);
    const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(c0, c1), _mm512_packus_epi32(c2, c3));
    _mm512_storeu_si512(out + i, _mm512_maskz_permutexvar_epi32(0xFFFF, order, b));
  }
  for (; i + 16 <= n; i += 16) {
    __m512i c;
    fp8_codes_avx512<Fmt, kSat, kScaled>(in + i, scale, tlo, thi, c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_maskz_cvtepi32_epi8(0xFFFF, c));
  }
  for (; i < n; ++i)
    out[i] = static_cast<uint8_t>(encode_scalar<Fmt>(kScaled ? in[i] * j.scale : in[i], kSat));
}

template <class Fmt, bool kSat, bool kScaled>
__attribute__((target("avx2,f16c"))) FC_INLINE void fp8_codes_avx2(const float* in,
                                                                  const __m256& scale,
                                                                  __m256i& out, __m256i& u) {
  using R = Fp8Round<Fmt>;
  __m256 x = _mm256_loadu_ps(in);
  if constexpr (kScaled) x = _mm256_mul_ps(x, scale);
  u = _mm256_castps_si256(x);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i ac = _mm256_min_epi32(a, _mm256_set1_epi32(int(kSat ? R::kSatClamp : R::kIeeeClamp)));
  const __m256i e = _mm256_and_si256(_mm256_max_epi32(ac, _mm256_set1_epi32(int(Fmt::kMinNormal))),
                                     _mm256_set1_epi32(0x7F800000));
  const __m256i c = _mm256_add_epi32(_mm256_add_epi32(e, _mm256_srli_epi32(e, R::kShift)),
                                     _mm256_set1_epi32(int(R::kAdd)));
  __m256i code = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(ac), _mm256_castsi256_ps(c)));
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  if constexpr (std::is_same_v<Fmt, E4M3>) {
    if constexpr (kSat) code = _mm256_sub_epi32(code, _mm256_cmpgt_epi32(a, inf));  // 0x7E + 1
  } else {
    const __m256i nan = _mm256_cmpgt_epi32(a, inf);
    const __m256i t = _mm256_or_si256(_mm256_srli_epi32(a, 21), _mm256_and_si256(nan, _mm256_set1_epi32(2)));
    code = _mm256_blendv_epi8(code, t, kSat ? _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F7FFFFF)) : nan);
  }
  out = _mm256_and_si256(code, _mm256_set1_epi32(0x7F));
}

template <int K, bool kSat, bool kScaled>
__attribute__((target("avx2,f16c"))) void enc_fp8_avx2_loop(const Job& j) {
  using Fmt = std::conditional_t<K == kE4m3, E4M3, E5M2>;
  const auto* in = static_cast<const float*>(j.in);
  auto* out = static_cast<uint8_t*>(j.out);
  const __m256 scale = _mm256_set1_ps(j.scale);
  // The packs narrow within 128-bit lanes: lane L holds elements 4L..4L+3 of c0, c1, c2, c3.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int64_t n = j.n;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i c0, c1, c2, c3, u0, u1, u2, u3;
    fp8_codes_avx2<Fmt, kSat, kScaled>(in + i, scale, c0, u0);
    fp8_codes_avx2<Fmt, kSat, kScaled>(in + i + 8, scale, c1, u1);
    fp8_codes_avx2<Fmt, kSat, kScaled>(in + i + 16, scale, c2, u2);
    fp8_codes_avx2<Fmt, kSat, kScaled>(in + i + 24, scale, c3, u3);
    const __m256i codes = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    // Signed saturation keeps each element's sign in its byte's top bit.
    const __m256i signs = _mm256_packs_epi16(_mm256_packs_epi32(u0, u1), _mm256_packs_epi32(u2, u3));
    const __m256i b = _mm256_or_si256(codes, _mm256_and_si256(signs, _mm256_set1_epi8(INT8_MIN)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permutevar8x32_epi32(b, order));
  }
  for (; i < n; ++i)
    out[i] = static_cast<uint8_t>(encode_scalar<Fmt>(kScaled ? in[i] * j.scale : in[i], kSat));
}

// The run-time flags as template arguments, so that each loop carries only its own special cases.
#define FC_FP8_ENCODE(name, loop)                                                     \
  template <int K>                                                                    \
  void name(const Job& j) {                                                           \
    if (j.saturate) j.scaled ? loop<K, true, true>(j) : loop<K, true, false>(j);      \
    else j.scaled ? loop<K, false, true>(j) : loop<K, false, false>(j);               \
  }
FC_FP8_ENCODE(enc_fp8_avx512, enc_fp8_avx512_loop)
FC_FP8_ENCODE(enc_fp8_avx2, enc_fp8_avx2_loop)
#undef FC_FP8_ENCODE

constexpr CodecTable kTable_F16c = {
    {&enc_f16_f16c, &enc_bf16_IsaAvx2, &enc_fp8_avx2<kE4m3>, &enc_fp8_avx2<kE5m2>},
    {&dec_f16_f16c, &dec_bf16_IsaAvx2, &dec_fp8_f16c<kE4m3>, &dec_fp8_f16c<kE5m2>},
    &amax_IsaAvx2};
constexpr CodecTable kTable_Avx512 = {
    {&enc_f16_avx512, &enc_bf16_IsaAvx512, &enc_fp8_avx512<kE4m3>, &enc_fp8_avx512<kE5m2>},
    {&dec_f16_avx512, &dec_bf16_IsaAvx512, &dec_fp8_avx512<kE4m3>, &dec_fp8_avx512<kE5m2>},
    &amax_IsaAvx512};
#endif

// Same choice and cap as the tile kernels (FUSEDCOLL_KERNEL_ISA), plus F16C for the AVX2 set and
// AVX-512BW for the byte narrowing of the AVX-512 set.
const CodecTable& codecs() noexcept {
  static const CodecTable* const table = []() -> const CodecTable* {
#if FC_CODEC_X86
    int level = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) level = 1;
    if (level == 1 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw"))
      level = 2;
    switch (env().kernel_isa) {
      case Env::KernelIsa::base: level = 0; break;
      case Env::KernelIsa::avx2: level = std::min(level, 1); break;
      case Env::KernelIsa::avx512:
      case Env::KernelIsa::automatic: break;
    }
    if (level == 2) return &kTable_Avx512;
    if (level == 1) return &kTable_F16c;
#endif
    return &kTable_IsaBase;
  }();
  return *table;
}

int kind_of(WireFormat f) {
  switch (f) {
    case WireFormat::f16: return kF16;
    case WireFormat::bf16: return kBf16;
    case WireFormat::fp8_e4m3: return kE4m3;
    case WireFormat::fp8_e5m2: return kE5m2;
    case WireFormat::none: break;
  }
  return -1;
}

void enforce_format(WireFormat f) {
  FC_ENFORCE(static_cast<int>(f) <= static_cast<int>(WireFormat::fp8_e5m2),
             "unknown wire format value ", static_cast<int>(f));
}

void run_encode(WireFormat f, const float* in, void* out, int64_t n, float scale, bool scaled,
                Overflow overflow) {
  enforce_format(f);
  FC_ENFORCE_GE(n, 0, "encode: negative element count");
  FC_ENFORCE(overflow == Overflow::saturate || overflow == Overflow::ieee,
             "unknown overflow mode ", static_cast<int>(overflow));
  if (n == 0) return;
  FC_ENFORCE(in != nullptr && out != nullptr, "encode: null buffer with ", n, " elements");
  if (f == WireFormat::none) {
    if (!scaled) {
      std::memcpy(out, in, static_cast<std::size_t>(n) * sizeof(float));
    } else {
      auto* o = static_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] * scale;
    }
    return;
  }
  codecs().encode[kind_of(f)]({in, out, n, scale, scaled, overflow == Overflow::saturate});
}

void run_decode(WireFormat f, const void* in, float* out, int64_t n, float scale, bool scaled) {
  enforce_format(f);
  FC_ENFORCE_GE(n, 0, "decode: negative element count");
  if (n == 0) return;
  FC_ENFORCE(in != nullptr && out != nullptr, "decode: null buffer with ", n, " elements");
  if (f == WireFormat::none) {
    std::memcpy(out, in, static_cast<std::size_t>(n) * sizeof(float));
    if (scaled)
      for (int64_t i = 0; i < n; ++i) out[i] = out[i] / scale;
    return;
  }
  Job job{in, out, n, scale, scaled, false};
  // A power of two in [2^-126, 2^126] has an exact, normal reciprocal.
  const uint32_t sb = std::bit_cast<uint32_t>(scale);
  const uint32_t e = sb >> 23;
  if (scaled && (sb & 0x7FFFFFu) == 0 && e >= 1 && e <= 253) job.inv = 1.0f / scale;
  codecs().decode[kind_of(f)](job);
}

}  // namespace

std::size_t wire_size(WireFormat f) {
  switch (f) {
    case WireFormat::none: return 4;
    case WireFormat::f16:
    case WireFormat::bf16: return 2;
    case WireFormat::fp8_e4m3:
    case WireFormat::fp8_e5m2: return 1;
  }
  throw InvalidArgument(detail::make_string("unknown wire format value ", static_cast<int>(f)));
}

namespace detail {
float abs_max(const float* x, std::int64_t n) {
  FC_ENFORCE_GE(n, 0, "abs_max: negative element count");
  if (n == 0) return 0.0f;
  FC_ENFORCE(x != nullptr, "abs_max: null buffer with ", n, " elements");
  return codecs().amax(x, n);
}
}  // namespace detail

float wire_max(WireFormat f) {
  switch (f) {
    case WireFormat::none: return std::bit_cast<float>(0x7F7FFFFFu);
    case WireFormat::f16: return 65504.0f;
    case WireFormat::bf16: return std::bit_cast<float>(0x7F7F0000u);
    case WireFormat::fp8_e4m3: return 448.0f;
    case WireFormat::fp8_e5m2: return 57344.0f;
  }
  throw InvalidArgument(detail::make_string("unknown wire format value ", static_cast<int>(f)));
}

std::uint16_t f32_to_f16(float x, Overflow o) noexcept {
  return static_cast<uint16_t>(encode_scalar<F16>(x, o != Overflow::ieee));
}
float f16_to_f32(std::uint16_t h) noexcept { return f16_decode_scalar(h); }
std::uint16_t f32_to_bf16(float x, Overflow o) noexcept {
  return static_cast<uint16_t>(bf16_scalar(x, o != Overflow::ieee));
}
float bf16_to_f32(std::uint16_t b) noexcept { return std::bit_cast<float>(uint32_t(b) << 16); }
std::uint8_t f32_to_e4m3(float x, Overflow o) noexcept {
  return static_cast<uint8_t>(encode_scalar<E4M3>(x, o != Overflow::ieee));
}
float e4m3_to_f32(std::uint8_t c) noexcept { return e4m3_decode_scalar(c); }
std::uint8_t f32_to_e5m2(float x, Overflow o) noexcept {
  return static_cast<uint8_t>(encode_scalar<E5M2>(x, o != Overflow::ieee));
}
float e5m2_to_f32(std::uint8_t c) noexcept { return f16_decode_scalar(uint32_t(c) << 8); }

void encode(WireFormat f, const float* in, void* out, std::int64_t n, Overflow o) {
  run_encode(f, in, out, n, 1.0f, false, o);
}
void decode(WireFormat f, const void* in, float* out, std::int64_t n) {
  run_decode(f, in, out, n, 1.0f, false);
}
void encode_scaled(WireFormat f, const float* in, void* out, std::int64_t n, float scale,
                   Overflow o) {
  FC_ENFORCE(std::isfinite(scale) && scale > 0, "encode_scaled: scale ", scale,
             " is not a positive finite number");
  run_encode(f, in, out, n, scale, true, o);
}
void decode_scaled(WireFormat f, const void* in, float* out, std::int64_t n, float scale) {
  FC_ENFORCE(std::isfinite(scale) && scale > 0, "decode_scaled: scale ", scale,
             " is not a positive finite number");
  run_decode(f, in, out, n, scale, true);
}

}  // namespace fusedcoll
