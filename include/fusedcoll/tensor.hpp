#pragma once
/// @file
/// Non-owning, trivially copyable views of strided tensors (pointer, shape, strides, dtype).
///
/// Views never allocate and never own: the caller keeps the memory alive for as long as an
/// operation uses it. Strides are in elements, not bytes. Operations in fusedcoll require a unit
/// innermost stride (rows may be padded: a row stride larger than the row length is fine), which
/// each op's `check` enforces.

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <type_traits>

#include "fusedcoll/detail/checked.hpp"
#include "fusedcoll/dtype.hpp"
#include "fusedcoll/error.hpp"

namespace fusedcoll {

/// Largest rank a view can have; the ops need at most 3.
inline constexpr int kMaxTensorRank = 4;

/// A view over `data` with element type `dtype`. `Void` is `void` (mutable) or `const void`.
template <class Void>
class BasicTensorView {
  static_assert(std::is_same_v<std::remove_cv_t<Void>, void>);

 public:
  /// The empty view: no data, rank 0, dtype f32. `empty()` is true.
  BasicTensorView() = default;

  /// A contiguous (row-major) view. Throws `InvalidArgument` for a negative dimension or a rank
  /// above `kMaxTensorRank`.
  BasicTensorView(Void* data, DType dtype, std::initializer_list<std::int64_t> shape)
      : BasicTensorView(data, dtype, std::span<const std::int64_t>(shape.begin(), shape.size())) {}

  /// A contiguous (row-major) view with the shape given as a span.
  BasicTensorView(Void* data, DType dtype, std::span<const std::int64_t> shape)
      : data_(data), dtype_(dtype), rank_(static_cast<int>(shape.size())) {
    FC_ENFORCE_LE(shape.size(), static_cast<std::size_t>(kMaxTensorRank), "tensor rank too large");
    std::int64_t stride = 1;
    for (int d = rank_ - 1; d >= 0; --d) {
      FC_ENFORCE_GE(shape[d], 0, "negative dimension ", d);
      shape_[d] = shape[d];
      strides_[d] = stride;
      stride = detail::checked_mul(stride, shape[d] > 0 ? shape[d] : 1, [d] {
        return detail::make_string("contiguous tensor elements up to dimension ", d);
      });
    }
  }

  /// A strided view. Strides are in elements and must be non-negative.
  BasicTensorView(Void* data, DType dtype, std::span<const std::int64_t> shape,
                  std::span<const std::int64_t> strides)
      : data_(data), dtype_(dtype), rank_(static_cast<int>(shape.size())) {
    FC_ENFORCE_LE(shape.size(), static_cast<std::size_t>(kMaxTensorRank), "tensor rank too large");
    FC_ENFORCE_EQ(shape.size(), strides.size(), "shape and strides must have the same length");
    for (int d = 0; d < rank_; ++d) {
      FC_ENFORCE_GE(shape[d], 0, "negative dimension ", d);
      FC_ENFORCE_GE(strides[d], 0, "negative stride in dimension ", d);
      shape_[d] = shape[d];
      strides_[d] = strides[d];
    }
  }

  /// A mutable view converts implicitly to a const view.
  template <class Other,
            class = std::enable_if_t<std::is_same_v<Void, const void> && std::is_same_v<Other, void>>>
  BasicTensorView(const BasicTensorView<Other>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()), dtype_(other.dtype()), rank_(other.rank()) {
    for (int d = 0; d < rank_; ++d) {
      shape_[d] = other.size(d);
      strides_[d] = other.stride(d);
    }
  }

  Void* data() const noexcept { return data_; }
  DType dtype() const noexcept { return dtype_; }
  int rank() const noexcept { return rank_; }
  /// Extent of dimension `d`; `d` must be `< rank()`.
  std::int64_t size(int d) const noexcept { return shape_[static_cast<std::size_t>(d)]; }
  /// Stride of dimension `d` in elements.
  std::int64_t stride(int d) const noexcept { return strides_[static_cast<std::size_t>(d)]; }
  std::span<const std::int64_t> shape() const noexcept { return {shape_.data(), static_cast<std::size_t>(rank_)}; }
  std::span<const std::int64_t> strides() const noexcept { return {strides_.data(), static_cast<std::size_t>(rank_)}; }

  /// Product of the extents (1 for rank 0 with data, 0 for the default-constructed view).
  std::int64_t numel() const noexcept {
    if (rank_ == 0) return data_ == nullptr ? 0 : 1;
    std::int64_t n = 1;
    for (int d = 0; d < rank_; ++d) n *= shape_[d];
    return n;
  }
  /// True when the view has no elements.
  bool empty() const noexcept { return numel() == 0; }

  /// True when the elements are densely packed in row-major order (extent-1 dims ignored).
  bool is_contiguous() const noexcept {
    std::int64_t expect = 1;
    for (int d = rank_ - 1; d >= 0; --d) {
      if (shape_[d] != 1 && strides_[d] != expect) return false;
      expect *= shape_[d];
    }
    return true;
  }

  /// The data as `T*` (const-qualified for a const view). Throws `InvalidArgument` when `T`
  /// does not match `dtype()`.
  template <class T>
  auto data_as() const {
    FC_ENFORCE_EQ(dtype_, dtype_of<T>, "tensor dtype does not match the requested element type");
    if constexpr (std::is_const_v<Void>) return static_cast<const T*>(data_);
    else return static_cast<T*>(data_);
  }

 private:
  Void* data_ = nullptr;
  DType dtype_ = DType::f32;
  int rank_ = 0;
  std::array<std::int64_t, kMaxTensorRank> shape_{};
  std::array<std::int64_t, kMaxTensorRank> strides_{};
};

/// A view whose elements may be written.
using TensorView = BasicTensorView<void>;
/// A read-only view.
using ConstTensorView = BasicTensorView<const void>;

/// Prints e.g. "f32[4, 8] strides [8, 1]"; used in error messages.
template <class Void>
std::ostream& operator<<(std::ostream& os, const BasicTensorView<Void>& t) {
  os << t.dtype() << "[";
  for (int d = 0; d < t.rank(); ++d) os << (d ? ", " : "") << t.size(d);
  os << "]";
  if (!t.is_contiguous()) {
    os << " strides [";
    for (int d = 0; d < t.rank(); ++d) os << (d ? ", " : "") << t.stride(d);
    os << "]";
  }
  return os;
}

}  // namespace fusedcoll
