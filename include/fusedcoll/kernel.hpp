#pragma once
/// @file
/// The device API of fused kernels written by users (docs/kernels.md, normative): what the body
/// of a workgroup sees. One body, written once against a workgroup type `Wg`, runs on the
/// emulator (every debugging aid: fuzzing, the protocol checker, hang reports, traces, virtual
/// time) and on the GPU backend (HIP and CUDA), with no backend `#ifdef` in it:
///
/// ```
/// struct Shift {                                     // every rank sends its block to rank + 1
///   static constexpr const char* name = "shift";
///   struct Params { fusedcoll::Symmetric<float> in, box; fusedcoll::Signals ready;
///                   std::uint64_t target; std::int64_t n; };
///   template <class Wg>
///   FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
///     const int to = (wg.rank() + 1) % wg.world_size();
///     if (wg.wg() == 0) wg.put_signal_nbi(to, p.box, 0, wg.local(p.in), p.n, p.ready[0],
///                                         fusedcoll::SignalOp::add, 1);
///     FC_WAIT_UNTIL(wg, p.ready[0], fusedcoll::Cmp::ge, p.target);
///     const float* got = wg.read(p.box, 0, p.n);     // the one door for received data
///     ...
///     FC_RETURN;
///   }
/// };
/// ```
///
/// Names and ordering follow NVSHMEM / ROC_SHMEM (put_nbi, signal_op, put_signal_nbi,
/// wait_until, fence, quiet). Every call on a workgroup except its ids and thread view is
/// workgroup-collective: all threads of the workgroup make it, with the same arguments, like
/// NVSHMEM's `nvshmemx_*_block` calls. On the emulator a workgroup is one thread.
///
/// This header is plain C++20 and compiles as host code (g++, clang) and as device code (nvcc,
/// hipcc): handles and parameters have one layout on every backend, so a kernel's `Params` is
/// one type in a program that links several backends. The host side (symmetric allocation,
/// signals, wait targets, launch) is `fusedcoll/kernel_launch.hpp`.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__) || defined(__HIPCC__)
/// Set when a GPU compiler (nvcc, hipcc) compiles this translation unit, host and device passes
/// alike: kernel bodies are then `__device__` functions, not coroutines.
#define FUSEDCOLL_GPU_COMPILER 1
#define FC_HOST_DEVICE __host__ __device__
#define FC_DEVICE __device__
#else
/// `__host__ __device__` under a GPU compiler, nothing otherwise: a function both host code and
/// kernel bodies call (a tile's coordinates).
#define FC_HOST_DEVICE
/// `__device__` under a GPU compiler, nothing otherwise: a function only kernel bodies call,
/// on every backend (a tile's arithmetic written with the thread view).
#define FC_DEVICE
#endif

/// Declares a kernel's body over workgroup type `Wg` (a static member function returning the
/// emulator's coroutine type, or `void` as a GPU's `__device__` function). Write, inside the
/// kernel's struct, `template <class Wg> FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {...}`.
#define FC_KERNEL_BODY(Wg) static FC_DEVICE typename Wg::Task

#if defined(FUSEDCOLL_GPU_COMPILER)
#define FC_WAIT_UNTIL(wg, signal, cmp, value)               \
  do {                                                      \
    if (!(wg).wait_until((signal), (cmp), (value))) return; \
  } while (false)
#define FC_CLAIM(wg) ((wg).claim())
#define FC_RETURN return
#else
/// Waits until this rank's `signal` compares `cmp` to `value` (an acquire). On the emulator the
/// workgroup suspends without holding a thread (`co_await`); on a GPU its threads spin. A wait
/// that times out ends the kernel: the launch throws `TimeoutError` naming rank, workgroup,
/// signal and value. A statement; only in the body itself (`run`), not in functions it calls.
#define FC_WAIT_UNTIL(wg, signal, cmp, value)           \
  do {                                                  \
    co_await (wg).wait_until((signal), (cmp), (value)); \
  } while (false)
/// The next index (0, 1, 2, ...) of this launch's work queue on this rank, shared by its
/// workgroups: a persistent kernel's tile counter. An expression of type `std::int64_t`.
#define FC_CLAIM(wg) (co_await (wg).claim())
/// Ends the body. Every body ends with `FC_RETURN;` (on the emulator it is `co_return`, which
/// makes a body that neither waits nor claims a coroutine too).
#define FC_RETURN co_return
#endif

