#pragma once
/// @file
/// Wire compression: f32 <-> f16 / bf16 / OCP FP8 (E4M3, E5M2) codecs, fp8 scaling, error
/// feedback, the options that turn a collective's wire compressed, and a Horovod-like
/// `Compression` object for training code. Formats, rounding, overflow, NaN rules and the wire
/// semantics of every compressed collective: docs/compression.md.
///
/// Every conversion rounds to nearest, ties to even, and handles subnormals exactly. The batch
/// functions pick the CPU's widest instruction set at run time (F16C/AVX2, AVX-512; capped by
/// `FUSEDCOLL_KERNEL_ISA`) and give the bits of the scalar functions for every input.

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <vector>

#include "fusedcoll/error.hpp"

namespace fusedcoll {

/// What travels on the wire. `none` keeps today's uncompressed collectives, bit for bit.
enum class WireFormat : std::uint8_t {
  none = 0,      ///< f32, uncompressed.
  f16 = 1,       ///< IEEE binary16 (max 65504).
  bf16 = 2,      ///< bfloat16: the top half of a binary32 (max 3.3895e38).
  fp8_e4m3 = 3,  ///< OCP E4M3: bias 7, max 448, no infinities, NaN = S.1111.111.
  fp8_e5m2 = 4,  ///< OCP E5M2: bias 15, max 57344, IEEE infinities and NaNs.
};

/// Name of a format ("none", "f16", "bf16", "fp8_e4m3", "fp8_e5m2"), or "invalid".
constexpr const char* to_string(WireFormat f) noexcept {
  switch (f) {
    case WireFormat::none: return "none";
    case WireFormat::f16: return "f16";
    case WireFormat::bf16: return "bf16";
    case WireFormat::fp8_e4m3: return "fp8_e4m3";
    case WireFormat::fp8_e5m2: return "fp8_e5m2";
  }
  return "invalid";
}
inline std::ostream& operator<<(std::ostream& os, WireFormat f) {
  return os << to_string(f) << "(" << static_cast<int>(f) << ")";
}

/// Bytes per element on the wire (4 for `none`). Throws `InvalidArgument` for an invalid value.
std::size_t wire_size(WireFormat f);
/// Largest finite value of the format (FLT_MAX for `none`).
float wire_max(WireFormat f);

/// What an encoder does with a finite value whose rounded magnitude exceeds the format's largest
/// finite value, and with an infinity.
enum class Overflow : std::uint8_t {
  /// Finite overflow gives ±max (the default: one huge gradient must not turn into inf/NaN).
  /// ±inf stays ±inf where the format has infinities (f16, bf16, E5M2) and gives ±448 in E4M3.
  saturate = 0,
  /// The format's IEEE-style rule: overflow and ±inf give ±inf (f16, bf16, E5M2) or NaN (E4M3,
  /// which has no infinity; the OCP "non-saturating" conversion).
  ieee = 1,
};
constexpr const char* to_string(Overflow o) noexcept {
  return o == Overflow::saturate ? "saturate" : (o == Overflow::ieee ? "ieee" : "invalid");
}
inline std::ostream& operator<<(std::ostream& os, Overflow o) {
  return os << to_string(o) << "(" << static_cast<int>(o) << ")";
}

/// How values are scaled before encoding (`code = encode(x * scale)`, `x' = decode(code) /
/// scale`); the scale comes from the absolute maximum (amax), see `scale_for`.
enum class Scaling : std::uint8_t {
  automatic = 0,   ///< `per_tensor` for the fp8 formats, `none` for f16 and bf16.
  none = 1,        ///< No scaling: values are encoded as they are.
  per_tensor = 2,  ///< One scale for the whole buffer.
  per_block = 3,   ///< One scale per `block` consecutive elements.
};
constexpr const char* to_string(Scaling s) noexcept {
  switch (s) {
    case Scaling::automatic: return "automatic";
    case Scaling::none: return "none";
    case Scaling::per_tensor: return "per_tensor";
    case Scaling::per_block: return "per_block";
  }
  return "invalid";
}
inline std::ostream& operator<<(std::ostream& os, Scaling s) {
  return os << to_string(s) << "(" << static_cast<int>(s) << ")";
}

/// Wire compression of a collective (the `wire` field of AllReduceArgs, ReduceScatterArgs,
/// AllGatherArgs and AllToAllvArgs). Global: every rank must pass the same options. Only f32
/// data can be compressed (`InvalidArgument` otherwise); every reduction still runs in f32.
struct CompressionOptions {
  WireFormat format = WireFormat::none;
  Overflow overflow = Overflow::saturate;
  Scaling scaling = Scaling::automatic;
  /// Elements per scale block with `Scaling::per_block` (> 0); ignored otherwise.
  std::int64_t block = 256;
  /// Round every scale down to a power of two, so that scaling and unscaling are exact.
  bool pow2_scale = false;
  /// `ReduceOp::avg`: divide each contribution by P before summing (no final division), which
  /// keeps partial sums in range. Ignored by other ops and by the non-reducing collectives.
  bool predivide = false;

