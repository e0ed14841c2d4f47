// The shared tile kernels (include/fusedcoll/detail/kernels.hpp).
//
// Every output element is a single chain `acc = +0.0f; acc = acc + term; ...` over its reduction
// index in the pinned order, each product rounded to float before the add. The code vectorises
// across output elements only (lanes are different d, n or output columns), never across the
// reduction index, so every lane performs exactly the scalar chain. IEEE add, multiply and divide
// are correctly rounded per lane, so the baseline (SSE2), AVX2 and AVX-512 paths produce the same
// bits and the instruction set can be picked at run time. Blocking over k is exact because a float
// accumulator that is stored and reloaded continues the same chain. The one thing the hardware
// leaves open, which payload a NaN result carries, is pinned below (kCanonicalNanBits, SumOp).
//
// Contraction into FMAs would change the bits; CMake compiles this file with -ffp-contract=off.
// It cannot be forced from inside the file (GCC enables FMA with AVX-512F and ignores
// `#pragma STDC FP_CONTRACT`), so only the fast-math case is caught here.
//
// Tile shapes, pass widths and prefetch distances were measured on an AMD EPYC (Zen 4) with GCC 12.

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/env.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>

#include "fusedcoll/error.hpp"
#include "fusedcoll/gemv_allreduce.hpp"

#if defined(__FAST_MATH__)
#error "core/kernels.cpp pins the rounding of every product and sum; build it without -ffast-math"
#endif

#if defined(__x86_64__) || defined(__i386__)
#define FC_KERNELS_X86 1
#else
#define FC_KERNELS_X86 0
#endif

// The ISA-specific entry points carry a `target` attribute and inline the templates below, so the
// templates are compiled for that ISA. A template that failed to inline would silently run the
// baseline code (and pass wide vectors under the wrong ABI), hence always_inline.
#define FC_INLINE [[gnu::always_inline]] inline

#if defined(__clang__)
#define FC_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define FC_IVDEP _Pragma("GCC ivdep")
#endif

namespace fusedcoll::detail {
namespace {

using std::int64_t;

// --- Instruction sets and their tile shapes ----------------------------------------------------
//
// `V` is the native float vector and `VI` the int32 vector of the same size; `Embed` is the set
// whose vectors embedding pooling uses. Tile shapes are chosen so that the accumulators, the loaded
// operands and the product temporaries fit the register file (16 registers below AVX-512, 32 with
// it): without FMA every product needs a register of its own before it is added.

struct IsaBase {
  typedef float V __attribute__((vector_size(16)));
  typedef std::int32_t VI __attribute__((vector_size(16)));
  static constexpr int kLanes = 4;
  static constexpr int kGemmMr = 4;  // 4 x 8: 8 accumulators
  static constexpr int kGemmNv = 2;
  static constexpr int kGemmKc = 256;
  static constexpr int kGemmMc = 64;
  static constexpr int kGemmNc = 1024;
  static constexpr int kGemvNv = 2;
  static constexpr int kGemvIb = 4;
  static constexpr int kGemvKc = 256;
  static constexpr int kEmbedNv = 8;
  using Embed = IsaBase;
};

#if FC_KERNELS_X86
struct IsaAvx2 {
  typedef float V __attribute__((vector_size(32)));
  typedef std::int32_t VI __attribute__((vector_size(32)));
  static constexpr int kLanes = 8;
  static constexpr int kGemmMr = 6;  // 6 x 16: 12 accumulators + 2 of b + broadcast + product
  static constexpr int kGemmNv = 2;
  static constexpr int kGemmKc = 256;
  static constexpr int kGemmMc = 72;
  static constexpr int kGemmNc = 1024;
  static constexpr int kGemvNv = 1;
  static constexpr int kGemvIb = 8;
  static constexpr int kGemvKc = 256;
  static constexpr int kEmbedNv = 8;
  using Embed = IsaAvx2;
};

// The AVX-512 set's vectors for embedding pooling, which only loads and adds: there 512-bit
// vectors measured up to 25% faster than 256-bit ones on Zen 4 (D = 64 and 256).
struct IsaAvx512Wide {
  typedef float V __attribute__((vector_size(64)));
  typedef std::int32_t VI __attribute__((vector_size(64)));
  static constexpr int kLanes = 16;
  static constexpr int kEmbedNv = 8;
};

// 256-bit vectors with AVX-512VL's 32 registers. On Zen 4, 512-bit operations are split into two
// 256-bit halves, and the 8 x 16 GEMM tile below measured faster than every 512-bit tile tried
// (4 x 64, 2 x 128, 8 x 32, 12 x 32); the larger register file is what AVX-512 adds here.
struct IsaAvx512 {
  typedef float V __attribute__((vector_size(32)));
  typedef std::int32_t VI __attribute__((vector_size(32)));
  static constexpr int kLanes = 8;
  static constexpr int kGemmMr = 8;  // 8 x 16: 16 accumulators, broadcasts folded into the multiply
  static constexpr int kGemmNv = 2;
  static constexpr int kGemmKc = 256;
  static constexpr int kGemmMc = 96;
  static constexpr int kGemmNc = 1024;
  static constexpr int kGemvNv = 1;
  static constexpr int kGemvIb = 8;
  static constexpr int kGemvKc = 256;
  using Embed = IsaAvx512Wide;
};
#endif

// Unaligned loads and stores go through memcpy, which compiles to one unaligned move: a vector
// typedef with reduced alignment is not honoured by every compiler once bound to a reference.
// Out-parameters rather than return values, since returning a wide vector from a function
// compiled for the baseline would change its ABI.
template <class Isa>
FC_INLINE void vload(typename Isa::V& out, const float* p) {
  __builtin_memcpy(&out, p, sizeof(out));
}
template <class Isa>
FC_INLINE void vstore(float* p, const typename Isa::V& v) {
  __builtin_memcpy(p, &v, sizeof(v));
}
// For the packed buffers, which are aligned to the vector size.
template <class Isa>
FC_INLINE const typename Isa::V& vload_aligned(const float* p) {
  return *reinterpret_cast<const typename Isa::V*>(p);
}

// A NaN result leaves the tile kernels as this one quiet NaN. Which input NaN an x86 add or
// multiply returns depends on the order of its register operands, which the compiler chooses
// freely for commutative operations (and chooses differently per ISA and optimisation level);
// NaN-ness itself is order independent. Canonicalising every stored value is what keeps a NaN
// result bit-identical across ISAs, builds and backends.
constexpr std::int32_t kCanonicalNanBits = 0x7fc00000;

FC_INLINE float canonical_nan_scalar(float x) {
  return x != x ? __builtin_bit_cast(float, kCanonicalNanBits) : x;
}

// Integer arithmetic rather than a vector comparison: a comparison in a template gets the mask
// type of the baseline ISA and is scalarised once inlined into the AVX-512 code.
template <class Isa>
FC_INLINE void canonicalize_nan(typename Isa::V& x) {
  using VI = typename Isa::VI;
  const VI bits = __builtin_bit_cast(VI, x);
  // All ones exactly where |bits| > the infinity pattern, i.e. where x is a NaN.
  const VI nan_mask = (0x7f800000 - (bits & 0x7fffffff)) >> 31;
  x = __builtin_bit_cast(typename Isa::V, (bits & ~nan_mask) | (kCanonicalNanBits & nan_mask));
}

// Per-thread packing buffer, kept between calls because the emulator calls the kernels once per
// small tile. Allocation failure is reported as null and the caller takes an unpacked path, since
// the kernels cannot throw.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release(); }

