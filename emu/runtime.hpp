#pragma once
// The emulator's runtime, as kernel authors see it: workgroup coroutines (`WgTask`), their
// device-side primitives (`WgContext`: put / store / signal / wait_until / fence / quiet), and the
// host side of one rank (`Rank`: symmetric allocation, signal slots, kernel launch, rendezvous).
//
// Memory model (docs/emulator.md): a put or store is complete when it returns (plain copies);
// `signal` is a release operation on the target slot and `wait_until` an acquire, so data put
// before a signal is visible to whoever observed that signal. `fence`/`quiet` exist for kernels
// to state intent; with every put complete on return they order nothing further.

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fusedcoll/emu.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/model.hpp"

namespace fusedcoll::emu {

/// Comparison of `wait_until`.
enum class Cmp : std::uint8_t { eq, ne, gt, ge, lt, le };
/// Update of `signal`.
enum class SignalOp : std::uint8_t { set, add };

const char* to_string(Cmp c) noexcept;

/// A symmetric allocation: the same id and size on every rank; each rank has its own bytes.
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
  explicit WgContext(impl::WgState* s) : s_(s) {}
  int rank() const noexcept;
  int world_size() const noexcept;
  /// This workgroup's index in the grid, and the grid size.
  int wg() const noexcept;
  int num_wgs() const noexcept;

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
  impl::WgState* s_;
};

/// A kernel body: builds the coroutine of one workgroup.
using KernelBody = std::function<WgTask(WgContext&)>;

/// The host side of one rank: what an op's launcher uses. Every method that says "collective"
/// must be called by all ranks in the same order with matching arguments; a mismatch throws
/// `InvalidArgument` on every rank, and a rank that never arrives makes the others throw
/// `TimeoutError` naming it.
class Rank {
 public:
  Rank(World::State& world, int rank);
  int rank() const noexcept { return rank_; }
  int size() const noexcept;
  int compute_units() const noexcept;
  int max_resident_wgs() const noexcept;
  /// Whether the world runs in virtual time: its devices are the preset's (docs/simulation.md).
  bool virtual_time() const noexcept;

  /// Collective: every rank posts `payload` under `key`; returns all ranks' payloads (index =
  /// rank). The pointers stay valid only while their ranks stay inside the current call.
  std::vector<const void*> exchange(const std::string& key, const void* payload);
  /// Collective barrier.
  void barrier(const std::string& key);
  /// Collective: a symmetric buffer of `bytes` bytes on every rank, zero-filled. Buffers live
  /// as long as the world; `scratch` reuses one per `tag`, growing it when needed.
  SymBuffer alloc(std::size_t bytes, const std::string& tag);
  SymBuffer scratch(const std::string& tag, std::size_t bytes);
  /// `n` consecutive signal slots reserved for `key`; reused by later calls with the same key
  /// when large enough. Not a meeting: the ids match across ranks because every rank reserves
  /// in the same order (its op calls matched at `enter`).
  int slots(const std::string& key, int n);
  /// Host side of the cumulative-target protocol: this call will receive `count` more updates
  /// (adds of 1) on this rank's `slot`; returns the value to wait for.
  std::uint64_t expect(int slot, std::uint64_t count);
  /// The cumulative target `expect` last returned for `slot` (this call's final value).
  std::uint64_t expected(int slot) const { return expected_[slot]; }

  /// Launches a kernel of `num_wgs` workgroups on this rank's device and returns when all have
  /// finished, rethrowing the first workgroup exception. At most `max_resident_wgs` run at once.
  void launch(const std::string& name, int num_wgs, const KernelBody& body);

  /// Marks what this rank's host thread is doing, for timeout reports.
  void set_activity(const std::string& what);

  /// Starts a new op call (every op's `enter` does): for protocol checking, mailbox bytes put by
  /// earlier calls are stale from here on.
  void begin_op();

 private:
  World::State& world_;
  int rank_;
  std::vector<std::uint64_t> expected_;
  std::uint64_t op_epoch_ = 0;
  std::map<std::string, SymBuffer> scratch_;
};

}  // namespace fusedcoll::emu
