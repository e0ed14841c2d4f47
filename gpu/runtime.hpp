#pragma once
// The GPU backend's runtime: device memory, the signal slots with their host-side cumulative
// targets, the timeout record, occupancy-sized launches, and the block-level primitives the fused
// kernels are written in (put = block copy / direct stores, signal, wait, done-mask). Compiled
// only by hipcc or nvcc (gpu/portability.hpp). docs/gpu.md describes the model.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fusedcoll/detail/schedule.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/kernel.hpp"
#include "fusedcoll/tensor.hpp"
#include "gpu/portability.hpp"
#include "gpu/proxy_queue.hpp"

/// Throws `fusedcoll::BackendError` naming file:line, the call and the vendor's error string when
/// a HIP/CUDA runtime call fails.
#define FC_CHECK_GPU(call)                                                                      \
  do {                                                                                          \
    const gpuError_t fc_gpu_err_ = (call);                                                      \
    if (fc_gpu_err_ != gpuSuccess) [[unlikely]]                                                 \
      ::fusedcoll::detail::throw_at<::fusedcoll::BackendError>(                                 \
          __FILE__, __LINE__, FC_GPU_VENDOR " call failed: " #call,                             \
          gpuGetErrorString(fc_gpu_err_));                                                      \
  } while (false)

namespace fusedcoll::gpu {

/// Threads per block of every fusedcoll kernel: 8 warps / 4 wavefronts, enough to cover a 64-wide
/// tile row with coalesced accesses, small enough that several blocks fit on each SM / CU.
inline constexpr int kThreads = 256;

/// What a wait that timed out leaves for the host: the first one wins, the others only see
/// `flag` and leave the kernel.
struct TimeoutRecord {
  unsigned int flag;  // 0: none; 1: written
  int rank;
  int block;
  int slot;
  std::uint64_t expected;
  std::uint64_t observed;
  int cmp;  // the wait's fusedcoll::Cmp (`>=` for the operators' waits)
};

/// Process mode's routes (gpu/symmetric.hpp's process::Route, as the device reads them).
inline constexpr std::uint8_t kRouteSelf = 0, kRouteIpc = 1, kRouteProxy = 2;

/// What a kernel needs to signal and wait: every rank's slot array and the timeout record; in
/// process mode also how each peer is reached (docs/gpu.md, "Process mode").
struct SyncView {
  std::uint64_t* slots = nullptr;  // single mode: [P][slots_per_rank], cumulative, never reset
  int slots_per_rank = 0;
  TimeoutRecord* record = nullptr;
  std::uint64_t timeout_ticks = 0;  // in port::device_clock() ticks
  // Process mode; null / 0 in the single-GPU mode.
  std::uint64_t* const* peer_slots = nullptr;  // [P]: rank's slots, IPC-mapped (null: proxied)
  const std::uint8_t* route = nullptr;         // [P]: kRouteSelf / kRouteIpc / kRouteProxy
  const std::uint64_t* inbound = nullptr;      // [slots_per_rank]: what the proxy landed (pinned)
  proxy::QueueView queue{};                    // the proxy's request queue
  int system = 0;  // 1: peers are other processes: system-scope fences and atomics
};

/// A wait that could not post into the proxy's queue records this slot (the queue stayed full).
inline constexpr int kQueueFullSlot = -1;

// ---------------------------------------------------------------------------------------------
// Device side: every function here is called by all threads of a block (it contains barriers).

/// The address of `rank`'s slot `slot` (its IPC mapping in process mode; never a proxied peer's).
__device__ inline std::uint64_t* slot_ptr(const SyncView& s, int rank, int slot) {
  if (s.peer_slots != nullptr) return s.peer_slots[rank] + slot;
  return s.slots + static_cast<std::size_t>(rank) * static_cast<std::size_t>(s.slots_per_rank) +
         static_cast<std::size_t>(slot);
}

/// Whether `peer` is reached through the host proxy (process mode only).
__device__ inline bool proxied(const SyncView& s, int peer) {
  return s.route != nullptr && s.route[peer] == kRouteProxy;
}

/// The proxy's producers on the device: a device-scope ticket counter, system-scope loads of the
/// host-side tail, and a system fence before the record's `seq` so the host sees its fields
/// first (gpu/proxy_queue.hpp).
struct DeviceQueueOps {
  __device__ static std::uint64_t fetch_add(std::uint64_t* p, std::uint64_t v) {
    return static_cast<std::uint64_t>(
        atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v)));
  }
  __device__ static std::uint64_t load_acquire(const std::uint64_t* p) {
    return port::atomic_load_acquire<port::Scope::system>(const_cast<std::uint64_t*>(p));
  }
  __device__ static void publish(std::uint64_t* seq, std::uint64_t v) {
    port::fence<port::Scope::system>();
    *reinterpret_cast<volatile std::uint64_t*>(seq) = v;
  }
  __device__ static std::uint64_t clock() { return port::device_clock(); }
  __device__ static void pause() { port::pause(); }
};