  float* get(std::size_t floats) noexcept {
    if (floats > capacity_) {
      release();
      data_ = static_cast<float*>(
          ::operator new (floats * sizeof(float), std::align_val_t{kAlign}, std::nothrow));
      capacity_ = data_ != nullptr ? floats : 0;
    }
    return data_;
  }

 private:
  static constexpr std::size_t kAlign = 64;
  void release() noexcept {
    if (data_ != nullptr) ::operator delete (data_, std::align_val_t{kAlign});
    data_ = nullptr;
    capacity_ = 0;
  }
  float* data_ = nullptr;
  std::size_t capacity_ = 0;
};

thread_local Scratch t_gemm_scratch;

// --- Argument bundles (one indirect call per kernel invocation) --------------------------------

template <class Index>
struct EmbeddingArgs {
  const float* table;
  int64_t table_stride;
  int64_t dim;
  const Index* offsets;
  const Index* indices;
  const float* weights;
  PoolingMode mode;
  int64_t b_begin;
  int64_t b_end;
  float* out;
  int64_t out_stride;
};

struct GemvArgs {
  const float* w;
  int64_t ldw;
  const float* x;
  int64_t ldx;
  int64_t m;
  int64_t k;
  int64_t n_begin;
  int64_t n_end;
  float* y;
  int64_t ldy;
};

struct GemmArgs {
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int64_t rows;
  int64_t cols;
  int64_t k;
};

struct ReduceArgs {
  void* acc;
  const void* v;
  int64_t count;
  DType dtype;
  ReduceOp op;
};

// --- embedding_bag_rows -----------------------------------------------------------------------

// Rows are random gathers from a table far larger than the caches; software prefetch keeps this
// many bytes of upcoming rows in flight (the hardware prefetchers cannot predict the indices).
// Prefetching into L2 (T1) measured about 1.5x as fast as into L1 (T0) on Zen 4, presumably
// because T0 prefetches compete with the demand loads for the few L1 miss buffers.
constexpr int64_t kEmbedPrefetchBytes = 16384;
constexpr int64_t kEmbedMaxPrefetchRows = 64;

FC_INLINE void prefetch_row(const float* row, int64_t row_bytes) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
  // A row that does not start on a line boundary spills into one more line.
  __builtin_prefetch(p + row_bytes - 1, 0, 2);
}

