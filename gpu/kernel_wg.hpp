#pragma once
// The GPU's workgroup of the public device API (fusedcoll/kernel.hpp; docs/kernels.md, "On the
// GPU"): `DeviceWg`, a block of kThreads threads whose calls map onto gpu/runtime.hpp's block
// primitives, and `kernel_entry<K>`, the `__global__` function that runs a body `K::run` over it.
// The operators' ported kernels (gpu/gemv_allreduce.cpp) and users' registered kernels
// (gpu/kernel_register.hpp) launch through the same entry, in both placements:
//
// - single-GPU multi-rank mode: one grid for all P ranks, blockIdx.y = rank; every rank's copy of
//   a symmetric buffer is a plain device pointer of the same GPU; device-scope atomics.
// - process mode: one grid per process, its rank in the view; a peer's copy is its IPC mapping,
//   or for a proxied peer this rank's shadow of it, whose bytes then leave as put records
//   (block_put) ahead of the signal records (block_signal); system-scope fences and atomics.
//
// Ordering, call by call (every call is made by all threads of the block, the API's
// workgroup-collective rule):
// - put_nbi: a barrier (the block's writes of `src` are done), the copy by every thread (16-byte
//   loads and stores where both ends allow, block_copy), and for a proxied peer one put record
//   from the shadow. The source may be reused on return: its bytes are in the destination or the
//   shadow.
// - signal_op: block_signal: a barrier, thread 0's fence at the scope (cumulative over the block's
//   stores, which the barrier made visible to it), then a release add or store on the peer's slot,
//   or a signal record queued behind the block's put records.
// - wait_until: block_wait_until: thread 0 polls relaxed, then an acquire load and a fence; the
//   barrier hands what the signal published to every thread. A timeout fills the record and
//   returns false everywhere (FC_WAIT_UNTIL then returns from the body).
// - fence / quiet: every thread fences at the scope, then a barrier: the block's stores to IPC or
//   same-GPU peers are performed before any later put or signal; records to proxied peers keep
//   their queue order, and their sources were copied at put_nbi.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "fusedcoll/kernel.hpp"
#include "gpu/runtime.hpp"

namespace fusedcoll::gpu {

/// How a proxied put names its destination: the peer's allocation id (a put record's `buffer`)
/// and the byte offset of this symmetric buffer inside it. Process mode only.
struct BufferRoute {
  int proxy_id = -1;
  std::uint64_t offset = 0;
};

/// Everything a launch's blocks need besides their `Params`: where every rank's copy of every
/// symmetric buffer of the launch is, the work-queue counters, and the signal view.
struct KernelView {
  int P = 1;
  /// Process mode: this process's rank (its grid is (g, 1)); -1 in the single-GPU mode, where a
  /// block's rank is blockIdx.y.
  int me = -1;
  int num_buffers = 0;
  /// [P][num_buffers]: rank q's copy of buffer b as this launch reaches it (single mode: q's own
  /// allocation on this GPU; process mode: this rank's own, an IPC mapping, or the shadow).
  void* const* bases = nullptr;
  /// [num_buffers], process mode only (null otherwise).
  const BufferRoute* routes = nullptr;
  /// [P] in the single mode, [1] in process mode: the launch's work-queue counters, zeroed.
  unsigned long long* claims = nullptr;
  SyncView sync;
};

/// The `fusedcoll::Workgroup` of a GPU block. Made by `kernel_entry` from its view; valid for the
/// kernel's life.
class DeviceWg {
 public:
  using Task = void;

  __device__ explicit DeviceWg(const KernelView& v)
      : v_(v), me_(v.me >= 0 ? v.me : static_cast<int>(blockIdx.y)) {}

  __device__ int rank() const { return me_; }
  __device__ int world_size() const { return v_.P; }
  __device__ int wg() const { return static_cast<int>(blockIdx.x); }
  __device__ int num_wgs() const { return static_cast<int>(gridDim.x); }
  __device__ int thread_rank() const { return static_cast<int>(threadIdx.x); }
  __device__ int num_threads() const { return static_cast<int>(blockDim.x); }
  __device__ void sync() { __syncthreads(); }

  template <class T>
  __device__ T* local(Symmetric<T> b) const {
    return at(me_, b);
  }
  template <class T>
  __device__ T* read(Symmetric<T> b, std::int64_t first, std::int64_t) const {
    return at(me_, b) + first;
  }

  template <class T>
  __device__ void put_nbi(int pe, Symmetric<T> dst, std::int64_t first, const T* src,
                          std::int64_t count) {
    __syncthreads();  // every thread's writes of `src` are done
    T* d = at(pe, dst) + first;
    if (d != src) copy(d, src, count);
    if (proxied(v_.sync, pe))
      block_put(v_.sync, me_, pe, v_.routes[dst.id].proxy_id,
                v_.routes[dst.id].offset + static_cast<std::uint64_t>(first) * sizeof(T), d,
                static_cast<std::uint64_t>(count) * sizeof(T));
  }