/// Thread 0 of a block: posts `r` into the proxy's queue; a queue that stays full past the
/// timeout fills the timeout record (slot kQueueFullSlot) so the call fails naming it.
__device__ inline void post_record(const SyncView& s, int me, const proxy::Record& r) {
  if (proxy::post<DeviceQueueOps>(s.queue, r)) return;
  if (port::atomic_cas(&s.record->flag, 0u, 2u) == 0u) {
    s.record->rank = me;
    s.record->block = static_cast<int>(blockIdx.x);
    s.record->slot = kQueueFullSlot;
    s.record->expected = 0;
    s.record->observed = 0;
    port::fence<port::Scope::system>();
    *reinterpret_cast<volatile unsigned int*>(&s.record->flag) = 1u;
  }
}

/// A put to a proxied peer (the device side of the put half of the public API's put_nbi): the
/// block's earlier writes of [src, src + bytes) in this process's memory travel to `peer`'s
/// symmetric buffer `buffer` at byte `offset` once the proxy takes the record. The source must
/// stay unchanged until the call ends (staging slices, a shadow of the peer's output). Called by
/// every thread of the block; a no-op for IPC peers (their bytes were stored in place).
__device__ inline void block_put(const SyncView& s, int me, int peer, int buffer,
                                 std::uint64_t offset, const void* src, std::uint64_t bytes) {
  if (!proxied(s, peer)) return;
  __syncthreads();
  if (threadIdx.x == 0)
    post_record(s, me,
                proxy::make_put(peer, buffer, offset, reinterpret_cast<std::uint64_t>(src), bytes,
                                static_cast<int>(blockIdx.x)));
}

/// Adds `v` to `peer`'s slot once every thread of the block has finished its earlier writes (put
/// before signal): the barrier collects the block's writes at thread 0, whose fence is cumulative
/// over them, and the release-add publishes them to any block whose acquire sees the new value.
/// In process mode the add is system-scoped (IPC peers are other processes), or, for a proxied
/// peer, a signal record posted after the block's put records (the proxy keeps their order).
/// `op` = set stores `v` instead (a release store: the public device API's SignalOp::set).
template <port::Scope S = port::Scope::device>
__device__ inline void block_signal(const SyncView& s, int peer, int slot, std::uint64_t v,
                                    int me = -1, SignalOp op = SignalOp::add) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s.system != 0) {
      port::fence<port::Scope::system>();
      if (proxied(s, peer))
        post_record(
            s, me,
            proxy::make_signal(peer, slot, v, static_cast<int>(blockIdx.x),
                               op == SignalOp::set ? proxy::SignalOp::set : proxy::SignalOp::add));
      else if (op == SignalOp::set)
        port::atomic_store_release<port::Scope::system>(slot_ptr(s, peer, slot), v);
      else
        port::atomic_add_release<port::Scope::system>(slot_ptr(s, peer, slot), v);
    } else {
      port::fence<S>();
      if (op == SignalOp::set)
        port::atomic_store_release<S>(slot_ptr(s, peer, slot), v);
      else
        port::atomic_add_release<S>(slot_ptr(s, peer, slot), v);
    }
  }
}