// One pass over a bag for the columns [d, d + nv * kLanes + ns). kFull passes cover kNv whole
// vectors and have no run-time column count, so their accumulators stay in registers unbranched.
template <class Isa, int kNv, bool kFull, class Index>
FC_INLINE void pool_columns(const EmbeddingArgs<Index>& a, int64_t j0, int64_t j1, int64_t d,
                            int nv, int ns, int64_t prefetch_rows, int64_t j_limit, float* o) {
  using V = typename Isa::V;
  constexpr int kW = Isa::kLanes;
  const float* const table = a.table + d;
  const int64_t stride = a.table_stride;
  const int64_t row_bytes = a.dim * static_cast<int64_t>(sizeof(float));
  V acc[kNv];
  float tail[kW];
#pragma GCC unroll 16
  for (int v = 0; v < kNv; ++v) acc[v] = V{};
#pragma GCC unroll 16
  for (int s = 0; s < kW; ++s) tail[s] = 0.0f;

  for (int64_t j = j0; j < j1; ++j) {
    if (prefetch_rows > 0 && j + prefetch_rows < j_limit) {
      prefetch_row(a.table + static_cast<int64_t>(a.indices[j + prefetch_rows]) * stride,
                   row_bytes);
    }
    const float* row = table + static_cast<int64_t>(a.indices[j]) * stride;
    if (a.weights != nullptr) {
      const float wj = a.weights[j];
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) {
        if (kFull || v < nv) {
          V x;
          vload<Isa>(x, row + v * kW);
          const V p = wj * x;
          acc[v] = acc[v] + p;
        }
      }
      if (!kFull) {
        for (int s = 0; s < ns; ++s) {
          const float p = wj * row[nv * kW + s];
          tail[s] = tail[s] + p;
        }
      }
    } else {
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) {
        if (kFull || v < nv) {
          V x;
          vload<Isa>(x, row + v * kW);
          acc[v] = acc[v] + x;
        }
      }
      if (!kFull) {
        for (int s = 0; s < ns; ++s) tail[s] = tail[s] + row[nv * kW + s];
      }
    }
  }

  const int64_t len = j1 - j0;
  if (a.mode == PoolingMode::mean && len > 0) {
    const float divisor = static_cast<float>(len);
#pragma GCC unroll 16
    for (int v = 0; v < kNv; ++v) acc[v] = acc[v] / divisor;
    for (int s = 0; s < kW; ++s) tail[s] = tail[s] / divisor;
  }
#pragma GCC unroll 16
  for (int v = 0; v < kNv; ++v) {
    if (kFull || v < nv) {
      canonicalize_nan<Isa>(acc[v]);
      vstore<Isa>(o + v * kW, acc[v]);
    }
  }
  if (!kFull) {
    for (int s = 0; s < ns; ++s) o[nv * kW + s] = canonical_nan_scalar(tail[s]);
  }
}

// Pools columns [0, d) of one bag in full passes of kNv vectors, as many as fit, and returns d.
template <class Isa, int kNv, class Index>
FC_INLINE int64_t pool_full_passes(const EmbeddingArgs<Index>& a, int64_t j0, int64_t j1,
                                   int64_t& prefetch_rows, int64_t j_limit, float* o) {
  constexpr int64_t kWidth = static_cast<int64_t>(Isa::kLanes) * kNv;
  int64_t d = 0;
  for (; d + kWidth <= a.dim; d += kWidth) {
    pool_columns<Isa, kNv, true>(a, j0, j1, d, kNv, 0, prefetch_rows, j_limit, o + d);
    // Later passes find the bag's rows in cache; the first one has already prefetched the start
    // of the next bag.
    prefetch_rows = 0;
  }
  return d;
}

// A bag is pooled in column passes. Two passes over half-rows measured up to twice as fast as one
// pass over whole rows (Zen 4, D = 64..256), presumably because the first pass's sequential lines
// within each row let the hardware prefetchers bring the rest of the row into L1 for the second.
// So the widest pass is used that still splits the row at least in two; narrow rows get one pass.
template <class Isa, class Index>
FC_INLINE void embedding_impl(const EmbeddingArgs<Index>& a) {
  constexpr int kW = Isa::kLanes;
  constexpr int kNv = Isa::kEmbedNv;
  static_assert(kNv % 4 == 0);
  if (a.b_end <= a.b_begin || a.dim <= 0) return;
  const int64_t row_bytes = a.dim * static_cast<int64_t>(sizeof(float));
  const int64_t prefetch_rows =
      std::clamp<int64_t>(kEmbedPrefetchBytes / row_bytes, 1, kEmbedMaxPrefetchRows);
  const int64_t j_limit = a.offsets[a.b_end];
  int pass_nv = 0;
  for (const int nv : {kNv, kNv / 2, kNv / 4}) {
    if (pass_nv == 0 && 2 * static_cast<int64_t>(nv) * kW <= a.dim) pass_nv = nv;
  }
  for (int64_t b = a.b_begin; b < a.b_end; ++b) {
    const int64_t j0 = a.offsets[b];
    const int64_t j1 = a.offsets[b + 1];
    float* o = a.out + (b - a.b_begin) * a.out_stride;
    int64_t pf = prefetch_rows;
    int64_t d = 0;
    if (pass_nv == kNv) {
      d = pool_full_passes<Isa, kNv>(a, j0, j1, pf, j_limit, o);
    } else if (pass_nv == kNv / 2) {
      d = pool_full_passes<Isa, kNv / 2>(a, j0, j1, pf, j_limit, o);
    } else if (pass_nv == kNv / 4) {
      d = pool_full_passes<Isa, kNv / 4>(a, j0, j1, pf, j_limit, o);
    }
    // The rest, narrower than the widest pass: whole vectors and a scalar tail together.
    while (d < a.dim) {
      const int64_t rest = std::min<int64_t>(a.dim - d, static_cast<int64_t>(kNv) * kW);
      pool_columns<Isa, kNv, false>(a, j0, j1, d, static_cast<int>(rest / kW),
                                    static_cast<int>(rest % kW), pf, j_limit, o + d);
      pf = 0;
      d += rest;
    }
  }
}