  template <class T>
  __device__ void put_rows_nbi(int pe, Symmetric<T> dst, std::int64_t first, std::int64_t dst_ld,
                               const T* src, std::int64_t src_ld, std::int64_t rows,
                               std::int64_t cols) {
    __syncthreads();
    T* d = at(pe, dst) + first;
    if (cols > 0)
      for (std::int64_t e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        const std::int64_t r = e / cols, c = e % cols;
        d[r * dst_ld + c] = src[r * src_ld + c];
      }
    if (proxied(v_.sync, pe))
      for (std::int64_t r = 0; r < rows; ++r)
        block_put(
            v_.sync, me_, pe, v_.routes[dst.id].proxy_id,
            v_.routes[dst.id].offset + static_cast<std::uint64_t>(first + r * dst_ld) * sizeof(T),
            d + r * dst_ld, static_cast<std::uint64_t>(cols) * sizeof(T));
  }

  __device__ void signal_op(int pe, Signal s, SignalOp op, std::uint64_t value) {
    block_signal(v_.sync, pe, s.slot, value, me_, op);
  }

  template <class T>
  __device__ void put_signal_nbi(int pe, Symmetric<T> dst, std::int64_t first, const T* src,
                                 std::int64_t count, Signal s, SignalOp op, std::uint64_t value) {
    put_nbi(pe, dst, first, src, count);
    signal_op(pe, s, op, value);
  }

  /// FC_WAIT_UNTIL's call: false on every thread when the wait timed out (the record names it).
  __device__ bool wait_until(Signal s, Cmp cmp, std::uint64_t value) {
    return block_wait_until(v_.sync, me_, s.slot, cmp, value);
  }

  __device__ std::uint64_t signal_fetch(Signal s) {
    __shared__ unsigned long long value;
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint64_t* p = slot_ptr(v_.sync, me_, s.slot);
      value = v_.sync.system != 0 ? slot_value<port::Scope::system>(v_.sync, p, s.slot, true)
                                  : slot_value<port::Scope::device>(v_.sync, p, s.slot, true);
    }
    __syncthreads();
    const std::uint64_t result = value;
    __syncthreads();  // nobody rewrites `value` before every thread has read it
    return result;
  }

  __device__ std::uint64_t signal_fetch_add(Signal s, std::uint64_t value) {
    std::uint64_t* p = slot_ptr(v_.sync, me_, s.slot);
    const std::uint64_t* landed = v_.sync.inbound != nullptr ? v_.sync.inbound + s.slot : nullptr;
    return v_.sync.system != 0 ? block_fetch_add<port::Scope::system>(p, value, landed)
                               : block_fetch_add<port::Scope::device>(p, value, landed);
  }

  __device__ void fence() {
    if (v_.sync.system != 0)
      port::fence<port::Scope::system>();
    else
      port::fence<port::Scope::device>();
    __syncthreads();
  }
  __device__ void quiet() { fence(); }

  /// FC_CLAIM's call: the next index of this rank's work queue.
  __device__ std::int64_t claim() { return block_claim(v_.claims + (v_.me >= 0 ? 0 : me_)); }

  template <class F>
  __device__ void compute(const char*, const Cost&, F&& f) {
    f();
    __syncthreads();
  }

 private:
  template <class T>
  __device__ T* at(int pe, Symmetric<T> b) const {
    return static_cast<T*>(v_.bases[static_cast<std::size_t>(pe) * v_.num_buffers + b.id]);
  }
  /// A put's payload: floats (and any element whose bytes are whole 4-byte words, 4-byte aligned)
  /// through block_copy's 16-byte path; other bytes one by one.
  template <class T>
  __device__ void copy(T* d, const T* src, std::int64_t count) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(count) * sizeof(T);
    if (bytes % 4 == 0 &&
        ((reinterpret_cast<std::uintptr_t>(d) | reinterpret_cast<std::uintptr_t>(src)) & 3u) == 0) {
      block_copy(reinterpret_cast<float*>(d), reinterpret_cast<const float*>(src),
                 static_cast<std::int64_t>(bytes / 4));
      return;
    }
    auto* db = reinterpret_cast<unsigned char*>(d);
    const auto* sb = reinterpret_cast<const unsigned char*>(src);
    for (std::uint64_t i = threadIdx.x; i < bytes; i += blockDim.x) db[i] = sb[i];
  }

  const KernelView& v_;
  int me_;
};