/// This rank's slot as a waiter sees it: the device slot plus, in process mode, what the proxy
/// landed on it (a separate counter in pinned host memory, so that the host never has to add
/// atomically into device memory).
template <port::Scope S>
__device__ inline std::uint64_t slot_value(const SyncView& s, std::uint64_t* p, int slot,
                                           bool acquire) {
  std::uint64_t v = acquire ? port::atomic_load_acquire<S>(p) : port::atomic_load_relaxed<S>(p);
  if (s.inbound != nullptr) {
    auto* q = const_cast<std::uint64_t*>(s.inbound) + slot;
    v += acquire ? port::atomic_load_acquire<port::Scope::system>(q)
                 : port::atomic_load_relaxed<port::Scope::system>(q);
  }
  return v;
}

/// Waits until this rank's slot `slot` satisfies `cmp value` (the operators wait for `>=` a
/// cumulative target computed by the host). Returns false on every thread when the wait timed out
/// (the record names it) or another block's wait did (the kernel is being abandoned); callers then
/// return from the kernel.
template <port::Scope S = port::Scope::device>
__device__ inline bool block_wait_until(const SyncView& s, int me, int slot, Cmp cmp,
                                        std::uint64_t value) {
  if constexpr (S == port::Scope::device) {
    if (s.system != 0) {  // peers in other processes: system scope throughout
      SyncView sys = s;
      sys.system = 0;
      return block_wait_until<port::Scope::system>(sys, me, slot, cmp, value);
    }
  }
  __shared__ int ok;
  if (threadIdx.x == 0) {
    int result = 1;
    std::uint64_t* p = slot_ptr(s, me, slot);
    std::uint64_t v = slot_value<S>(s, p, slot, true);
    if (!satisfies(v, cmp, value)) {
      const std::uint64_t t0 = port::device_clock();
      volatile unsigned int* flag = &s.record->flag;
      // Polls with relaxed loads: an acquire load per poll invalidates the SM's L1 every
      // iteration under the blocks still working there; the acquire below orders what follows.
      while (!satisfies(v = slot_value<S>(s, p, slot, false), cmp, value)) {
        if (*flag != 0u) {
          result = 0;
          break;
        }
        if (port::device_clock() - t0 > s.timeout_ticks) {
          if (port::atomic_cas(&s.record->flag, 0u, 2u) == 0u) {
            s.record->rank = me;
            s.record->block = static_cast<int>(blockIdx.x);
            s.record->slot = slot;
            s.record->expected = value;
            s.record->observed = v;
            s.record->cmp = static_cast<int>(cmp);
            port::fence<port::Scope::system>();
            *flag = 1u;
          }
          result = 0;
          break;
        }
        port::pause();
      }
      if (result != 0) v = slot_value<S>(s, p, slot, true);
    }
    port::fence<S>();  // later reads of the block (after the barrier) see what the signal published
    ok = result;
  }
  __syncthreads();
  const bool result = ok != 0;
  __syncthreads();  // nobody rewrites `ok` (a following wait) before every thread has read it
  return result;
}

/// Waits until this rank's slot `slot` reaches `target` (`block_wait_until` with `>=`).
template <port::Scope S = port::Scope::device>
__device__ inline bool block_wait(const SyncView& s, int me, int slot, std::uint64_t target) {
  return block_wait_until<S>(s, me, slot, Cmp::ge, target);
}