// --- gemv_rows ---------------------------------------------------------------------------------

// Transposes the kLanes x kLanes block at src (row stride lds) into dst (row stride ldd).
template <class Isa>
FC_INLINE void transpose_block(const float* src, int64_t lds, float* dst, int64_t ldd) {
  using V = typename Isa::V;
  constexpr int kW = Isa::kLanes;
  V r[kW];
#pragma GCC unroll 16
  for (int q = 0; q < kW; ++q) vload<Isa>(r[q], src + q * lds);
  if constexpr (kW == 8) {
    V t[8];
    V u[8];
#pragma GCC unroll 4
    for (int q = 0; q < 8; q += 2) {
      t[q] = __builtin_shufflevector(r[q], r[q + 1], 0, 8, 1, 9, 4, 12, 5, 13);
      t[q + 1] = __builtin_shufflevector(r[q], r[q + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
#pragma GCC unroll 2
    for (int q = 0; q < 8; q += 4) {
      u[q] = __builtin_shufflevector(t[q], t[q + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[q + 1] = __builtin_shufflevector(t[q], t[q + 2], 2, 3, 10, 11, 6, 7, 14, 15);
      u[q + 2] = __builtin_shufflevector(t[q + 1], t[q + 3], 0, 1, 8, 9, 4, 5, 12, 13);
      u[q + 3] = __builtin_shufflevector(t[q + 1], t[q + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      vstore<Isa>(dst + c * ldd, __builtin_shufflevector(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11));
      vstore<Isa>(dst + (c + 4) * ldd,
                  __builtin_shufflevector(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15));
    }
  } else {
    static_assert(kW == 4);
    const V t0 = __builtin_shufflevector(r[0], r[1], 0, 4, 1, 5);
    const V t1 = __builtin_shufflevector(r[0], r[1], 2, 6, 3, 7);
    const V t2 = __builtin_shufflevector(r[2], r[3], 0, 4, 1, 5);
    const V t3 = __builtin_shufflevector(r[2], r[3], 2, 6, 3, 7);
    vstore<Isa>(dst, __builtin_shufflevector(t0, t2, 0, 1, 4, 5));
    vstore<Isa>(dst + ldd, __builtin_shufflevector(t0, t2, 2, 3, 6, 7));
    vstore<Isa>(dst + 2 * ldd, __builtin_shufflevector(t1, t3, 0, 1, 4, 5));
    vstore<Isa>(dst + 3 * ldd, __builtin_shufflevector(t1, t3, 2, 3, 6, 7));
  }
}

// Lanes run over n, so a block of kNb rows of w is transposed into `wt` ([kc][kNb]) per k-chunk;
// y itself holds the accumulators between chunks. The transposition is most of the work when m is
// small, hence the in-register block transposes. Reading kNb rows side by side is kNb concurrent
// streams; one vector of rows (8 streams) and a software prefetch 2 KiB ahead in each row measured
// best (m = 1: about 15% faster than 16 rows without prefetch).
constexpr int64_t kFloatsPerLine = 16;
constexpr int64_t kGemvPrefetchFloats = 512;

template <class Isa>
FC_INLINE void gemv_pack(const float* w, int64_t ldw, int64_t nb, int64_t kc, float* wt) {
  constexpr int kW = Isa::kLanes;
  constexpr int kNb = kW * Isa::kGemvNv;
  int64_t kk0 = 0;
  if (nb == kNb) {
    for (; kk0 + kW <= kc; kk0 += kW) {
      if (kk0 % kFloatsPerLine == 0) {
        for (int nn = 0; nn < kNb; ++nn) {
          __builtin_prefetch(w + nn * ldw + kk0 + kGemvPrefetchFloats, 0, 2);
        }
      }
#pragma GCC unroll 4
      for (int nn = 0; nn < kNb; nn += kW) {
        transpose_block<Isa>(w + nn * ldw + kk0, ldw, wt + kk0 * kNb + nn, kNb);
      }
    }
  }
  for (int64_t nn = 0; nn < nb; ++nn) {
    const float* src = w + nn * ldw;
    for (int64_t kk = kk0; kk < kc; ++kk) wt[kk * kNb + nn] = src[kk];
  }
  for (int64_t nn = nb; nn < kNb; ++nn) {
    for (int64_t kk = kk0; kk < kc; ++kk) wt[kk * kNb + nn] = 0.0f;
  }
}

// kRows x (kLanes * kNv) outputs at c (row stride ldc) += a(r, kk) * b[kk][:] for kk = 0..kc-1,
// in that order, starting from +0.0f or continuing the chains stored in c. a(r, kk) is
// a[r * a_row + kk * a_k]; b is packed [kc][kLanes * kNv]. The one accumulation of every GEMV
// block and GEMM micro-tile: the chain order that makes the vector paths ref/'s bits.
template <class Isa, int kRows, int kNv>
FC_INLINE void accumulate_rows(const float* a, int64_t a_row, int64_t a_k, const float* bp,
                               int64_t kc, float* c, int64_t ldc, bool continue_chain) {
  using V = typename Isa::V;
  constexpr int kW = Isa::kLanes;
  constexpr int kNr = kW * kNv;
  V acc[kRows][kNv];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < kNv; ++v) {
      if (continue_chain) {
        vload<Isa>(acc[r][v], c + r * ldc + v * kW);
      } else {
        acc[r][v] = V{};
      }
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    V bv[kNv];
#pragma GCC unroll 16
    for (int v = 0; v < kNv; ++v) bv[v] = vload_aligned<Isa>(bp + kk * kNr + v * kW);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const float av = a[r * a_row + kk * a_k];
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) {
        const V p = av * bv[v];
        acc[r][v] = acc[r][v] + p;
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < kNv; ++v) {
      canonicalize_nan<Isa>(acc[r][v]);
      vstore<Isa>(c + r * ldc + v * kW, acc[r][v]);
    }
  }
}

// Maps the run-time row count ib (1..kIb) onto a compile-time one.
template <class Isa, int kIb>
FC_INLINE void gemv_rows_group(const float* wt, const float* x, int64_t ldx, int64_t ib, int64_t kc,
                               float* y, int64_t ldy, bool continue_chain) {
  if constexpr (kIb > 1) {
    if (ib < kIb) {
      gemv_rows_group<Isa, kIb - 1>(wt, x, ldx, ib, kc, y, ldy, continue_chain);
      return;
    }
  }
  accumulate_rows<Isa, kIb, Isa::kGemvNv>(x, ldx, 1, wt, kc, y, ldy, continue_chain);
}

template <class Isa>
FC_INLINE void gemv_impl(const GemvArgs& a) {
  constexpr int kNb = Isa::kLanes * Isa::kGemvNv;
  constexpr int kIb = Isa::kGemvIb;
  constexpr int64_t kKc = Isa::kGemvKc;
  if (a.m <= 0 || a.n_end <= a.n_begin) return;
  if (a.k <= 0) {
    for (int64_t i = 0; i < a.m; ++i) {
      std::fill(a.y + i * a.ldy + a.n_begin, a.y + i * a.ldy + a.n_end, 0.0f);
    }
    return;
  }
  alignas(64) float wt[kKc * kNb];
  alignas(64) float ytile[kIb * kNb];
  for (int64_t n0 = a.n_begin; n0 < a.n_end; n0 += kNb) {
    const int64_t nb = std::min<int64_t>(kNb, a.n_end - n0);
    for (int64_t k0 = 0; k0 < a.k; k0 += kKc) {
      const int64_t kc = std::min<int64_t>(kKc, a.k - k0);
      const bool continue_chain = k0 > 0;
      gemv_pack<Isa>(a.w + n0 * a.ldw + k0, a.ldw, nb, kc, wt);
      for (int64_t i0 = 0; i0 < a.m; i0 += kIb) {
        const int64_t ib = std::min<int64_t>(kIb, a.m - i0);
        const float* x = a.x + i0 * a.ldx + k0;
        float* y = a.y + i0 * a.ldy + n0;
        if (nb == kNb) {
          gemv_rows_group<Isa, kIb>(wt, x, a.ldx, ib, kc, y, a.ldy, continue_chain);
          continue;
        }
        const std::size_t row_bytes = nb * sizeof(float);
        if (continue_chain) {
          for (int64_t i = 0; i < ib; ++i) std::memcpy(ytile + i * kNb, y + i * a.ldy, row_bytes);
        }
        gemv_rows_group<Isa, kIb>(wt, x, a.ldx, ib, kc, ytile, kNb, continue_chain);
        for (int64_t i = 0; i < ib; ++i) std::memcpy(y + i * a.ldy, ytile + i * kNb, row_bytes);
      }
    }
  }
}

// --- gemm_tile ---------------------------------------------------------------------------------

// Fallback when no packing buffer can be had: the definition, one element at a time.
void gemm_unpacked(const GemmArgs& a) noexcept {
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t j = 0; j < a.cols; ++j) {
      float acc = 0.0f;
      for (int64_t kk = 0; kk < a.k; ++kk) {
        const float p = a.a[r * a.lda + kk] * a.b[kk * a.ldb + j];
        acc = acc + p;
      }
      a.c[r * a.ldc + j] = canonical_nan_scalar(acc);
    }
  }
}

// A panel [mc][kc] -> strips of kMr rows, each [kc][kMr], zero rows padding the last strip.
template <class Isa>
FC_INLINE void gemm_pack_a(const float* a, int64_t lda, int64_t mc, int64_t kc, float* out) {
  constexpr int kMr = Isa::kGemmMr;
  for (int64_t i0 = 0; i0 < mc; i0 += kMr) {
    const int64_t mr = std::min<int64_t>(kMr, mc - i0);
    float* dst = out + i0 * kc;
    for (int64_t r = 0; r < mr; ++r) {
      const float* src = a + (i0 + r) * lda;
      for (int64_t kk = 0; kk < kc; ++kk) dst[kk * kMr + r] = src[kk];
    }
    for (int64_t r = mr; r < kMr; ++r) {
      for (int64_t kk = 0; kk < kc; ++kk) dst[kk * kMr + r] = 0.0f;
    }
  }
}

// B panel [kc][nc] -> strips of kNr columns, each [kc][kNr], zero columns padding the last strip.
template <class Isa>
FC_INLINE void gemm_pack_b(const float* b, int64_t ldb, int64_t kc, int64_t nc, float* out) {
  constexpr int kNr = Isa::kLanes * Isa::kGemmNv;
  for (int64_t j0 = 0; j0 < nc; j0 += kNr) {
    const int64_t nr = std::min<int64_t>(kNr, nc - j0);
    float* dst = out + j0 * kc;
    for (int64_t kk = 0; kk < kc; ++kk) {
      std::memcpy(dst + kk * kNr, b + kk * ldb + j0, nr * sizeof(float));
      std::fill(dst + kk * kNr + nr, dst + (kk + 1) * kNr, 0.0f);
    }
  }
}


template <class Isa>
FC_INLINE void gemm_impl(const GemmArgs& a) {
  constexpr int kMr = Isa::kGemmMr;
  constexpr int kNr = Isa::kLanes * Isa::kGemmNv;
  constexpr int64_t kKc = Isa::kGemmKc;
  constexpr int64_t kMc = Isa::kGemmMc;
  constexpr int64_t kNc = Isa::kGemmNc;
  static_assert(kMc % kMr == 0 && kNc % kNr == 0);
  if (a.rows <= 0 || a.cols <= 0) return;
  if (a.k <= 0) {
    for (int64_t r = 0; r < a.rows; ++r) std::fill(a.c + r * a.ldc, a.c + r * a.ldc + a.cols, 0.0f);
    return;
  }
  float* const bpack = t_gemm_scratch.get(kKc * kNc + kMc * kKc);
  if (bpack == nullptr) {
    gemm_unpacked(a);
    return;
  }
  float* const apack = bpack + kKc * kNc;
  alignas(64) float tile[kMr * kNr];

  for (int64_t jc = 0; jc < a.cols; jc += kNc) {
    const int64_t nc = std::min(kNc, a.cols - jc);
    for (int64_t pc = 0; pc < a.k; pc += kKc) {
      const int64_t kc = std::min(kKc, a.k - pc);
      const bool continue_chain = pc > 0;
      gemm_pack_b<Isa>(a.b + pc * a.ldb + jc, a.ldb, kc, nc, bpack);
      for (int64_t ic = 0; ic < a.rows; ic += kMc) {
        const int64_t mc = std::min(kMc, a.rows - ic);
        gemm_pack_a<Isa>(a.a + ic * a.lda + pc, a.lda, mc, kc, apack);
        // The kc x kNr strip of B stays in L1 while the A block streams past it from L2.
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const int64_t nr = std::min<int64_t>(kNr, nc - jr);
          const float* bp = bpack + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            const int64_t mr = std::min<int64_t>(kMr, mc - ir);
            const float* ap = apack + ir * kc;
            float* c = a.c + (ic + ir) * a.ldc + jc + jr;
            if (mr == kMr && nr == kNr) {
              accumulate_rows<Isa, kMr, Isa::kGemmNv>(ap, 1, kMr, bp, kc, c, a.ldc, continue_chain);
              continue;
            }
            // Edge tile: the padded lanes compute on zeros and are dropped.
            if (continue_chain) {
              for (int64_t r = 0; r < mr; ++r) {
                std::memcpy(tile + r * kNr, c + r * a.ldc, nr * sizeof(float));
              }
            }
            accumulate_rows<Isa, kMr, Isa::kGemmNv>(ap, 1, kMr, bp, kc, tile, kNr, continue_chain);
            for (int64_t r = 0; r < mr; ++r) {
              std::memcpy(c + r * a.ldc, tile + r * kNr, nr * sizeof(float));
            }
          }
        }
      }
    }
  }
}

// --- reduce_into -------------------------------------------------------------------------------

template <class T>
struct SumOp {
  // A NaN result is pinned to what x86 gives for `acc + v` with acc as the first operand (acc's
  // NaN, quietened, else v's), since the compiler may swap the operands of the add. x + x quietens
  // a NaN without changing its payload in either operand order. Integers wrap: the add is done in
  // the unsigned type, where overflow is defined.
  FC_INLINE static T apply(T acc, T v) {
    if constexpr (std::is_floating_point_v<T>) {
      const T sum = acc + v;
      const T nan_or_sum = v != v ? v + v : sum;
      return acc != acc ? acc + acc : nan_or_sum;
    } else {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));
    }
  }
};

