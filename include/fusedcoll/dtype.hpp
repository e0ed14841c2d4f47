#pragma once
/// @file
/// Element types that fusedcoll buffers can hold.

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "fusedcoll/error.hpp"

namespace fusedcoll {

/// Element type of a buffer. The numeric values are part of the wire format of later backends
/// (they travel in config fingerprints), so never reorder them; only append.
enum class DType : std::uint8_t {
  f32 = 0,      ///< IEEE binary32.
  f16 = 1,      ///< IEEE binary16.
  bf16 = 2,     ///< bfloat16: the top 16 bits of a binary32.
  f8_e4m3 = 3,  ///< OCP FP8 E4M3 (bias 7, max 448, no infinities).
  f8_e5m2 = 4,  ///< OCP FP8 E5M2 (bias 15, max 57344, IEEE inf/NaN).
  i32 = 5,      ///< Two's-complement 32-bit integer.
  i64 = 6,      ///< Two's-complement 64-bit integer.
};

/// Number of `DType` values; a `DType` whose value is `>= kNumDTypes` is invalid.
inline constexpr int kNumDTypes = 7;

/// True for the seven named values; false for anything cast from another integer.
constexpr bool is_valid(DType t) noexcept { return static_cast<int>(t) < kNumDTypes; }

/// Short name ("f32", "bf16", "f8_e4m3", ...), or "invalid" for a value outside the enum.
constexpr const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8_e4m3: return "f8_e4m3";
    case DType::f8_e5m2: return "f8_e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "invalid";
}

/// Size of one element in bytes. Throws `InvalidArgument` for an invalid value.
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f8_e4m3: return 1;
    case DType::f8_e5m2: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  throw InvalidArgument(detail::make_string("unknown dtype value ", static_cast<int>(t)));
}

/// True for the floating-point types.
constexpr bool is_floating(DType t) noexcept {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f8_e4m3 ||
         t == DType::f8_e5m2;
}

/// Prints the name, or "DType(<n>)" for an invalid value so that the number is not lost.
inline std::ostream& operator<<(std::ostream& os, DType t) {
  if (is_valid(t)) return os << dtype_name(t);
  return os << "DType(" << static_cast<int>(t) << ")";
}

/// Parses a name printed by `dtype_name`; throws `InvalidArgument` for anything else.
inline DType parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    if (name == dtype_name(t)) return t;
  }
  throw InvalidArgument(detail::make_string("unknown dtype name '", name,
                                            "' (expected f32, f16, bf16, f8_e4m3, f8_e5m2, i32 or i64)"));
}

/// Throws `InvalidArgument` naming `what` when `t` is not one of the named values.
inline void enforce_valid(DType t, std::string_view what) {
  if (!is_valid(t))
    throw InvalidArgument(detail::make_string(what, ": unknown dtype value ", static_cast<int>(t)));
}

/// The `DType` of a C++ element type, for the types that have a native one.
template <class T>
inline constexpr DType dtype_of = [] {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return DType::f32;
  else if constexpr (std::is_same_v<U, std::int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<U, std::int64_t>) return DType::i64;
  else static_assert(sizeof(T) == 0, "no native DType for this type");
}();

}  // namespace fusedcoll
