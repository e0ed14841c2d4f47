// Scaling, error feedback, the `Compression` object and the shared wire plan
// (include/fusedcoll/compression.hpp, include/fusedcoll/detail/wire.hpp).

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fusedcoll/compression.hpp"
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/wire.hpp"

namespace fusedcoll {

Scaling resolved_scaling(const CompressionOptions& opts) noexcept {
  if (opts.scaling != Scaling::automatic) return opts.scaling;
  return opts.format == WireFormat::fp8_e4m3 || opts.format == WireFormat::fp8_e5m2
             ? Scaling::per_tensor
             : Scaling::none;
}

void check(const CompressionOptions& opts) {
  FC_ENFORCE(static_cast<int>(opts.format) <= static_cast<int>(WireFormat::fp8_e5m2),
             "unknown wire format value ", static_cast<int>(opts.format));
  FC_ENFORCE(opts.overflow == Overflow::saturate || opts.overflow == Overflow::ieee,
             "unknown overflow mode ", static_cast<int>(opts.overflow));
  FC_ENFORCE(static_cast<int>(opts.scaling) <= static_cast<int>(Scaling::per_block),
             "unknown scaling mode ", static_cast<int>(opts.scaling));
  if (opts.format != WireFormat::none && opts.scaling == Scaling::per_block)
    FC_ENFORCE_GT(opts.block, 0, "per-block scaling needs a positive block size");
}

float scale_for(WireFormat format, float amax, float headroom, bool pow2) {
  FC_ENFORCE(std::isfinite(amax) && amax >= 0, "cannot scale for amax ", amax,
             " (the data holds a NaN or an infinity; scaling needs finite values)");
  FC_ENFORCE(std::isfinite(headroom) && headroom >= 1, "scale headroom ", headroom,
             " is not a finite number >= 1");
  if (amax == 0) return 1.0f;
  double s = static_cast<double>(wire_max(format)) /
             (static_cast<double>(amax) * static_cast<double>(headroom));
  if (pow2) {
    int e = 0;
    (void)std::frexp(s, &e);  // s = m * 2^e, m in [0.5, 1): the power of two below is 2^(e-1)
    s = std::ldexp(1.0, e - 1);
  }
  // Both the scale and its inverse stay normal floats, so scaling never loses the scale itself.
  s = std::clamp(s, std::ldexp(1.0, -126), std::ldexp(1.0, 127));
  return static_cast<float>(s);
}

std::vector<float> block_amax(std::span<const float> x, std::int64_t block) {
  CompressionOptions opts{.format = WireFormat::fp8_e4m3,
                          .scaling = block > 0 ? Scaling::per_block : Scaling::per_tensor,
                          .block = block};
  std::vector<float> table;
  if (!x.empty()) detail::accumulate_amax(opts, table, x.data(), 0, std::ssize(x));
  return table;
}

// --- Error feedback ------------------------------------------------------------------------------

void ErrorFeedback::apply(std::span<float> x) {
  if (residual_.empty()) residual_.assign(x.size(), 0.0f);
  FC_ENFORCE_EQ(residual_.size(), x.size(), "error feedback: the tensor changed size");
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = x[i] + residual_[i];
}

void ErrorFeedback::update(std::span<const float> sent, std::span<const float> received) {
  FC_ENFORCE_EQ(sent.size(), received.size(), "error feedback: sent and received sizes differ");
  if (residual_.empty()) residual_.assign(sent.size(), 0.0f);
  FC_ENFORCE_EQ(residual_.size(), sent.size(), "error feedback: the tensor changed size");
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const float r = sent[i] - received[i];
    residual_[i] = std::isfinite(r) ? r : 0.0f;
  }
}

// --- Compression -------------------------------------------------------------------------------

Compression::Compression(CompressionOptions options, bool error_feedback)
    : options_(options), error_feedback_(error_feedback) {
  check(options_);
}

Compression Compression::fp8_e4m3(bool error_feedback) {
  return Compression({.format = WireFormat::fp8_e4m3, .pow2_scale = true}, error_feedback);
}
Compression Compression::fp8_e5m2(bool error_feedback) {
  return Compression({.format = WireFormat::fp8_e5m2, .pow2_scale = true}, error_feedback);
}

Compression::Compressed Compression::compress(std::span<const float> x) {
  std::vector<float> sent(x.begin(), x.end());
  if (error_feedback_) feedback_.apply(sent);
  // The scale covers what is actually sent: the input plus the residual.
  std::vector<float> table = detail::empty_amax(options_);
  if (!sent.empty()) detail::accumulate_amax(options_, table, sent.data(), 0, std::ssize(sent));
  return encode_sent(sent, table, 1.0f);
}

Compression::Compressed Compression::compress(std::span<const float> x,
                                              std::span<const float> amax, float headroom) {
  const Scaling scaling = resolved_scaling(options_);
  const std::int64_t n = std::ssize(x);
  const std::size_t want =
      scaling == Scaling::none
          ? 0
          : (scaling == Scaling::per_tensor
                 ? 1
                 : static_cast<std::size_t>((n + options_.block - 1) / options_.block));
  FC_ENFORCE_EQ(amax.size(), want, "compress: wrong number of amax values for ", n,
                " elements with ", to_string(scaling), " scaling");
  std::vector<float> sent(x.begin(), x.end());
  if (error_feedback_) feedback_.apply(sent);
  return encode_sent(sent, std::vector<float>(amax.begin(), amax.end()), headroom);
}