// A NaN accumulator is kept, else a NaN operand is taken; on ties (and +-0) the accumulator stays.
template <class T>
struct MinOp {
  FC_INLINE static T apply(T acc, T v) {
    if constexpr (std::is_floating_point_v<T>) {
      return (acc == acc && (v < acc || v != v)) ? v : acc;
    } else {
      return v < acc ? v : acc;
    }
  }
};

template <class T>
struct MaxOp {
  FC_INLINE static T apply(T acc, T v) {
    if constexpr (std::is_floating_point_v<T>) {
      return (acc == acc && (v > acc || v != v)) ? v : acc;
    } else {
      return v > acc ? v : acc;
    }
  }
};

// Written as scalar code for the vectoriser rather than with vector types: GCC picks the mask type
// of a vector comparison where a template is parsed (the baseline), which defeats the AVX-512
// compare-and-blend. Fixed-length blocks vectorise even under -O2's very-cheap cost model. acc and
// v are either the same array or disjoint, so no iteration depends on another (ivdep).
template <class T, class Op>
FC_INLINE void reduce_loop(T* acc, const T* v, int64_t count) {
  constexpr int64_t kBlock = 64;
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    T* a = acc + i;
    const T* b = v + i;
    FC_IVDEP
    for (int64_t l = 0; l < kBlock; ++l) a[l] = Op::apply(a[l], b[l]);
  }
  for (; i < count; ++i) acc[i] = Op::apply(acc[i], v[i]);
}

