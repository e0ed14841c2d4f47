// Tensor checks and conversions, string arguments, and the translation of fusedcoll's exceptions
// into the c10 errors that PyTorch raises in Python (extension.hpp).

#include <ATen/ops/empty.h>

#include <sstream>

#include "python/csrc/extension.hpp"

namespace fusedcoll::torch_ext {

using fusedcoll::detail::make_string;

std::string tagged(std::string_view code, std::string_view message) {
  return make_string("fusedcoll ", code, ": ", message);
}

void type_error(std::string_view op, const std::string& message) {
  C10_THROW_ERROR(TypeError, make_string("fusedcoll.", op, ": ", message));
}

void value_error(std::string_view op, const std::string& message) {
  C10_THROW_ERROR(ValueError, make_string("fusedcoll.", op, ": ", message));
}

void rethrow_translated(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error&) {
    throw;  // the binding's own TypeError / ValueError, already worded
  } catch (const InvalidArgument& err) {
    C10_THROW_ERROR(ValueError, tagged(to_string(err.code()), err.what()));
  } catch (const UnsupportedError& err) {
    C10_THROW_ERROR(NotImplementedError, tagged(to_string(err.code()), err.what()));
  } catch (const Error& err) {
    C10_THROW_ERROR(Error, tagged(to_string(err.code()), err.what()));
  } catch (const std::exception& err) {
    C10_THROW_ERROR(Error, tagged("internal", err.what()));
  } catch (...) {
    C10_THROW_ERROR(Error, tagged("internal", "unknown exception"));
  }
}

std::string torch_name(c10::ScalarType s) {
  switch (s) {
    case c10::ScalarType::Float:
      return "torch.float32";
    case c10::ScalarType::Double:
      return "torch.float64";
    case c10::ScalarType::Half:
      return "torch.float16";
    case c10::ScalarType::BFloat16:
      return "torch.bfloat16";
    case c10::ScalarType::Byte:
      return "torch.uint8";
    case c10::ScalarType::Char:
      return "torch.int8";
    case c10::ScalarType::Short:
      return "torch.int16";
    case c10::ScalarType::Int:
      return "torch.int32";
    case c10::ScalarType::Long:
      return "torch.int64";
    case c10::ScalarType::Bool:
      return "torch.bool";
    case c10::ScalarType::ComplexFloat:
      return "torch.complex64";
    case c10::ScalarType::ComplexDouble:
      return "torch.complex128";
    default:
      return make_string("torch.", c10::toString(s));
  }
}

namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream os;
  os << "[";
  for (std::int64_t d = 0; d < t.dim(); ++d) os << (d ? ", " : "") << t.size(d);
  os << "]";
  return os.str();
}

std::string strides_of(const at::Tensor& t) {
  std::ostringstream os;
  os << "[";
  for (std::int64_t d = 0; d < t.dim(); ++d) os << (d ? ", " : "") << t.stride(d);
  os << "]";
  return os.str();
}

}  // namespace

void check_tensor(std::string_view op, std::string_view what, const at::Tensor& t) {
  if (!t.defined()) type_error(op, make_string(what, " is an undefined tensor"));
  if (t.layout() != c10::kStrided)
    type_error(op, make_string(what, " must be a dense (strided) tensor, got layout ",
                               c10::toString(t.layout())));
  if (!t.device().is_cpu())
    type_error(op,
               make_string(what, " must be a CPU tensor, got a tensor on ", t.device().str(),
                           " (the fusedcoll torch operators take CPU tensors; docs/pytorch.md)"));
  if (!t.is_contiguous())
    value_error(op, make_string(what, " must be contiguous, got shape ", shape_of(t),
                                " with strides ", strides_of(t), " (call .contiguous())"));
}

namespace {

bool exact_of(c10::ScalarType s, DType& out) {
  switch (s) {
    case c10::ScalarType::Float:
      out = DType::f32;
      return true;
    case c10::ScalarType::Half:
      out = DType::f16;
      return true;
    case c10::ScalarType::BFloat16:
      out = DType::bf16;
      return true;
    case c10::ScalarType::Int:
      out = DType::i32;
      return true;
    case c10::ScalarType::Long:
      out = DType::i64;
      return true;
    default:
      return false;
  }
}

}  // namespace

DType exact_dtype(std::string_view op, std::string_view what, const at::Tensor& t,
                  std::string_view allowed) {
  DType d{};
  if (!exact_of(t.scalar_type(), d))
    type_error(
        op, make_string(what, " has dtype ", torch_name(t.scalar_type()), "; expected ", allowed));
  return d;
}

DType moved_dtype(std::string_view op, std::string_view what, const at::Tensor& t) {
  DType d{};
  if (exact_of(t.scalar_type(), d)) return d;
  // The collective moves bytes; a dtype of the same width carries them unchanged. Ranks still
  // have to agree on it (the width is part of the agreed arguments).
  switch (t.element_size()) {
    case 1:
      return DType::f8_e4m3;
    case 2:
      return DType::f16;
    case 4:
      return DType::i32;
    case 8:
      return DType::i64;
    default:
      type_error(
          op, make_string(what, " has dtype ", torch_name(t.scalar_type()), " (", t.element_size(),
                          " bytes per element); the collectives move elements of 1, 2, 4 "
                          "or 8 bytes"));
  }
}

