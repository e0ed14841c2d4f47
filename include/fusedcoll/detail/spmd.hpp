#pragma once
/// @file
/// The SPMD runner of the in-process worlds (emu::World::run, gpu::World::run): `fn(rank)` on P
/// host threads, and which failure to report. When one rank fails, the world aborts and its peers
/// fail too, only because of it; those secondary errors carry a type mark, so the runner reports
/// the root cause without reading messages.

#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fusedcoll/error.hpp"

namespace fusedcoll::detail {

/// The mark of a secondary error: thrown by a rank only because another part of the run had
/// already failed (the world aborted, a collective was abandoned). A mixin beside the
/// fusedcoll::Error class callers catch (see SecondaryError).
class Secondary {
 public:
  virtual ~Secondary() = default;
};

/// The fusedcoll::Error class `E`, marked secondary.
template <class E>
class SecondaryError final : public E, public Secondary {
 public:
  using E::E;
};

/// True when `e` carries the secondary mark.
inline bool is_secondary(const std::exception_ptr& e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const Secondary&) {
    return true;
  } catch (...) {
    return false;
  }
}

/// True when `err` carries the secondary mark.
inline bool is_secondary(const Error& err) noexcept {
  return dynamic_cast<const Secondary*>(&err) != nullptr;
}

/// make_error(code, what), marked secondary when `secondary` is true: how a secondary error
/// crosses a thread as a new object and keeps its mark.
inline std::exception_ptr make_error(ErrorCode code, const std::string& what, bool secondary) {
  if (!secondary) return fusedcoll::make_error(code, what);
  switch (code) {
    case ErrorCode::invalid_argument:
      return std::make_exception_ptr(SecondaryError<InvalidArgument>(what));
    case ErrorCode::unsupported:
      return std::make_exception_ptr(SecondaryError<UnsupportedError>(what));
    case ErrorCode::timeout:
      return std::make_exception_ptr(SecondaryError<TimeoutError>(what));
    case ErrorCode::backend:
      return std::make_exception_ptr(SecondaryError<BackendError>(what));
    case ErrorCode::protocol:
      return std::make_exception_ptr(SecondaryError<ProtocolError>(what));
    case ErrorCode::internal:
    case ErrorCode::ok:
      break;
  }
  return std::make_exception_ptr(SecondaryError<InternalError>(what));
}

/// A rank's failure: its rank and what it threw.
struct SpmdFailure {
  int rank = -1;
  std::exception_ptr error;
};

/// Runs `fn(rank)` for every rank in [0, P) on its own thread and joins them all. When `fn`
/// throws, `on_failure(rank, error)` runs on that thread, after the failure was recorded; it must
/// make the peers stop waiting (abort the world). Returns the failure to report: the first one
/// caught that is not secondary, else the first one; none when every rank returned.
inline std::optional<SpmdFailure> run_spmd(
    int P, const std::function<void(int)>& fn,
    const std::function<void(int, std::exception_ptr)>& on_failure) {
  std::mutex mu;
  std::vector<SpmdFailure> failures;  // in the order caught
  std::vector<bool> secondary;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        const std::exception_ptr error = std::current_exception();
        const bool is_sec = is_secondary(error);
        {
          std::lock_guard lock(mu);
          failures.push_back({r, error});
          secondary.push_back(is_sec);
        }
        on_failure(r, error);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failures.empty()) return std::nullopt;
  for (std::size_t i = 0; i < failures.size(); ++i)
    if (!secondary[i]) return failures[i];
  return failures.front();
}

}  // namespace fusedcoll::detail