template <class T>
FC_INLINE void reduce_typed(T* acc, const T* v, int64_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      reduce_loop<T, SumOp<T>>(acc, v, count);
      return;
    case ReduceOp::min:
      reduce_loop<T, MinOp<T>>(acc, v, count);
      return;
    case ReduceOp::max:
      reduce_loop<T, MaxOp<T>>(acc, v, count);
      return;
  }
  FC_DASSERT(false, "reduce_into: invalid op ", static_cast<int>(op));
}

template <class Isa>
FC_INLINE void reduce_impl(const ReduceArgs& a) {
  switch (a.dtype) {
    case DType::f32:
      reduce_typed(static_cast<float*>(a.acc), static_cast<const float*>(a.v), a.count, a.op);
      return;
    case DType::i32:
      reduce_typed(static_cast<std::int32_t*>(a.acc), static_cast<const std::int32_t*>(a.v),
                   a.count, a.op);
      return;
    case DType::i64:
      reduce_typed(static_cast<std::int64_t*>(a.acc), static_cast<const std::int64_t*>(a.v),
                   a.count, a.op);
      return;
    default:
      break;
  }
  FC_DASSERT(false, "reduce_into: dtype ", a.dtype, " cannot be reduced");
}

// --- Dispatch ----------------------------------------------------------------------------------