DType reduced_dtype(std::string_view op, std::string_view what, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case c10::ScalarType::Float:
      return DType::f32;
    case c10::ScalarType::Int:
      return DType::i32;
    case c10::ScalarType::Long:
      return DType::i64;
    default:
      type_error(op,
                 make_string(what, " has dtype ", torch_name(t.scalar_type()),
                             "; reductions run on torch.float32, torch.int32 and torch.int64 "
                             "(for 16- or 8-bit traffic, compress the wire: wire=\"f16\", ...)"));
  }
}

void require_f32(std::string_view op, std::string_view what, const at::Tensor& t) {
  if (t.scalar_type() != c10::ScalarType::Float)
    type_error(op, make_string(what, " has dtype ", torch_name(t.scalar_type()),
                               "; expected torch.float32"));
}

namespace {

std::vector<std::int64_t> shape_vector(const at::Tensor& t) {
  return {t.sizes().begin(), t.sizes().end()};
}

}  // namespace

ConstTensorView const_view(const at::Tensor& t, DType dtype) {
  const auto shape = shape_vector(t);
  return ConstTensorView(t.data_ptr(), dtype, std::span<const std::int64_t>(shape));
}

TensorView mutable_view(const at::Tensor& t, DType dtype) {
  const auto shape = shape_vector(t);
  return TensorView(t.data_ptr(), dtype, std::span<const std::int64_t>(shape));
}

at::Tensor empty_like_dtype(const at::Tensor& like, at::IntArrayRef shape) {
  return at::empty(shape, at::TensorOptions().dtype(like.scalar_type()).device(c10::kCPU));
}

namespace {

template <class E, std::size_t N>
E parse_named(std::string_view op, std::string_view what, c10::string_view s,
              const std::pair<const char*, E> (&names)[N]) {
  std::string list;
  for (const auto& [name, value] : names) {
    if (s == name) return value;
    list += make_string(list.empty() ? "" : ", ", "'", name, "'");
  }
  value_error(op, make_string(what, " '", s, "' is not one of ", list));
}

}  // namespace

ReduceOp parse_reduce_op(std::string_view op, c10::string_view s) {
  static constexpr std::pair<const char*, ReduceOp> kNames[] = {{"sum", ReduceOp::sum},
                                                                {"avg", ReduceOp::avg},
                                                                {"min", ReduceOp::min},
                                                                {"max", ReduceOp::max}};
  return parse_named(op, "op", s, kNames);
}

AllReduceAlgo parse_algo(std::string_view op, c10::string_view s) {
  static constexpr std::pair<const char*, AllReduceAlgo> kNames[] = {
      {"direct", AllReduceAlgo::direct},
      {"ring", AllReduceAlgo::ring},
      {"chain", AllReduceAlgo::chain}};
  return parse_named(op, "algo", s, kNames);
}

Mode parse_mode(std::string_view op, c10::string_view s) {
  static constexpr std::pair<const char*, Mode> kNames[] = {
      {"unfused", Mode::unfused}, {"scale_up", Mode::scale_up}, {"scale_out", Mode::scale_out}};
  return parse_named(op, "mode", s, kNames);
}

WireFormat parse_format(std::string_view op, c10::string_view s) {
  static constexpr std::pair<const char*, WireFormat> kNames[] = {
      {"none", WireFormat::none},
      {"f16", WireFormat::f16},
      {"bf16", WireFormat::bf16},
      {"fp8_e4m3", WireFormat::fp8_e4m3},
      {"fp8_e5m2", WireFormat::fp8_e5m2}};
  return parse_named(op, "wire format", s, kNames);
}

Overflow parse_overflow(std::string_view op, c10::string_view s) {
  static constexpr std::pair<const char*, Overflow> kNames[] = {{"saturate", Overflow::saturate},
                                                                {"ieee", Overflow::ieee}};
  return parse_named(op, "overflow", s, kNames);
}

PoolingMode parse_pooling(std::string_view op, c10::string_view s) {
  static constexpr std::pair<const char*, PoolingMode> kNames[] = {{"sum", PoolingMode::sum},
                                                                   {"mean", PoolingMode::mean}};
  return parse_named(op, "pooling", s, kNames);
}

CompressionOptions parse_wire(std::string_view op, c10::string_view format,
                              c10::string_view overflow, c10::string_view scaling,
                              std::int64_t block, bool pow2_scale, bool predivide) {
  static constexpr std::pair<const char*, Scaling> kScalings[] = {
      {"automatic", Scaling::automatic},
      {"none", Scaling::none},
      {"per_tensor", Scaling::per_tensor},
      {"per_block", Scaling::per_block}};
  CompressionOptions w;
  w.format = parse_format(op, format);
  w.overflow = parse_overflow(op, overflow);
  w.scaling = parse_named(op, "scaling", scaling, kScalings);
  w.block = block;
  w.pow2_scale = pow2_scale;
  w.predivide = predivide;
  return w;
}

std::vector<std::int64_t> to_vector(at::IntArrayRef a) { return {a.begin(), a.end()}; }

}  // namespace fusedcoll::torch_ext