Compression::Compressed Compression::encode_sent(const std::vector<float>& sent,
                                                 const std::vector<float>& table,
                                                 float headroom) {
  const std::int64_t n = std::ssize(sent);
  const detail::WirePlan plan = detail::make_plan(options_, table, headroom);
  Compressed c;
  c.ctx.format = options_.format;
  c.ctx.count = n;
  c.ctx.block = plan.block;
  c.ctx.scales = plan.scales;
  c.payload.resize(static_cast<std::size_t>(n) * plan.elem());
  detail::wire_encode(plan, sent.data(), 0, n, c.payload.data());
  if (error_feedback_) {
    std::vector<float> received(sent.size());
    detail::wire_decode(plan, c.payload.data(), 0, n, received.data());
    feedback_.update(sent, received);
  }
  return c;
}

void Compression::decompress(std::span<const std::byte> payload, const Context& ctx,
                             std::span<float> out) {
  FC_ENFORCE_GE(ctx.count, 0, "decompress: negative count in the context");
  const std::size_t elem = wire_size(ctx.format);
  FC_ENFORCE_EQ(payload.size(), static_cast<std::size_t>(ctx.count) * elem,
                "decompress: payload size does not match the context's count");
  FC_ENFORCE_EQ(out.size(), static_cast<std::size_t>(ctx.count),
                "decompress: output size does not match the context's count");
  FC_ENFORCE_GE(ctx.block, 0, "decompress: negative block in the context");
  if (!ctx.scales.empty()) {
    const std::size_t want =
        ctx.block == 0 ? 1 : static_cast<std::size_t>((ctx.count + ctx.block - 1) / ctx.block);
    FC_ENFORCE_EQ(ctx.scales.size(), want, "decompress: wrong number of scales in the context");
    for (float s : ctx.scales)
      FC_ENFORCE(std::isfinite(s) && s > 0, "decompress: scale ", s, " in the context is invalid");
  }
  detail::WirePlan plan{ctx.format, Overflow::saturate, ctx.block, ctx.scales};
  detail::wire_decode(plan, payload.data(), 0, ctx.count, out.data());
}

std::vector<float> Compression::decompress(const Compressed& c) {
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(c.ctx.count, 0)));
  decompress(c.payload, c.ctx, out);
  return out;
}

// --- The wire plan -------------------------------------------------------------------------------