struct KernelTable {
  void (*embedding_i64)(const EmbeddingArgs<std::int64_t>&) noexcept;
  void (*embedding_i32)(const EmbeddingArgs<std::int32_t>&) noexcept;
  void (*gemv)(const GemvArgs&) noexcept;
  void (*gemm)(const GemmArgs&) noexcept;
  void (*reduce)(const ReduceArgs&) noexcept;
  int gemm_rows;  // the GEMM micro-kernel's rows (Isa::kGemmMr)
};

// One set of entry points per instruction set; `attr` compiles the inlined templates for it.
#define FC_KERNEL_ENTRIES(Isa, attr)                                                             \
  attr void embedding_i64_##Isa(const EmbeddingArgs<std::int64_t>& a) noexcept {                 \
    embedding_impl<Isa::Embed>(a);                                                               \
  }                                                                                              \
  attr void embedding_i32_##Isa(const EmbeddingArgs<std::int32_t>& a) noexcept {                 \
    embedding_impl<Isa::Embed>(a);                                                               \
  }                                                                                              \
  attr void gemv_##Isa(const GemvArgs& a) noexcept { gemv_impl<Isa>(a); }                        \
  attr void gemm_##Isa(const GemmArgs& a) noexcept { gemm_impl<Isa>(a); }                        \
  attr void reduce_##Isa(const ReduceArgs& a) noexcept { reduce_impl<Isa>(a); }                  \
  constexpr KernelTable kTable_##Isa = {&embedding_i64_##Isa, &embedding_i32_##Isa, &gemv_##Isa, \
                                        &gemm_##Isa, &reduce_##Isa, Isa::kGemmMr};