  bool operator==(const CompressionOptions&) const = default;
};

/// The scaling `opts` resolves to (`automatic` replaced).
Scaling resolved_scaling(const CompressionOptions& opts) noexcept;

/// Throws `InvalidArgument` naming the offending field unless `opts` is well-formed.
void check(const CompressionOptions& opts);

// --- Scalar codecs: the reference every batch path reproduces ------------------------------------

/// f32 -> binary16. NaN gives a quiet NaN with the sign and the top 9 payload bits.
std::uint16_t f32_to_f16(float x, Overflow overflow = Overflow::saturate) noexcept;
/// binary16 -> f32, exact. A NaN gives a quiet NaN with the sign and payload (shifted).
float f16_to_f32(std::uint16_t h) noexcept;
/// f32 -> bfloat16. NaN gives a quiet NaN with the sign and the top 6 payload bits.
std::uint16_t f32_to_bf16(float x, Overflow overflow = Overflow::saturate) noexcept;
/// bfloat16 -> f32, exact (the bits, shifted; NaN payloads kept as they are).
float bf16_to_f32(std::uint16_t b) noexcept;
/// f32 -> E4M3. NaN gives S.1111.111 (the format's only NaN, with the sign).
std::uint8_t f32_to_e4m3(float x, Overflow overflow = Overflow::saturate) noexcept;
/// E4M3 -> f32, exact; S.1111.111 gives a quiet NaN (0x7FC00000 with the sign).
float e4m3_to_f32(std::uint8_t c) noexcept;
/// f32 -> E5M2. NaN gives S.11111.1x (quiet) with the top payload bit.
std::uint8_t f32_to_e5m2(float x, Overflow overflow = Overflow::saturate) noexcept;
/// E5M2 -> f32, exact (as the binary16 with this high byte). NaNs come back quiet.
float e5m2_to_f32(std::uint8_t c) noexcept;

// --- Batch codecs ----------------------------------------------------------------------------------

/// `out[i] = encode(in[i])` for `n` elements: `out` holds `n * wire_size(format)` bytes (for
/// `none`, a copy). No alignment needed; `in` and `out` must not overlap.
void encode(WireFormat format, const float* in, void* out, std::int64_t n,
            Overflow overflow = Overflow::saturate);
/// `out[i] = decode(in[i])` for `n` elements.
void decode(WireFormat format, const void* in, float* out, std::int64_t n);
/// `out[i] = encode(in[i] * scale)` (the product rounded to f32 first).
void encode_scaled(WireFormat format, const float* in, void* out, std::int64_t n, float scale,
                   Overflow overflow = Overflow::saturate);
/// `out[i] = decode(in[i]) / scale` (IEEE division; exact when `scale` is a power of two).
void decode_scaled(WireFormat format, const void* in, float* out, std::int64_t n, float scale);

// --- Scaling -----------------------------------------------------------------------------------

/// The scale that maps `amax * headroom` onto the format's largest finite value:
/// `wire_max(format) / (amax * headroom)`, computed in double and rounded to f32, clamped to
/// [2^-126, 2^127]; with `pow2` rounded down to a power of two first. `amax == 0` gives 1.
/// Throws `InvalidArgument` for a NaN, infinite or negative `amax` (a non-finite value in the
/// data: no scale can represent it) or a `headroom` that is not finite and >= 1.
float scale_for(WireFormat format, float amax, float headroom, bool pow2);

/// Per-block absolute maxima of `x`: element `i` belongs to block `i / block`; with
/// `block <= 0` a single block. A NaN in a block makes its amax NaN. Empty `x`: no blocks.
std::vector<float> block_amax(std::span<const float> x, std::int64_t block);

// --- Error feedback ------------------------------------------------------------------------------

/// Error feedback state of one tensor on one rank, owned by the caller (keep one per tensor, like
/// the `Compression` context). `apply` adds the residual of the previous step to the input;
/// `update` stores `input - decode(encode(input))`. Non-finite residual entries are stored as 0,
/// so one NaN or inf gradient does not poison every later step.
class ErrorFeedback {
 public:
  /// `x[i] += residual[i]` (f32 add). The first call fixes the size; later sizes must match.
  void apply(std::span<float> x);
  /// `residual[i] = sent[i] - received[i]`, where `sent` is the input after `apply` and
  /// `received` what the wire delivered of it.
  void update(std::span<const float> sent, std::span<const float> received);
  std::span<const float> residual() const noexcept { return residual_; }
  void reset() noexcept { residual_.clear(); }

