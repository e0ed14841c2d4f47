// The wire codecs from Python (docs/pytorch.md, "Codecs"): fusedcoll's batch encoders and
// decoders, scaled or not, and the scale helpers. Payloads are typed tensors: torch.float16 for
// f16, torch.bfloat16 for bf16 (the same bits), torch.uint8 for the FP8 formats (torch 1.13 has
// no float8 dtype), torch.float32 for `none`.

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>

#include "python/csrc/extension.hpp"

namespace fusedcoll::torch_ext {
namespace {

using fusedcoll::detail::make_string;

c10::ScalarType payload_type(WireFormat f) {
  switch (f) {
    case WireFormat::none:
      return at::kFloat;
    case WireFormat::f16:
      return at::kHalf;
    case WireFormat::bf16:
      return at::kBFloat16;
    case WireFormat::fp8_e4m3:
    case WireFormat::fp8_e5m2:
      return at::kByte;
  }
  throw InvalidArgument(make_string("unknown wire format ", static_cast<int>(f)));
}

float checked_scale(std::string_view op, double scale) {
  // The codecs take a float32 scale (scale_for's values are float32 already).
  const auto s = static_cast<float>(scale);
  if (!std::isfinite(s) || s <= 0)
    value_error(op, make_string("scale ", scale, " must be positive and finite in float32"));
  return s;
}

at::Tensor encode_op(const at::Tensor& input, c10::string_view format, c10::optional<double> scale,
                     c10::string_view overflow) {
  return translate([&] {
    constexpr std::string_view kOp = "encode";
    check_tensor(kOp, "input", input);
    require_f32(kOp, "input", input);
    const WireFormat f = parse_format(kOp, format);
    const Overflow o = parse_overflow(kOp, overflow);
    at::Tensor out = at::empty(input.sizes(), at::TensorOptions().dtype(payload_type(f)));
    const auto* in = static_cast<const float*>(input.data_ptr());
    if (scale)
      encode_scaled(f, in, out.data_ptr(), input.numel(), checked_scale(kOp, *scale), o);
    else
      encode(f, in, out.data_ptr(), input.numel(), o);
    return out;
  });
}

at::Tensor decode_op(const at::Tensor& input, c10::string_view format,
                     c10::optional<double> scale) {
  return translate([&] {
    constexpr std::string_view kOp = "decode";
    check_tensor(kOp, "input", input);
    const WireFormat f = parse_format(kOp, format);
    if (input.scalar_type() != payload_type(f))
      type_error(kOp, make_string("a ", to_string(f), " payload is a ", torch_name(payload_type(f)),
                                  " tensor; got ", torch_name(input.scalar_type())));
    at::Tensor out = at::empty(input.sizes(), at::TensorOptions().dtype(at::kFloat));
    auto* o = static_cast<float*>(out.data_ptr());
    if (scale)
      decode_scaled(f, input.data_ptr(), o, input.numel(), checked_scale(kOp, *scale));
    else
      decode(f, input.data_ptr(), o, input.numel());
    return out;
  });
}

double scale_for_op(c10::string_view format, double amax, double headroom, bool pow2) {
  return translate([&] {
    constexpr std::string_view kOp = "scale_for";
    const WireFormat f = parse_format(kOp, format);
    return static_cast<double>(
        scale_for(f, static_cast<float>(amax), static_cast<float>(headroom), pow2));
  });
}

at::Tensor block_amax_op(const at::Tensor& input, std::int64_t block) {
  return translate([&] {
    constexpr std::string_view kOp = "block_amax";
    check_tensor(kOp, "input", input);
    require_f32(kOp, "input", input);
    const auto amax = block_amax(std::span<const float>(static_cast<const float*>(input.data_ptr()),
                                                        static_cast<std::size_t>(input.numel())),
                                 block);
    at::Tensor out =
        at::empty({static_cast<std::int64_t>(amax.size())}, at::TensorOptions().dtype(at::kFloat));
    std::copy(amax.begin(), amax.end(), static_cast<float*>(out.data_ptr()));
    return out;
  });
}

double wire_max_op(c10::string_view format) {
  return translate([&] { return static_cast<double>(wire_max(parse_format("wire_max", format))); });
}

}  // namespace
}  // namespace fusedcoll::torch_ext

TORCH_LIBRARY_FRAGMENT(fusedcoll, m) {
  using namespace fusedcoll::torch_ext;
  m.def("encode(Tensor input, str format, float? scale=None, str overflow=\"saturate\") -> Tensor",
        &encode_op);
  m.def("decode(Tensor input, str format, float? scale=None) -> Tensor", &decode_op);
  m.def("scale_for(str format, float amax, float headroom=1., bool pow2=False) -> float",
        &scale_for_op);
  m.def("block_amax(Tensor input, int block=0) -> Tensor", &block_amax_op);
  m.def("wire_max(str format) -> float", &wire_max_op);
}