// nvcc (13.0) rejects the concept's lambda argument (`compute(..., [] {})`) inside a requires-
// expression; hipcc checks it, and nvcc compiles every registered body against these members.
#if !defined(FC_GPU_CUDA)
static_assert(Workgroup<DeviceWg>);
#endif

/// Blocks per SM a kernel asks its registers to leave room for (FC_LAUNCH_BOUNDS): the kernel's
/// `static constexpr int gpu_min_blocks_per_sm` if it has one, else 1 (no register cap).
template <class K>
constexpr int min_blocks_of() {
  if constexpr (requires { K::gpu_min_blocks_per_sm; })
    return K::gpu_min_blocks_per_sm;
  else
    return 1;
}

/// Runs `K::run` on one block: `params` holds one `K::Params` per rank of the grid (process mode:
/// this rank's only).
template <class K, int MinBlocks>
__global__ void FC_LAUNCH_BOUNDS(kThreads, MinBlocks)
    kernel_entry(const typename K::Params* params, const FC_GRID_CONSTANT KernelView view) {
  DeviceWg wg(view);
  K::template run<DeviceWg>(wg, params[view.me >= 0 ? 0 : blockIdx.y]);
}

/// A kernel's host-side handles, erased: its occupancy and its launch.
struct KernelEntry {
  /// Blocks of kThreads resident per SM / CU.
  int (*blocks_per_sm)() = nullptr;
  /// Launches `grid` x `ranks` blocks on `stream` over device `params` (`ranks` K::Params).
  void (*launch)(int grid, int ranks, gpuStream_t stream, const void* params,
                 const KernelView& view) = nullptr;
};

namespace kernel_detail {
template <class K, int MinBlocks>
int blocks_per_sm() {
  int per_sm = 0;
  FC_CHECK_GPU(gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_entry<K, MinBlocks>,
                                                            kThreads, 0));
  return per_sm;
}
template <class K, int MinBlocks>
void launch(int grid, int ranks, gpuStream_t stream, const void* params, const KernelView& view) {
  kernel_entry<K, MinBlocks>
      <<<dim3(static_cast<unsigned>(grid), static_cast<unsigned>(ranks)), kThreads, 0, stream>>>(
          static_cast<const typename K::Params*>(params), view);
  FC_CHECK_GPU(gpuGetLastError());
}
}  // namespace kernel_detail

/// The entry of kernel `K` (its launch bounds: MinBlocks blocks per SM).
template <class K, int MinBlocks = min_blocks_of<K>()>
KernelEntry entry_of() {
  static_assert(std::is_trivially_copyable_v<typename K::Params>,
                "a kernel's Params must be trivially copyable");
  return {&kernel_detail::blocks_per_sm<K, MinBlocks>, &kernel_detail::launch<K, MinBlocks>};
}

/// The symmetric buffers of one launch on the host: every rank's copy of each as the launch
/// reaches it, and the KernelView over them (the tables uploaded into the call's arena).
class LaunchBuffers {
 public:
  explicit LaunchBuffers(int world_size) : P_(world_size) {}
  /// Adds a buffer of `count` elements whose rank-q copy is `reach[q]` (process mode: `route`
  /// names it for the proxy); returns its handle.
  template <class T>
  Symmetric<T> add(const std::vector<T*>& reach, std::int64_t count, BufferRoute route = {}) {
    FC_CHECK_INTERNAL(static_cast<int>(reach.size()) == P_, "a buffer of ", reach.size(),
                      " ranks' copies in a world of ", P_);
    for (T* p : reach) reach_.push_back(p);
    routes_.push_back(route);
    return Symmetric<T>{static_cast<int>(routes_.size()) - 1, count};
  }
  /// The view of a launch of `ranks` ranks' grids (P in the single mode, 1 in process mode) over
  /// these buffers, with its zeroed work-queue counters.
  KernelView view(const Context& ctx, Arena& arena, int ranks, bool routed) const {
    const int nb = static_cast<int>(routes_.size());
    std::vector<void*> bases(static_cast<std::size_t>(P_) * std::max(nb, 1), nullptr);
    for (int b = 0; b < nb; ++b)
      for (int q = 0; q < P_; ++q)
        bases[static_cast<std::size_t>(q) * nb + b] = reach_[static_cast<std::size_t>(b) * P_ + q];
    KernelView v;
    v.P = P_;
    v.me = ctx.me();
    v.num_buffers = nb;
    v.bases = arena.upload(bases);
    v.routes =
        routed ? arena.upload(routes_.empty() ? std::vector<BufferRoute>(1) : routes_) : nullptr;
    v.claims = arena.alloc_zeroed<unsigned long long>(ranks);
    v.sync = ctx.view();
    return v;
  }

 private:
  int P_;
  std::vector<void*> reach_;  // [buffer][P]
  std::vector<BufferRoute> routes_;
};

}  // namespace fusedcoll::gpu
