#pragma once
// Shared pieces of argument validation, used by ref/ and by every backend's launcher.

#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <type_traits>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/tensor.hpp"

namespace fusedcoll::detail {

// Checked size arithmetic. Every count, displacement and offset a caller gives that is later
// multiplied by an element size goes through these before use, so that a size no memory can have
// is `InvalidArgument` naming the field and value instead of a wrapped product (a bad_alloc, a
// misleading overlap, or a read from the buffer's start). `what` is a string or a callable that
// returns one, so that the name of an indexed field is only built when the check fails.

/// Throws the `InvalidArgument` of a size that does not fit in 64 bits ("what = a op b ...").
[[noreturn]] void throw_oversize(const std::string& what, std::int64_t a, const char* op,
                                 std::int64_t b);

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

/// Throws unless `0 <= rank < world_size`.
void check_world(int rank, int world_size);

/// Throws unless `mode` is one of `Mode`'s enumerators. Every backend's fused-operator entry
/// point calls it first, before its call meets the other ranks.
void check_mode(Mode mode);

/// Throws unless `t` is an f32 `[rows, cols]` matrix with unit inner stride, non-overlapping rows
/// and a non-null pointer when it has elements. `name` goes into the message.
void check_matrix(const ConstTensorView& t, const std::string& name, std::int64_t rows,
                  std::int64_t cols);

/// The same for a writable `[d0, d1, d2]` f32 tensor.
void check_output3(const TensorView& t, const std::string& name, std::int64_t d0, std::int64_t d1,
                   std::int64_t d2);

/// Throws unless the memory spanned by `output` is disjoint from that of `input` (views with no
/// elements never overlap). `what` names the pair in the message.
void check_disjoint(const ConstTensorView& output, const ConstTensorView& input,
                    const std::string& what);

/// Runs a throwing check and turns its outcome into a `Status`.
template <class F>
Status status_of(F&& f) noexcept {
  try {
    f();
    return {};
  } catch (const Error& e) {
    return {e.code(), e.what()};
  } catch (const std::exception& e) {
    return {ErrorCode::internal, e.what()};
  }
}

/// Checks every pair of a world's calls for agreement (`check_consistent`, driven by
/// detail/agreement.hpp), `call(r)` being rank r's, in the same order everywhere, so that every
/// rank reports the same mismatch. The one pairwise loop of every backend.
template <class Call>
void check_all_agree(int world_size, Call&& call) {
  for (int a = 0; a < world_size; ++a)
    for (int b = a + 1; b < world_size; ++b) check_consistent(call(a), a, call(b), b);
}

/// Validates a whole world of calls (index = rank): each call on its own, then every pair for
/// agreement, so that a mismatch is reported before any data moves.
template <class Args>
void check_world_calls(std::span<const Args> ranks) {
  enforce_env();
  FC_ENFORCE(!ranks.empty(), "a world needs at least one rank");
  const int world_size = static_cast<int>(ranks.size());
  for (int r = 0; r < world_size; ++r) check(ranks[r], r, world_size);
  check_all_agree(world_size, [&](int r) -> const Args& { return ranks[r]; });
}

}  // namespace fusedcoll::detail