/// Adds `v` to a local counter once every thread of the block has finished its earlier writes,
/// and returns the value before on every thread. Acquire and release: the block whose add brings
/// a done-counter to its target sees what every earlier adder wrote before its add. `landed`, when
/// given, is what the proxy landed on the same slot (process mode), added to the value returned.
template <port::Scope S = port::Scope::device>
__device__ inline std::uint64_t block_fetch_add(std::uint64_t* counter, std::uint64_t v,
                                                const std::uint64_t* landed = nullptr) {
  __shared__ unsigned long long before;
  __syncthreads();
  if (threadIdx.x == 0) {
    port::fence<S>();
    before = port::atomic_add_acq_rel<S>(counter, v);
    if (landed != nullptr)
      before += port::atomic_load_acquire<port::Scope::system>(const_cast<std::uint64_t*>(landed));
    port::fence<S>();
  }
  __syncthreads();
  const std::uint64_t result = before;
  __syncthreads();  // nobody rewrites `before` before every thread has read it
  return result;
}

/// Adds 1 to a local done-counter and tells every thread of the block whether this block's add
/// reached `target` (it finished the last tile of a slice). The acquire half makes the other
/// blocks' tiles of the slice visible to the last block, which then copies the slice.
template <port::Scope S = port::Scope::device>
__device__ inline bool block_done_is_last(std::uint64_t* counter, std::uint64_t target) {
  return block_fetch_add<S>(counter, 1) + 1 == target;
}

/// Claims the next index (0, 1, 2, ...) of a persistent kernel's work queue: one counter per
/// rank and launch, zeroed before the launch (the emulator's `WgContext::claim`). A block that
/// finishes an item takes the next, so items of unequal cost spread over the blocks as the
/// hardware dispatcher would spread them; which block runs an item changes no bit.
__device__ inline std::int64_t block_claim(unsigned long long* counter) {
  __shared__ long long claimed;
  __syncthreads();  // every thread has read the previous claim
  if (threadIdx.x == 0) claimed = static_cast<long long>(atomicAdd(counter, 1ull));
  __syncthreads();
  return static_cast<std::int64_t>(claimed);
}