FC_KERNEL_ENTRIES(IsaBase, )
#if FC_KERNELS_X86
FC_KERNEL_ENTRIES(IsaAvx2, __attribute__((target("avx2"))))
FC_KERNEL_ENTRIES(IsaAvx512, __attribute__((target("avx512f,avx512vl"))))
#endif

#undef FC_KERNEL_ENTRIES

// The best set this CPU runs. The environment variable FUSEDCOLL_KERNEL_ISA=base|avx2 caps it
// (read once per process; other values change nothing). Every set gives the same bits; the
// variable exists so that tests can check exactly that.
const KernelTable& kernels() noexcept {
  static const KernelTable* const table = []() -> const KernelTable* {
#if FC_KERNELS_X86
    int level = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) level = 1;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) level = 2;
    switch (env().kernel_isa) {
      case Env::KernelIsa::base: level = 0; break;
      case Env::KernelIsa::avx2: level = std::min(level, 1); break;
      case Env::KernelIsa::avx512:
      case Env::KernelIsa::automatic: break;
    }
    if (level == 2) return &kTable_IsaAvx512;
    if (level == 1) return &kTable_IsaAvx2;
#endif
    return &kTable_IsaBase;
  }();
  return *table;
}

}  // namespace

void embedding_bag_rows(const float* table, std::int64_t table_stride, std::int64_t dim,
                        const std::int64_t* offsets, const std::int64_t* indices,
                        const float* weights, PoolingMode mode, std::int64_t b_begin,
                        std::int64_t b_end, float* out, std::int64_t out_stride) noexcept {
  kernels().embedding_i64(
      {table, table_stride, dim, offsets, indices, weights, mode, b_begin, b_end, out, out_stride});
}

void embedding_bag_rows(const float* table, std::int64_t table_stride, std::int64_t dim,
                        const std::int32_t* offsets, const std::int32_t* indices,
                        const float* weights, PoolingMode mode, std::int64_t b_begin,
                        std::int64_t b_end, float* out, std::int64_t out_stride) noexcept {
  kernels().embedding_i32(
      {table, table_stride, dim, offsets, indices, weights, mode, b_begin, b_end, out, out_stride});
}

void gemv_rows(const float* w, std::int64_t ldw, const float* x, std::int64_t ldx, std::int64_t m,
               std::int64_t k, std::int64_t n_begin, std::int64_t n_end, float* y,
               std::int64_t ldy) noexcept {
  FC_DASSERT(m <= kMaxGemvRows, "gemv_rows: m = ", m);
  kernels().gemv({w, ldw, x, ldx, m, k, n_begin, n_end, y, ldy});
}

void gemm_tile(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
               std::int64_t ldc, std::int64_t rows, std::int64_t cols, std::int64_t k) noexcept {
  kernels().gemm({a, lda, b, ldb, c, ldc, rows, cols, k});
}

int gemm_tile_row_block() noexcept { return kernels().gemm_rows; }

void reduce_into(void* acc, const void* v, std::int64_t count, DType dtype, ReduceOp op) noexcept {
  FC_DASSERT(dtype == DType::f32 || dtype == DType::i32 || dtype == DType::i64,
             "reduce_into: dtype ", dtype, " cannot be reduced");
  if (count <= 0) return;
  kernels().reduce({acc, v, count, dtype, op});
}

void finish_average(void* acc, std::int64_t count, DType dtype, int world_size) noexcept {
  FC_DASSERT(world_size > 0, "finish_average: world_size = ", world_size);
  switch (dtype) {
    case DType::f32: {
      auto* p = static_cast<float*>(acc);
      const float divisor = static_cast<float>(world_size);
      for (std::int64_t i = 0; i < count; ++i) p[i] = p[i] / divisor;
      return;
    }
    case DType::i32: {
      auto* p = static_cast<std::int32_t*>(acc);
      const auto divisor = static_cast<std::int32_t>(world_size);
      for (std::int64_t i = 0; i < count; ++i) p[i] = p[i] / divisor;
      return;
    }
    case DType::i64: {
      auto* p = static_cast<std::int64_t*>(acc);
      const auto divisor = static_cast<std::int64_t>(world_size);
      for (std::int64_t i = 0; i < count; ++i) p[i] = p[i] / divisor;
      return;
    }
    default:
      break;
  }
  FC_DASSERT(false, "finish_average: dtype ", dtype, " cannot be averaged");
}

}  // namespace fusedcoll::detail
