#pragma once
/// @file
/// The emulator's workgroup as kernel bodies see it: `WgTask` (the coroutine type of a body),
/// the awaitables of `wait_until` and `claim`, and `WgContext`, which is both the emulator's own
/// kernels' context (emu/runtime.hpp) and the `fusedcoll::Workgroup` of users' kernels
/// (fusedcoll/kernel.hpp). It is here, installed, because a user's kernel body is instantiated
/// over it in the user's translation unit; its methods are implemented in fusedcoll_emu.
/// Users never name it: they write `template <class Wg>`.
///
/// Memory model (docs/emulator.md, docs/kernels.md): a put is complete when it returns (a plain
/// copy); a signal is a release operation on the target slot and `wait_until` an acquire, so data
/// put before a signal is visible to whoever observed that signal. `fence`/`quiet` order nothing
/// further here, and the thread view is one thread.

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <utility>

#include "fusedcoll/kernel.hpp"
#include "fusedcoll/model.hpp"

namespace fusedcoll::emu {

using fusedcoll::Cmp;
using fusedcoll::SignalOp;

/// A symmetric allocation in bytes: the same id and size on every rank; each rank has its own
/// bytes. (`fusedcoll::Symmetric<T>` is the typed handle of users' kernels; same id.)
struct SymBuffer {
  int id = -1;
  std::size_t bytes = 0;
};

/// Signal slots per device. Slots hold monotonic 64-bit counters; ops never reset them but wait
/// for cumulative targets (`Rank::expect`), so a slot is reused every call with no reset race.
inline constexpr int kSlotsPerDevice = 1 << 16;

class WgContext;
namespace impl {
struct WgState;
}  // namespace impl

/// The coroutine type of a workgroup body: `WgTask body(WgContext& wg) { ...; co_await ...; }`.
class [[nodiscard]] WgTask {
 public:
  struct promise_type {
    impl::WgState* state = nullptr;  // set by the runtime before the first resume
    std::exception_ptr error;
    WgTask get_return_object() noexcept {
      return WgTask(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      void await_suspend(std::coroutine_handle<promise_type> h) noexcept;
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };

  WgTask() = default;
  explicit WgTask(std::coroutine_handle<promise_type> h) : handle_(h) {}
  WgTask(WgTask&& o) noexcept : handle_(std::exchange(o.handle_, {})) {}
  WgTask& operator=(WgTask&& o) noexcept {
    if (this != &o) {
      reset();
      handle_ = std::exchange(o.handle_, {});
    }
    return *this;
  }
  ~WgTask() { reset(); }
  std::coroutine_handle<promise_type> handle() const noexcept { return handle_; }

 private:
  void reset() noexcept {
    if (handle_) handle_.destroy();
    handle_ = {};
  }
  std::coroutine_handle<promise_type> handle_;
};

/// The awaitable of `wait_until`: suspends the workgroup (freeing its thread, keeping its
/// residency) until the slot satisfies the comparison, or throws `TimeoutError` when the world
/// aborts.
struct WaitAwaiter {
  impl::WgState* wg;
  int slot;
  Cmp cmp;
  std::uint64_t value;
  bool await_ready() const;
  bool await_suspend(std::coroutine_handle<> h);
  void await_resume() const;
};

/// The awaitable of `claim`: the next index of the kernel's work queue. On the wall clock it does
/// not suspend; in virtual time the workgroup suspends and claims when the driver resumes it, at
/// its compute unit's next free time, so claims happen in virtual-time order (docs/simulation.md,
/// "Tile claiming"). Throws `TimeoutError` when the world aborts.
struct ClaimAwaiter {
  impl::WgState* wg;
  bool await_ready() const;
  bool await_suspend(std::coroutine_handle<> h);
  std::int64_t await_resume() const;
};

/// What a workgroup can do. One per workgroup; valid for the life of its kernel.
class WgContext {
 public:
  /// The body's return type (`FC_KERNEL_BODY`).
  using Task = WgTask;