namespace detail {

std::vector<float> empty_amax(const CompressionOptions& opts) {
  return resolved_scaling(opts) == Scaling::per_tensor ? std::vector<float>(1, 0.0f)
                                                       : std::vector<float>{};
}

namespace {
float nan_max(float a, float b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return b > a ? b : a;
}

}  // namespace

void accumulate_amax(const CompressionOptions& opts, std::vector<float>& table, const float* x,
                     std::int64_t first, std::int64_t n) {
  const Scaling scaling = resolved_scaling(opts);
  if (scaling == Scaling::none || n <= 0) return;
  if (scaling == Scaling::per_tensor) {
    if (table.empty()) table.push_back(0.0f);
    table[0] = nan_max(table[0], abs_max(x, n));
    return;
  }
  const std::int64_t B = opts.block;
  const auto last_block = static_cast<std::size_t>((first + n - 1) / B);
  if (table.size() <= last_block) table.resize(last_block + 1, 0.0f);
  // Block by block: elements [i, end) all belong to block (first + i) / B.
  for (std::int64_t i = 0; i < n;) {
    const std::int64_t block = (first + i) / B;
    const std::int64_t end = std::min(n, (block + 1) * B - first);
    float& m = table[static_cast<std::size_t>(block)];
    m = nan_max(m, abs_max(x + i, end - i));
    i = end;
  }
}

void combine_amax(std::vector<float>& into, const std::vector<float>& other) {
  if (into.size() < other.size()) into.resize(other.size(), 0.0f);
  for (std::size_t k = 0; k < other.size(); ++k) into[k] = nan_max(into[k], other[k]);
}

WirePlan make_plan(const CompressionOptions& opts, const std::vector<float>& agreed_amax,
                   float headroom) {
  WirePlan plan;
  plan.format = opts.format;
  plan.overflow = opts.overflow;
  const Scaling scaling = resolved_scaling(opts);
  if (scaling == Scaling::none) return plan;
  plan.block = scaling == Scaling::per_block ? opts.block : 0;
  for (float a : agreed_amax)
    plan.scales.push_back(scale_for(opts.format, a, headroom, opts.pow2_scale));
  if (plan.scales.empty()) plan.scales.push_back(1.0f);  // no elements: any scale will do
  return plan;
}

float reduction_headroom(ReduceOp op, int world_size) {
  return op == ReduceOp::sum || op == ReduceOp::avg ? static_cast<float>(world_size) : 1.0f;
}

namespace {
/// Calls `f(offset, length, scale)` for the runs of `[first, first + n)` that share a scale.
template <class F>
void for_each_run(const WirePlan& plan, std::int64_t first, std::int64_t n, F&& f) {
  if (plan.block == 0) {
    f(std::int64_t{0}, n, plan.scales[0]);
    return;
  }
  std::int64_t i = 0;
  while (i < n) {
    const std::int64_t k = (first + i) / plan.block;
    const std::int64_t len = std::min(n - i, (k + 1) * plan.block - (first + i));
    f(i, len, plan.scales[static_cast<std::size_t>(k)]);
    i += len;
  }
}
}  // namespace

void wire_encode(const WirePlan& plan, const float* x, std::int64_t first, std::int64_t n,
                 void* out) {
  if (n <= 0) return;
  if (plan.scales.empty()) {
    encode(plan.format, x, out, n, plan.overflow);
    return;
  }
  auto* o = static_cast<std::byte*>(out);
  for_each_run(plan, first, n, [&](std::int64_t at, std::int64_t len, float s) {
    encode_scaled(plan.format, x + at, o + static_cast<std::size_t>(at) * plan.elem(), len, s,
                  plan.overflow);
  });
}

void wire_decode(const WirePlan& plan, const void* in, std::int64_t first, std::int64_t n,
                 float* out) {
  if (n <= 0) return;
  if (plan.scales.empty()) {
    decode(plan.format, in, out, n);
    return;
  }
  const auto* b = static_cast<const std::byte*>(in);
  for_each_run(plan, first, n, [&](std::int64_t at, std::int64_t len, float s) {
    decode_scaled(plan.format, b + static_cast<std::size_t>(at) * plan.elem(), out + at, len, s);
  });
}

void wire_round_trip(const WirePlan& plan, float* x, std::int64_t first, std::int64_t n,
                     std::vector<std::byte>& tmp) {
  if (n <= 0) return;
  tmp.resize(static_cast<std::size_t>(n) * plan.elem());
  wire_encode(plan, x, first, n, tmp.data());
  wire_decode(plan, tmp.data(), first, n, x);
}

void wire_reduce(const WirePlan& plan, ReduceOp op, const std::vector<WireSource>& sources,
                 std::int64_t first, std::int64_t n, int divide_by, void* fin, float* out) {
  FC_ENFORCE(!sources.empty(), "wire_reduce: no sources");
  // 2048 elements: the partial result, one operand and a round trip's wire bytes stay in L1.
  constexpr std::int64_t kBlock = 2048;
  alignas(64) float acc[kBlock];
  alignas(64) float val[kBlock];
  alignas(64) std::byte tmp[kBlock * sizeof(float)];
  const std::size_t we = plan.elem();
  auto* fin_bytes = static_cast<std::byte*>(fin);
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t m = std::min(kBlock, n - b);
    const std::int64_t at = first + b;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const WireSource& src = sources[i];
      float* dst = i == 0 ? acc : val;
      const float* v = dst;
      switch (src.kind) {
        case WireSource::Kind::wire:
          wire_decode(plan, static_cast<const std::byte*>(src.data) + static_cast<std::size_t>(b) * we,
                      at, m, dst);
          break;
        case WireSource::Kind::round_trip:
          wire_encode(plan, static_cast<const float*>(src.data) + b, at, m, tmp);
          wire_decode(plan, tmp, at, m, dst);
          break;
        case WireSource::Kind::plain:
          v = static_cast<const float*>(src.data) + b;
          if (i == 0) std::memcpy(acc, v, static_cast<std::size_t>(m) * sizeof(float));
          break;
      }
      if (i > 0) reduce_into(acc, v, m, DType::f32, op);
    }
    if (divide_by > 0) finish_average(acc, m, DType::f32, divide_by);
    if (fin != nullptr) {
      std::byte* f = fin_bytes + static_cast<std::size_t>(b) * we;
      wire_encode(plan, acc, at, m, f);
      if (out != nullptr) wire_decode(plan, f, at, m, out + b);
    } else {
      std::memcpy(out + b, acc, static_cast<std::size_t>(m) * sizeof(float));
    }
  }
}

std::vector<float> contribution(const void* send, std::int64_t count, ReduceOp op,
                                const CompressionOptions& opts, int world_size) {
  std::vector<float> y(static_cast<std::size_t>(count));
  if (count > 0) std::memcpy(y.data(), send, y.size() * sizeof(float));
  if (op == ReduceOp::avg && opts.predivide) {
    const float divisor = static_cast<float>(world_size);
    for (float& v : y) v = v / divisor;
  }
  return y;
}

const float* contribution_view(const void* send, bool in_place, std::int64_t count, ReduceOp op,
                               const CompressionOptions& opts, int world_size,
                               std::vector<float>& storage) {
  if (!in_place && !(op == ReduceOp::avg && opts.predivide))
    return static_cast<const float*>(send);
  storage = contribution(send, count, op, opts, world_size);
  return storage.data();
}

}  // namespace detail
}  // namespace fusedcoll