/// put: copies `n` floats with the whole block (the payload of a put_signal). Four independent
/// 16-byte loads per thread are in flight before their stores (a plain loop keeps one 4-byte
/// load per thread in flight, as dst may alias src: ~1 KB per memory round trip per block).
/// Bits move unchanged (no arithmetic), so the layout of the loads changes no result.
__device__ inline void block_copy(float* __restrict__ dst, const float* __restrict__ src,
                                  std::int64_t n) {
  std::int64_t head = 0;
  if (((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) & 15u) == 0) {
    const std::int64_t n4 = n / 4, step = blockDim.x;
    auto* d4 = reinterpret_cast<float4*>(dst);
    const auto* s4 = reinterpret_cast<const float4*>(src);
    std::int64_t i = threadIdx.x;
    for (; i + 3 * step < n4; i += 4 * step) {
      const float4 a = s4[i], b = s4[i + step], c = s4[i + 2 * step], d = s4[i + 3 * step];
      d4[i] = a;
      d4[i + step] = b;
      d4[i + 2 * step] = c;
      d4[i + 3 * step] = d;
    }
    for (; i < n4; i += step) d4[i] = s4[i];
    head = n4 * 4;
  }
  for (std::int64_t i = head + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

/// Floats per piece of a staged slice's put. A slice completes only when its last tile does, so
/// one block copying it whole is a serial tail at one block's bandwidth (scale_out embedding at
/// B = 2048: 4 MiB per slice, ~5 ms on an H100); the pieces are work items every block claims.
inline constexpr std::int64_t kPutPiece = 8192;

/// Floats [off, off + len) of the staged slice for destination `q`: one piece of its put.
struct PutPiece {
  int q;
  std::int64_t off, len;
};

/// Appends the pieces of a `floats`-long slice for `q` and returns how many: at least one, so
/// that an empty slice still signals its arrival.
inline std::int64_t append_pieces(std::vector<PutPiece>& out, int q, std::int64_t floats) {
  std::int64_t off = 0, n = 0;
  do {
    const std::int64_t len = floats - off < kPutPiece ? floats - off : kPutPiece;
    out.push_back({q, off, len});
    off += len;
    ++n;
  } while (off < floats);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Host side.

/// Owns one device allocation. Never null once allocated (zero bytes still allocate a little),
/// so kernels can take its address for empty shapes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const noexcept { return ptr_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// The device memory of one operator call: inputs uploaded, outputs and scratch allocated, all
/// freed when the call ends.
class Arena {
 public:
  /// Uploads `v` and returns its device address.
  template <class T>
  T* upload(const std::vector<T>& v) {
    DeviceBuffer& b = buffers_.emplace_back(v.size() * sizeof(T));
    if (!v.empty()) FC_CHECK_GPU(gpuMemcpy(b.get(), v.data(), v.size() * sizeof(T), gpuMemcpyHostToDevice));
    return b.as<T>();
  }
  /// `n` elements of uninitialised device memory.
  template <class T>
  T* alloc(std::int64_t n) {
    return buffers_.emplace_back(static_cast<std::size_t>(n) * sizeof(T)).template as<T>();
  }
  /// `n` elements of zeroed device memory (tile counters, reset per call).
  template <class T>
  T* alloc_zeroed(std::int64_t n) {
    T* p = alloc<T>(n);
    FC_CHECK_GPU(gpuMemset(p, 0, static_cast<std::size_t>(n) * sizeof(T)));
    return p;
  }
  /// `n` floats filled with the poison pattern (fusedcoll::kPoisonBits), so that an element no
  /// kernel wrote never passes for a result.
  float* alloc_poisoned(std::int64_t n);

 private:
  std::vector<DeviceBuffer> buffers_;
};

/// `n` rounded up to 256 bytes: the start of the next region carved from one allocation.
inline std::size_t align_up(std::size_t n) { return (n + 255) & ~std::size_t{255}; }

/// Fills `n` device floats with the poison pattern (fusedcoll::kPoisonBits).
void poison_device(float* p, std::int64_t n);

/// Copies the rows of a view into a contiguous vector (`rows` x `cols` elements of `T`).
template <class T>
std::vector<T> pack(const ConstTensorView& v, std::int64_t rows, std::int64_t cols) {
  std::vector<T> out(static_cast<std::size_t>(rows * cols));
  if (rows == 0 || cols == 0) return out;
  const auto* base = static_cast<const T*>(v.data());
  const std::int64_t ld = v.rank() >= 2 ? v.stride(0) : cols;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[static_cast<std::size_t>(r * cols + c)] = base[r * ld + c];
  return out;
}

/// Index arrays (i32 or i64) widened to i64: the kernels take one index type.
std::vector<std::int64_t> pack_indices(const ConstTensorView& v);

/// Downloads a contiguous device `[rows, cols]` f32 array into the rows of a host view whose row
/// stride is `ld` (padding between rows is left untouched).
void download_rows(const float* dev, std::int64_t rows, std::int64_t cols, float* host,
                   std::int64_t ld);

/// One rank's remote-first order (rank+1, rank+2, ..., the rank itself last): the one every
/// backend's plans use.
using fusedcoll::detail::remote_first;

/// A named range of slots, for timeout messages.
struct SlotName {
  int base = 0;
  int count = 0;
  std::string name;
};

class Process;  // gpu/process.hpp: process mode's peers, heap and proxy
/// Owns a Process where its type is incomplete (builds without process mode never make one).
struct ProcessDeleter {
  void operator()(Process* p) const noexcept;
};
using ProcessPtr = std::unique_ptr<Process, ProcessDeleter>;

/// The per-World device state: one stream, the slot arrays of all ranks and their host-side
/// cumulative counts, the timeout record, and launch sizing. In process mode (`process` given)
/// it is one rank's: the slots are its own, shared with its peers by `process`.
class Context {
 public:
  Context(int world_size, int device, double timeout_s, ProcessPtr process = nullptr);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int world_size() const noexcept { return P_; }
  /// Process mode: this process's rank; -1 in the single-GPU mode (every rank is here).
  int me() const noexcept { return me_; }
  /// Process mode's state (null in the single-GPU mode).
  Process* process() const noexcept { return process_.get(); }
  /// Process mode: the symmetric heap's current id (a put record's buffer); -1 in the single mode.
  int heap_id() const noexcept;
  int sms() const noexcept { return sms_; }
  int device() const noexcept { return device_; }
  const std::string& device_name() const noexcept { return name_; }
  gpuStream_t stream() const noexcept { return stream_; }
  SyncView view() const noexcept;
  static constexpr int kSlotsPerRank = 1 << 16;

  /// Starts an operator call: forgets the previous call's slot names.
  void begin_call(const std::string& op);
  /// Reserves `count` slot ids (the same on every rank) named `name`; throws UnsupportedError when
  /// the call needs more than kSlotsPerRank.
  int slots(const std::string& name, std::int64_t count);
  /// Reserves `count` slot ids named `name` for users' kernels (fusedcoll/kernel_launch.hpp's
  /// `signals`, gpu/kernels.cpp), kept for the World's life: from the top of the slot space down,
  /// so the operators' per-call slots (from the bottom) never meet them. The same name with no
  /// larger count returns the same slots. Throws UnsupportedError when the two ranges would meet.
  int kernel_slots(const std::string& name, int count);
  /// The cumulative value `rank`'s `slot` reaches once it received `count` more updates in this
  /// call: the target of the call's wait (and, for done-masks, of the last adder).
  std::uint64_t expect(int rank, int slot, std::uint64_t count);
  /// Current cumulative count of `rank`'s `slot` (before this call's updates were expected).
  std::uint64_t issued(int rank, int slot) const;

  /// Blocks per rank for a persistent kernel over at most `work` items per rank: the most that
  /// can be resident together for all P ranks of one launch (occupancy x SMs / P), at least 1
  /// and at most `work`. Throws UnsupportedError when not even one block per rank fits.
  template <class Kernel>
  int blocks_per_rank(Kernel kernel, std::int64_t work) {
    int per_sm = 0;
    FC_CHECK_GPU(gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
    return fit_blocks(per_sm, work);
  }
  int fit_blocks(int per_sm, std::int64_t work) const;

  /// Brackets the kernels of one call with events (their time is `last_kernel_ms`).
  void start_timing();
  void stop_timing();
  /// Waits for the stream, then turns a timeout record into TimeoutError (after resetting every
  /// slot, so the World stays usable) and a launch or execution error into BackendError.
  void finish(const std::string& op);
  double last_kernel_ms() const noexcept { return last_ms_; }
  /// Adds `ms` to last_kernel_ms: a call whose kernels were timed in two parts (process mode's
  /// unfused GemvAllReduce: the GEMV, then the AllReduce's own call).
  void add_kernel_ms(double ms) noexcept { last_ms_ += ms; }

 private:
  void reset_slots();
  ProcessPtr process_;
  int me_ = -1;
  int sharing_ = 1;  // ranks whose kernels share this device at once
  int P_ = 1;
  int device_ = 0;
  int sms_ = 1;
  std::string name_;
  double timeout_s_ = 30;
  gpuStream_t stream_{};
  gpuEvent_t start_{}, stop_{};
  bool timing_ = false;
  double last_ms_ = 0;
  DeviceBuffer slots_;
  DeviceBuffer record_;
  std::vector<std::uint64_t> issued_;
  std::vector<SlotName> names_;
  int next_slot_ = 0;
  std::vector<SlotName> kernel_names_;  // users' kernels' signals, [kernel_base_, kSlotsPerRank)
  int kernel_base_ = kSlotsPerRank;
  std::string op_;
};

}  // namespace fusedcoll::gpu