 private:
  std::vector<float> residual_;
};

// --- The Horovod-like object API -------------------------------------------------------------

/// A compressor for training code: `auto [payload, ctx] = c.compress(grad);` ... send payload ...
/// `c.decompress(payload, ctx, out)`. The context carries everything decoding needs (format,
/// count, scales), so it must travel with its payload (one context per tensor and step).
///
/// With `error_feedback`, the object keeps a residual (one tensor per object: use one
/// `Compression` per gradient tensor) and adds it to the next `compress` input.
class Compression {
 public:
  /// What `decompress` needs besides the bytes.
  struct Context {
    WireFormat format = WireFormat::none;
    std::int64_t count = 0;
    std::int64_t block = 0;     ///< elements per scale (0: one scale for all, or unscaled)
    std::vector<float> scales;  ///< empty: unscaled
  };
  struct Compressed {
    std::vector<std::byte> payload;
    Context ctx;
  };

  explicit Compression(CompressionOptions options = {}, bool error_feedback = false);
  static Compression none() { return Compression(CompressionOptions{}); }
  static Compression fp16() { return Compression(CompressionOptions{.format = WireFormat::f16}); }
  static Compression bf16() { return Compression(CompressionOptions{.format = WireFormat::bf16}); }
  /// Scaled per tensor from the amax with a power-of-two scale, saturating. For other choices
  /// (per block, E4M3 unscaled, ...) construct `Compression(CompressionOptions{...})`.
  static Compression fp8_e4m3(bool error_feedback = false);
  static Compression fp8_e5m2(bool error_feedback = false);

  /// Encodes `x` with scales from its own amax (per tensor or per block).
  Compressed compress(std::span<const float> x);
  /// Encodes `x` with scales from `amax` (one per block, or one for the tensor), e.g. agreed by
  /// every rank with a max-AllReduce of `block_amax(x, ...)`, so all ranks use the same scale.
  /// `headroom`: the factor by which values may grow after decoding and before re-encoding (e.g.
  /// P when the receivers sum P payloads and re-encode). With error feedback the encoded values
  /// are `x + residual()`; an amax that does not cover them makes those values saturate. Throws
  /// `InvalidArgument` for a non-finite amax or a wrong number of them.
  Compressed compress(std::span<const float> x, std::span<const float> amax, float headroom = 1);
  /// Decodes `payload` (as produced with `ctx`) into `out` (`ctx.count` elements).
  static void decompress(std::span<const std::byte> payload, const Context& ctx,
                         std::span<float> out);
  static std::vector<float> decompress(const Compressed& c);

  const CompressionOptions& options() const noexcept { return options_; }
  /// The error-feedback residual (empty without error feedback or before the first call).
  std::span<const float> residual() const noexcept { return feedback_.residual(); }
  void reset_residual() noexcept { feedback_.reset(); }

 private:
  Compressed encode_sent(const std::vector<float>& sent, const std::vector<float>& table,
                         float headroom);
  CompressionOptions options_;
  bool error_feedback_ = false;
  ErrorFeedback feedback_;
};

}  // namespace fusedcoll
