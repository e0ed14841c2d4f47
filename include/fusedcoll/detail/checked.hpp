#pragma once
// Checked size arithmetic, the one home of it: argument validation (detail/validate.hpp) and the
// tensor views' own constructors use it.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "fusedcoll/error.hpp"

namespace fusedcoll::detail {

// Checked size arithmetic. Every count, displacement and offset a caller gives that is later
// multiplied by an element size goes through these before use, so that a size no memory can have
// is `InvalidArgument` naming the field and value instead of a wrapped product (a bad_alloc, a
// misleading overlap, or a read from the buffer's start). `what` is a string or a callable that
// returns one, so that the name of an indexed field is only built when the check fails.

/// Throws the `InvalidArgument` of a size that does not fit in 64 bits ("what = a op b ...").
[[noreturn]] inline void throw_oversize(const std::string& what, std::int64_t a, const char* op,
                                        std::int64_t b) {
  throw InvalidArgument(make_string(what, " = ", a, " ", op, " ", b,
                                    " does not fit in 64 bits: no memory has that size"));
}

template <class What>
std::string name_of(const What& what) {
  if constexpr (std::is_invocable_v<const What&>)
    return std::string(what());
  else
    return std::string(what);
}

/// `a + b` for non-negative `a` and `b`.
template <class What>
std::int64_t checked_add(std::int64_t a, std::int64_t b, const What& what) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) [[unlikely]]
    throw_oversize(name_of(what), a, "+", b);
  return r;
}

/// `a * b` for non-negative `a` and `b`.
template <class What>
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const What& what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]]
    throw_oversize(name_of(what), a, "*", b);
  return r;
}

/// The bytes of `count` (non-negative) elements of `elem` bytes each: the one place where a
/// caller's element count becomes a byte size.
template <class What>
std::int64_t checked_bytes(std::int64_t count, std::size_t elem, const What& what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(count, static_cast<std::int64_t>(elem), &r)) [[unlikely]]
    throw_oversize(name_of(what) + " in bytes", count, "*", static_cast<std::int64_t>(elem));
  return r;
}

/// The sum of the non-negative entries of `v`.
template <class What>
std::int64_t checked_sum(std::span<const std::int64_t> v, const What& what) {
  std::int64_t s = 0;
  for (std::int64_t x : v) s = checked_add(s, x, what);
  return s;
}

}  // namespace fusedcoll::detail