namespace fusedcoll {

/// A symmetric buffer: `count` elements of `T` on every rank, the same handle on all of them
/// (allocated collectively by `fusedcoll::symmetric`). A plain value: the workgroup resolves it
/// to this rank's or a peer's memory.
template <class T>
struct Symmetric {
  static_assert(std::is_trivially_copyable_v<T>, "symmetric buffers hold trivially copyable T");
  int id = -1;
  std::int64_t count = 0;
};

/// One signal: a 64-bit counter on every rank, updated by peers (`signal_op`) and waited on by
/// its own rank (`wait_until`). Counters are never reset: waits use cumulative targets
/// (`fusedcoll::expect`).
struct Signal {
  int slot = -1;
};

/// `count` named signals (`fusedcoll::signals`), the same on every rank; reports name a waiter's
/// signal as `'name'[i]`.
struct Signals {
  int base = -1;
  int count = 0;
  /// Signal `i`, for `0 <= i < count` (not checked here; a slot outside every reservation shows
  /// unnamed in reports).
  FC_HOST_DEVICE constexpr Signal operator[](int i) const { return Signal{base + i}; }
};

/// The comparison of `wait_until`.
enum class Cmp : std::uint8_t { eq, ne, gt, ge, lt, le };
/// The update of `signal_op`: store the value, or add it.
enum class SignalOp : std::uint8_t { set, add };

/// "==", ">=", ...: how reports print a comparison.
constexpr const char* to_string(Cmp c) noexcept {
  switch (c) {
    case Cmp::eq:
      return "==";
    case Cmp::ne:
      return "!=";
    case Cmp::gt:
      return ">";
    case Cmp::ge:
      return ">=";
    case Cmp::lt:
      return "<";
    case Cmp::le:
      return "<=";
  }
  return "?";
}

/// Whether `current` satisfies `cmp value`.
FC_HOST_DEVICE constexpr bool satisfies(std::uint64_t current, Cmp cmp, std::uint64_t value) {
  switch (cmp) {
    case Cmp::eq:
      return current == value;
    case Cmp::ne:
      return current != value;
    case Cmp::gt:
      return current > value;
    case Cmp::ge:
      return current >= value;
    case Cmp::lt:
      return current < value;
    case Cmp::le:
      return current <= value;
  }
  return false;
}

/// What a compute span does, in the cost model's terms (include/fusedcoll/model.hpp): virtual
/// time prices each term on the preset's device; the GPU ignores it. A sum of up to four terms:
/// `cost::copy(bytes) + cost::reduce(n)`.
struct CostTerm {
  enum class Kind : std::uint8_t { gemm, gemv, reduce, copy };
  Kind kind = Kind::copy;
  std::int64_t a = 0, b = 0, c = 0;
  bool first_touch = false;
};
struct Cost {
  static constexpr int kMaxTerms = 4;
  CostTerm terms[kMaxTerms] = {};
  int count = 0;
  /// Both costs' terms (at most kMaxTerms in all; further terms are dropped).
  FC_HOST_DEVICE constexpr Cost operator+(const Cost& o) const {
    Cost s = *this;
    for (int i = 0; i < o.count && s.count < kMaxTerms; ++i) s.terms[s.count++] = o.terms[i];
    return s;
  }
};

/// Cost terms, each the model's description of one shared-kernel call (model.hpp's functions of
/// the same names price them).
namespace cost {
FC_HOST_DEVICE constexpr Cost of(CostTerm t) {
  Cost c;
  c.terms[0] = t;
  c.count = 1;
  return c;
}
/// Nothing to price (a span that only names a phase in the trace).
FC_HOST_DEVICE constexpr Cost none() { return Cost{}; }
/// A `rows x cols` GEMM tile over inner dimension `k`; `first_touch`: its B panel is not in cache.
FC_HOST_DEVICE constexpr Cost gemm(std::int64_t rows, std::int64_t cols, std::int64_t k,
                                   bool first_touch = false) {
  return of({CostTerm::Kind::gemm, rows, cols, k, first_touch});
}
/// `n` GEMV output columns for `m` input rows, inner dimension `k` (streams `n x k` weights).
FC_HOST_DEVICE constexpr Cost gemv(std::int64_t m, std::int64_t k, std::int64_t n) {
  return of({CostTerm::Kind::gemv, m, k, n, false});
}
/// An element-wise fold of `count` elements of `elem_bytes` (reads two, writes one).
FC_HOST_DEVICE constexpr Cost reduce(std::int64_t count, std::int64_t elem_bytes = 4) {
  return of({CostTerm::Kind::reduce, count, elem_bytes, 0, false});
}
/// A copy of `bytes` bytes.
FC_HOST_DEVICE constexpr Cost copy(std::int64_t bytes) {
  return of({CostTerm::Kind::copy, bytes, 0, 0, false});
}
}  // namespace cost

/// The members every backend's workgroup type has (docs/kernels.md, "The workgroup"), apart
/// from `wait_until` and `claim`, whose results the macros above consume (an awaitable on the
/// emulator, a value on a GPU). Kernel bodies take the workgroup as a template parameter; this
/// concept documents it and lets a backend check its type (`static_assert(Workgroup<T>)`).
template <class Wg>
concept Workgroup = requires(Wg& wg, const Wg& cwg, Symmetric<float> buf, Signal s, float* dst,
                             const float* src, std::int64_t i) {
  typename Wg::Task;
  { cwg.rank() } -> std::same_as<int>;
  { cwg.world_size() } -> std::same_as<int>;
  { cwg.wg() } -> std::same_as<int>;
  { cwg.num_wgs() } -> std::same_as<int>;
  { cwg.thread_rank() } -> std::same_as<int>;
  { cwg.num_threads() } -> std::same_as<int>;
  wg.sync();
  { wg.local(buf) } -> std::same_as<float*>;
  { wg.read(buf, i, i) } -> std::same_as<float*>;
  wg.put_nbi(0, buf, i, src, i);
  wg.put_rows_nbi(0, buf, i, i, src, i, i, i);
  wg.signal_op(0, s, SignalOp::add, std::uint64_t{1});
  wg.put_signal_nbi(0, buf, i, src, i, s, SignalOp::add, std::uint64_t{1});
  { wg.signal_fetch(s) } -> std::same_as<std::uint64_t>;
  { wg.signal_fetch_add(s, std::uint64_t{1}) } -> std::same_as<std::uint64_t>;
  wg.fence();
  wg.quiet();
  wg.compute("span", cost::none(), [] {});
  (void)dst;
};

}  // namespace fusedcoll
