#pragma once
/// @file
/// Internals of the PyTorch extension (`libfusedcoll_torch.so`, docs/pytorch.md): which
/// communicator a call runs on, tensor checks and conversions, and how fusedcoll's exceptions
/// become the Python exceptions PyTorch raises. Every operator of the `fusedcoll` torch library
/// is a catch-all kernel: it sees tensors of any device and rejects what it cannot take itself,
/// with its own message.

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/communicator.hpp"
#include "fusedcoll/compression.hpp"
#include "fusedcoll/dtype.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/tensor.hpp"

namespace fusedcoll::torch_ext {

// --- The session: which communicator a call runs on (session.cpp) ----------------------------

/// Runs `body` with the calling thread's communicator and returns when this rank's part is done:
/// inside `fusedcoll.run`, on the emulated rank the thread stands for (the body runs on that
/// rank's host thread of the `emu::World`, so a failure aborts the other ranks' waits); otherwise
/// on the process's MPI communicator. Throws when neither exists. Calls on the MPI communicator
/// are serialised within the process.
void with_communicator(std::string_view op, const std::function<void(Communicator&)>& body);

/// Rank and size of the calling thread's communicator (as `with_communicator` finds it).
int current_rank();
int current_size();

// --- Errors ----------------------------------------------------------------------------------

/// The tag the Python package reads to raise fusedcoll's own exception classes:
/// "fusedcoll <code>: <message>", code as `to_string(ErrorCode)` or "not_initialized".
std::string tagged(std::string_view code, std::string_view message);

/// `TypeError` / `ValueError` in Python, "fusedcoll.<op>: <message>".
[[noreturn]] void type_error(std::string_view op, const std::string& message);
[[noreturn]] void value_error(std::string_view op, const std::string& message);

/// Calls `f` and rethrows fusedcoll's exceptions as the c10 errors PyTorch turns into Python
/// exceptions: InvalidArgument -> ValueError, UnsupportedError -> NotImplementedError, the rest
/// -> RuntimeError; every message tagged (see `tagged`) and otherwise fusedcoll's own.
[[noreturn]] void rethrow_translated(std::exception_ptr e);

template <class F>
auto translate(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    rethrow_translated(std::current_exception());
  }
}

// --- Tensors ---------------------------------------------------------------------------------

/// Throws TypeError unless `t` is a defined, strided CPU tensor, and ValueError unless it is
/// contiguous. `what` names the argument in the message.
void check_tensor(std::string_view op, std::string_view what, const at::Tensor& t);

/// The fusedcoll dtype of `t`'s scalar type, or TypeError naming `allowed`.
DType exact_dtype(std::string_view op, std::string_view what, const at::Tensor& t,
                  std::string_view allowed);
/// For collectives that move bytes without reading them: the exact dtype where there is one,
/// else a dtype of the same element size (1, 2, 4 or 8 bytes); TypeError for other sizes.
DType moved_dtype(std::string_view op, std::string_view what, const at::Tensor& t);
/// The dtype of a reduction's data: float32, int32 or int64, else TypeError.
DType reduced_dtype(std::string_view op, std::string_view what, const at::Tensor& t);
/// Requires `t` to hold f32 (TypeError otherwise) and returns it.
void require_f32(std::string_view op, std::string_view what, const at::Tensor& t);

/// Python's name of a scalar type ("torch.float32").
std::string torch_name(c10::ScalarType s);

/// Contiguous views of a checked tensor.
ConstTensorView const_view(const at::Tensor& t, DType dtype);
TensorView mutable_view(const at::Tensor& t, DType dtype);

/// A new CPU tensor of `shape` with `like`'s dtype.
at::Tensor empty_like_dtype(const at::Tensor& like, at::IntArrayRef shape);

// --- Parsing the string arguments ------------------------------------------------------------

ReduceOp parse_reduce_op(std::string_view op, c10::string_view s);
AllReduceAlgo parse_algo(std::string_view op, c10::string_view s);
Mode parse_mode(std::string_view op, c10::string_view s);
WireFormat parse_format(std::string_view op, c10::string_view s);
Overflow parse_overflow(std::string_view op, c10::string_view s);
PoolingMode parse_pooling(std::string_view op, c10::string_view s);

/// The wire options of the collectives' schema arguments (kWireSchema).
CompressionOptions parse_wire(std::string_view op, c10::string_view format,
                              c10::string_view overflow, c10::string_view scaling,
                              std::int64_t block, bool pow2_scale, bool predivide);

/// The wire arguments every compressed collective's schema ends with.
inline constexpr const char* kWireSchema =
    "str wire=\"none\", str overflow=\"saturate\", str scaling=\"automatic\", int block=256, "
    "bool pow2_scale=False, bool predivide=False";

std::vector<std::int64_t> to_vector(at::IntArrayRef a);

}  // namespace fusedcoll::torch_ext