  explicit WgContext(impl::WgState* s) : s_(s) {}
  int rank() const noexcept;
  int world_size() const noexcept;
  /// This workgroup's index in the grid, and the grid size.
  int wg() const noexcept;
  int num_wgs() const noexcept;
  /// The thread view: a workgroup of the emulator is one thread.
  int thread_rank() const noexcept { return 0; }
  int num_threads() const noexcept { return 1; }
  void sync() noexcept {}

  // -------------------------------------------------------------------------------------------
  // The device API of users' kernels (fusedcoll/kernel.hpp, docs/kernels.md). Element ranges are
  // checked: a range outside the buffer throws InvalidArgument naming it.

  /// This rank's elements of `b`, for what the workgroup writes itself (staging, results).
  template <class T>
  T* local(Symmetric<T> b) const {
    return reinterpret_cast<T*>(local(bytes_of(b)));
  }
  /// This rank's elements `[first, first + count)` of `b`, which peers put: the mailbox read the
  /// protocol checker checks.
  template <class T>
  T* read(Symmetric<T> b, std::int64_t first, std::int64_t count) {
    check_range("read", b.id, b.count, first, count);
    return reinterpret_cast<T*>(read(bytes_of(b), first * sizeof(T), count * sizeof(T)));
  }
  template <class T>
  void put_nbi(int pe, Symmetric<T> dst, std::int64_t first, const T* src, std::int64_t count) {
    check_range("put_nbi", dst.id, dst.count, first, count);
    put(pe, bytes_of(dst), first * sizeof(T), src, count * sizeof(T));
  }
  /// `rows` puts of `cols` elements: row r from `src + r * src_ld` to `first + r * dst_ld`.
  template <class T>
  void put_rows_nbi(int pe, Symmetric<T> dst, std::int64_t first, std::int64_t dst_ld, const T* src,
                    std::int64_t src_ld, std::int64_t rows, std::int64_t cols) {
    if (rows <= 0) return;
    check_range("put_rows_nbi", dst.id, dst.count, first, (rows - 1) * dst_ld + cols);
    for (std::int64_t r = 0; r < rows; ++r)
      put(pe, bytes_of(dst), (first + r * dst_ld) * sizeof(T), src + r * src_ld, cols * sizeof(T));
  }
  void signal_op(int pe, Signal s, SignalOp op, std::uint64_t value) {
    signal(pe, s.slot, op, value);
  }
  template <class T>
  void put_signal_nbi(int pe, Symmetric<T> dst, std::int64_t first, const T* src,
                      std::int64_t count, Signal s, SignalOp op, std::uint64_t value) {
    put_nbi(pe, dst, first, src, count);
    signal(pe, s.slot, op, value);
  }
  WaitAwaiter wait_until(Signal s, Cmp cmp, std::uint64_t value) {
    return wait_until(s.slot, cmp, value);
  }
  std::uint64_t signal_fetch(Signal s) const { return signal_value(s.slot); }
  /// Adds `value` to this rank's `s` and returns the value before.
  std::uint64_t signal_fetch_add(Signal s, std::uint64_t value) {
    return add_local(s.slot, value) - value;
  }
  /// Runs `f` as a compute span of cost `cost` (a trace event; in virtual time it occupies this
  /// workgroup's compute unit for the model's price of `cost`).
  template <class F>
  void compute(const char* what, const Cost& cost, F&& f) {
    const auto start = span_start();
    static_cast<F&&>(f)();
    span_end(what, cost, start);
  }

  // -------------------------------------------------------------------------------------------
  // The emulator's own kernels (emu/): byte offsets, slot ids and zero-copy stores.

  /// This device's bytes of symmetric buffer `b`.
  std::byte* local(SymBuffer b) const;
  template <class T>
  T* local_as(SymBuffer b) const {
    return reinterpret_cast<T*>(local(b));
  }

