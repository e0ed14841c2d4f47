#pragma once
// Shared pieces of argument validation, used by ref/ and by every backend's launcher.

#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <type_traits>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/detail/checked.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/tensor.hpp"

namespace fusedcoll::detail {

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
