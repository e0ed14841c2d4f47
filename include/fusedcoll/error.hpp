#pragma once
/// @file
/// The one exception hierarchy of fusedcoll and the `FC_ENFORCE*` checking macros.
///
/// Every error the library reports is a `fusedcoll::Error` (a `std::runtime_error`) carrying an
/// `ErrorCode`; the subclasses exist so callers can catch one kind. Library code never calls
/// `exit` or `abort`. See docs/errors.md for which conditions are user errors and which are
/// broken invariants.

#include <cstdint>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace fusedcoll {

/// What went wrong, coarsely. `ok` is used only by `Status`.
enum class ErrorCode : std::uint8_t {
  ok = 0,
  invalid_argument,  ///< The caller passed something the operation's definition forbids.
  unsupported,       ///< Well-formed, but this backend or build cannot do it (e.g. a dtype).
  timeout,           ///< A wait expired; the message names who waited for what.
  backend,           ///< A foreign API (MPI, HIP/CUDA, the OS) failed.
  internal,          ///< A fusedcoll invariant broke: a bug in fusedcoll.
  protocol,          ///< A kernel broke the put/signal/wait protocol (emulator checking mode).
};

/// Lower-case name of `code`, e.g. "invalid_argument".
constexpr const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::backend: return "backend";
    case ErrorCode::internal: return "internal";
    case ErrorCode::protocol: return "protocol";
  }
  return "unknown";
}

/// Base of every exception thrown by fusedcoll.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  /// The error's kind.
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

/// A precondition of an operation does not hold; the message names the offending value.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(ErrorCode::invalid_argument, what) {}
};

/// The request is well-formed but not supported by this backend or build.
class UnsupportedError : public Error {
 public:
  explicit UnsupportedError(const std::string& what) : Error(ErrorCode::unsupported, what) {}
};

/// A wait expired. The message lists every blocked waiter and what it expected.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(ErrorCode::timeout, what) {}
};

/// A call into a foreign API (MPI, HIP/CUDA, the OS) failed.
class BackendError : public Error {
 public:
  explicit BackendError(const std::string& what) : Error(ErrorCode::backend, what) {}
};

/// An internal invariant of fusedcoll broke. Always a fusedcoll bug; please report it.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& what) : Error(ErrorCode::internal, what) {}
};

/// A kernel broke the communication protocol: it read mailbox bytes before observing the signal
/// that publishes them, or two puts of one call wrote the same destination bytes. Raised by the
/// emulator's protocol checking mode; the message names both workgroups, the bytes and the slot.
class ProtocolError : public Error {
 public:
  explicit ProtocolError(const std::string& what) : Error(ErrorCode::protocol, what) {}
};

/// A new exception of the class `code` names, carrying `what` (InternalError for `internal` and
/// `ok`): how an error crosses a thread or process boundary as a value and is raised again.
inline std::exception_ptr make_error(ErrorCode code, const std::string& what) {
  switch (code) {
    case ErrorCode::invalid_argument: return std::make_exception_ptr(InvalidArgument(what));
    case ErrorCode::unsupported: return std::make_exception_ptr(UnsupportedError(what));
    case ErrorCode::timeout: return std::make_exception_ptr(TimeoutError(what));
    case ErrorCode::backend: return std::make_exception_ptr(BackendError(what));
    case ErrorCode::protocol: return std::make_exception_ptr(ProtocolError(what));
    case ErrorCode::internal:
    case ErrorCode::ok: break;
  }
  return std::make_exception_ptr(InternalError(what));
}

/// Result of a non-throwing capability check (`can_implement`).
struct Status {
  ErrorCode code = ErrorCode::ok;
  std::string message;
  bool ok() const noexcept { return code == ErrorCode::ok; }
  explicit operator bool() const noexcept { return ok(); }
};

namespace detail {

/// Concatenates any streamable values; the empty call yields "".
template <class... Args>
std::string make_string(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);  // a comma fold: the empty call must not leave a bare `os;` behind
  return os.str();
}

/// Builds "file:line: what [: message]" and throws `E`. Out of line in spirit: kept tiny so that
/// the macros below cost one compare and one cold call at each check site.
template <class E>
[[noreturn]] void throw_at(const char* file, int line, const std::string& what,
                           const std::string& message) {
  std::string text = make_string(file, ":", line, ": ", what);
  if (!message.empty()) text += make_string(": ", message);
  throw E(text);
}

template <class A, class B>
std::string describe_pair(const char* expr, const A& a, const B& b) {
  return make_string("check failed: ", expr, " (", a, " vs ", b, ")");
}

}  // namespace detail
}  // namespace fusedcoll

/// Throws `fusedcoll::InvalidArgument` naming file:line, the condition and the message when
/// `cond` is false. For checks on caller input.
#define FC_ENFORCE(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) [[unlikely]]                                                                   \
      ::fusedcoll::detail::throw_at<::fusedcoll::InvalidArgument>(                              \
          __FILE__, __LINE__, "check failed: " #cond,                                           \
          ::fusedcoll::detail::make_string(__VA_ARGS__));                                       \
  } while (false)

#define FC_ENFORCE_CMP_IMPL_(op, a, b, ...)                                                     \
  do {                                                                                          \
    const auto& fc_a_ = (a);                                                                    \
    const auto& fc_b_ = (b);                                                                    \
    if (!(fc_a_ op fc_b_)) [[unlikely]]                                                         \
      ::fusedcoll::detail::throw_at<::fusedcoll::InvalidArgument>(                              \
          __FILE__, __LINE__, ::fusedcoll::detail::describe_pair(#a " " #op " " #b, fc_a_, fc_b_), \
          ::fusedcoll::detail::make_string(__VA_ARGS__));                                       \
  } while (false)

/// `FC_ENFORCE_EQ(a, b, ...)` etc.: like `FC_ENFORCE`, and the message carries both values.
#define FC_ENFORCE_EQ(a, b, ...) FC_ENFORCE_CMP_IMPL_(==, a, b, __VA_ARGS__)
#define FC_ENFORCE_NE(a, b, ...) FC_ENFORCE_CMP_IMPL_(!=, a, b, __VA_ARGS__)
#define FC_ENFORCE_LT(a, b, ...) FC_ENFORCE_CMP_IMPL_(<, a, b, __VA_ARGS__)
#define FC_ENFORCE_LE(a, b, ...) FC_ENFORCE_CMP_IMPL_(<=, a, b, __VA_ARGS__)
#define FC_ENFORCE_GT(a, b, ...) FC_ENFORCE_CMP_IMPL_(>, a, b, __VA_ARGS__)
#define FC_ENFORCE_GE(a, b, ...) FC_ENFORCE_CMP_IMPL_(>=, a, b, __VA_ARGS__)

/// Throws `fusedcoll::InternalError` when an invariant of fusedcoll itself is broken.
#define FC_CHECK_INTERNAL(cond, ...)                                                            \
  do {                                                                                          \
    if (!(cond)) [[unlikely]]                                                                   \
      ::fusedcoll::detail::throw_at<::fusedcoll::InternalError>(                                \
          __FILE__, __LINE__, "internal invariant failed: " #cond,                              \
          ::fusedcoll::detail::make_string(__VA_ARGS__));                                       \
  } while (false)

/// Debug-only invariant for hot loops; compiled out with NDEBUG.
#ifdef NDEBUG
#define FC_DASSERT(cond, ...) \
  do {                        \
  } while (false)
#else
#define FC_DASSERT(cond, ...) FC_CHECK_INTERNAL(cond, __VA_ARGS__)
#endif