  /// This device's bytes `[offset, offset + bytes)` of `b`, read as mailbox data that peers put
  /// (bounds-checked). Kernels read received data through this call, after waiting for its
  /// signal, so that every mailbox read is visible at one place. The bytes are this device's own:
  /// a kernel may fold into them in place.
  std::byte* read(SymBuffer b, std::size_t offset, std::size_t bytes);
  template <class T>
  T* read_as(SymBuffer b, std::size_t first, std::size_t count) {
    return reinterpret_cast<T*>(read(b, first * sizeof(T), count * sizeof(T)));
  }

  /// Copies `bytes` from `src` into `peer`'s copy of `dst` at `offset` (a one-sided put).
  void put(int peer, SymBuffer dst, std::size_t offset, const void* src, std::size_t bytes);
  /// Zero-copy store into memory `peer` exposed to this kernel (e.g. its final output, whose
  /// address the op exchanged at entry): `dst` is an address in `peer`'s memory.
  void store(int peer, void* dst, const void* src, std::size_t bytes);
  /// Updates slot `slot` of `peer` with release semantics and wakes its satisfied waiters.
  void signal(int peer, int slot, SignalOp op, std::uint64_t value);
  /// `put` then `signal`: the signal is observed only after the data is in place.
  void put_signal(int peer, SymBuffer dst, std::size_t offset, const void* src, std::size_t bytes,
                  int slot, SignalOp op, std::uint64_t value);
  /// `co_await wg.wait_until(slot, Cmp::ge, target)`: acquire-waits on this device's slot.
  WaitAwaiter wait_until(int slot, Cmp cmp, std::uint64_t value);
  /// `i = co_await wg.claim()`: claims the next unclaimed index (0, 1, 2, ...) of this kernel's
  /// work queue, one counter per launch shared by its workgroups (a persistent kernel's atomicAdd
  /// on a global tile counter). A workgroup that finishes a tile claims the next, so tiles of
  /// unequal cost spread as a GPU's dispatcher would spread workgroups: the next one goes to the
  /// first free compute unit. Indices past the kernel's work mean it is all claimed.
  ClaimAwaiter claim();
  /// Current value of this device's slot (acquire).
  std::uint64_t signal_value(int slot) const;
  /// Orders this workgroup's earlier puts before its later ones (complete on return here).
  void fence() noexcept {}
  /// Completes this workgroup's outstanding puts (complete on return here).
  void quiet() noexcept {}
  /// Runs `f` as a named compute span doing `work` (the cost model's description of the kernel
  /// calls in `f`: a trace event when tracing is on; in virtual time it occupies this workgroup's
  /// compute unit for the model's cost of `work`, docs/simulation.md). Data movement a kernel does
  /// itself (unpacking, copying out of scratch) is a span too, so that it is costed.
  void compute(const char* what, std::initializer_list<model::Work> work,
               const std::function<void()>& f);
  /// Atomically adds `value` to this device's own slot and returns the new value, waking its
  /// waiters (a device-memory atomic: the scale-out done-mask of a staging slice).
  std::uint64_t add_local(int slot, std::uint64_t value);

 private:
  template <class T>
  static SymBuffer bytes_of(Symmetric<T> b) {
    return SymBuffer{b.id, static_cast<std::size_t>(b.count < 0 ? 0 : b.count) * sizeof(T)};
  }
  /// Throws InvalidArgument unless `[first, first + count)` lies in `[0, size)`.
  void check_range(const char* what, int id, std::int64_t size, std::int64_t first,
                   std::int64_t count) const;
  /// A compute span's start (the clock is read only when tracing) and end (trace event, price).
  std::chrono::steady_clock::time_point span_start() const;
  void span_end(const char* what, const Cost& cost, std::chrono::steady_clock::time_point start);

  impl::WgState* s_;
};

static_assert(Workgroup<WgContext>);

}  // namespace fusedcoll::emu
