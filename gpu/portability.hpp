#pragma once
// The one place that knows whether fusedcoll's GPU code is compiled by hipcc (AMD) or nvcc
// (NVIDIA). Kernels and host code are written once, HIP-style, against the names below; nothing
// else in gpu/ includes a vendor header or spells a vendor prefix. Debian's HIP-on-NVIDIA headers
// do not compile with CUDA 13, so the NVIDIA build maps straight onto the CUDA runtime instead of
// going through HIP. The list is deliberately short: allocation, copies, streams, events, device
// queries, occupancy, scoped atomics, fences and a device clock.

#include <cstdint>

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#define FC_GPU_HIP 1
#define FC_GPU_VENDOR "HIP"
#elif defined(__CUDACC__)
#include <cuda/atomic>
#include <cuda_runtime.h>
#define FC_GPU_CUDA 1
#define FC_GPU_VENDOR "CUDA"
#else
#error "gpu/portability.hpp must be compiled by hipcc or nvcc (FUSEDCOLL_ENABLE_HIP / _CUDA)"
#endif

#if defined(FC_GPU_HIP)
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
using gpuDeviceProp = hipDeviceProp_t;
#define gpuSuccess hipSuccess
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemset hipMemset
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreate hipStreamCreate
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
// Process mode (gpu/process.cpp): pinned host memory mapped into the device, and IPC handles.
using gpuIpcMemHandle_t = hipIpcMemHandle_t;
#define gpuHostAlloc hipHostMalloc
// Coherent: the device polls the proxy's tail and signal counters there while the host writes.
#define gpuHostAllocMapped (hipHostMallocMapped | hipHostMallocCoherent)
#define gpuHostGetDevicePointer hipHostGetDevicePointer
#define gpuFreeHost hipHostFree
#define gpuIpcGetMemHandle hipIpcGetMemHandle
#define gpuIpcOpenMemHandle hipIpcOpenMemHandle
#define gpuIpcCloseMemHandle hipIpcCloseMemHandle
#define gpuIpcMemLazyEnablePeerAccess hipIpcMemLazyEnablePeerAccess
#else
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
using gpuDeviceProp = cudaDeviceProp;
#define gpuSuccess cudaSuccess
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemset cudaMemset
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
using gpuIpcMemHandle_t = cudaIpcMemHandle_t;
#define gpuHostAlloc cudaHostAlloc
#define gpuHostAllocMapped cudaHostAllocMapped
#define gpuHostGetDevicePointer cudaHostGetDevicePointer
#define gpuFreeHost cudaFreeHost
#define gpuIpcGetMemHandle cudaIpcGetMemHandle
#define gpuIpcOpenMemHandle cudaIpcOpenMemHandle
#define gpuIpcCloseMemHandle cudaIpcCloseMemHandle
#define gpuIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess
#endif

/// A kernel's launch bounds: `threads` per block and, on NVIDIA, at least `blocks` resident per
/// SM, which caps its registers. A persistent kernel's grid is its resident blocks: the fused
/// scale_out kernels at 80 (GEMV) and 92 (GEMM) registers fit 3 and 2 blocks per SM and computed
/// their tiles in more rounds than the unfused ones at 48-56 registers (4-5 per SM). HIP's second
/// argument means something else (minimum waves per execution unit); it gets the first only.
#if defined(FC_GPU_HIP)
#define FC_LAUNCH_BOUNDS(threads, blocks) __launch_bounds__(threads)
#else
#define FC_LAUNCH_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
#endif

/// A kernel parameter the kernel takes the address of (a struct its device functions take by
/// reference): on CUDA it stays in the constant parameter space instead of being copied to every
/// thread's local memory. HIP 5.2 has no such attribute (its parameters are in memory already).
#if defined(FC_GPU_HIP)
#define FC_GRID_CONSTANT
#else
#define FC_GRID_CONSTANT __grid_constant__
#endif

namespace fusedcoll::gpu::port {

/// Which agents an atomic or fence orders against. `device`: every block of this GPU, which is
/// all the single-GPU multi-rank mode needs (peers are blocks of the same launch). `system`: other
/// GPUs and the host, for peers reached over NVLink / xGMI through IPC-mapped memory.
enum class Scope { device, system };

/// Frequency of `device_clock()` in ticks per second. NVIDIA: %globaltimer counts nanoseconds.
/// AMD: s_memrealtime is the 100 MHz constant "wall clock" on every gfx9 part (MI100, MI200,
/// MI300); HIP 5.2 has no attribute to query it.
#if defined(FC_GPU_HIP)
inline constexpr double kDeviceClockHz = 100e6;
#else
inline constexpr double kDeviceClockHz = 1e9;
#endif

#if defined(FC_GPU_HIP) || defined(FC_GPU_CUDA)

/// A clock that ticks at a constant rate whatever the SM/CU clock does (the timeout must measure
/// wall time, not cycles that stretch under power capping).
__device__ inline std::uint64_t device_clock() {
#if defined(FC_GPU_HIP)
#if defined(__HIP_DEVICE_COMPILE__)
  return static_cast<std::uint64_t>(__builtin_amdgcn_s_memrealtime());
#else
  return 0;
#endif
#else
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

/// Backs off a polling thread so that it does not starve the memory system it waits on.
__device__ inline void pause() {
#if defined(FC_GPU_HIP)
#if defined(__HIP_DEVICE_COMPILE__)
  __builtin_amdgcn_s_sleep(2);
#endif
#else
  __nanosleep(64);
#endif
}

/// Orders this thread's earlier memory operations before its later ones for every agent of
/// `scope` (cumulative: covers what the thread observed through a preceding __syncthreads).
template <Scope S>
__device__ inline void fence() {
  if constexpr (S == Scope::system) __threadfence_system();
  else __threadfence();
}

/// `*p += v` with release semantics at `scope`; returns the previous value.
template <Scope S>
__device__ inline std::uint64_t atomic_add_release(std::uint64_t* p, std::uint64_t v) {
#if defined(FC_GPU_HIP)
  constexpr int scope = S == Scope::system ? __HIP_MEMORY_SCOPE_SYSTEM : __HIP_MEMORY_SCOPE_AGENT;
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, scope);
#else
  constexpr auto scope = S == Scope::system ? cuda::thread_scope_system : cuda::thread_scope_device;
  cuda::atomic_ref<std::uint64_t, scope> ref(*p);
  return ref.fetch_add(v, cuda::std::memory_order_release);
#endif
}

/// `*p = v` with release semantics at `scope` (a signal that sets a flag instead of adding).
template <Scope S>
__device__ inline void atomic_store_release(std::uint64_t* p, std::uint64_t v) {
#if defined(FC_GPU_HIP)
  constexpr int scope = S == Scope::system ? __HIP_MEMORY_SCOPE_SYSTEM : __HIP_MEMORY_SCOPE_AGENT;
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, scope);
#else
  constexpr auto scope = S == Scope::system ? cuda::thread_scope_system : cuda::thread_scope_device;
  cuda::atomic_ref<std::uint64_t, scope> ref(*p);
  ref.store(v, cuda::std::memory_order_release);
#endif
}

/// `*p += v` with acquire-release semantics at `scope` (done-masks: the last adder must see what
/// every earlier adder wrote); returns the previous value.
template <Scope S>
__device__ inline std::uint64_t atomic_add_acq_rel(std::uint64_t* p, std::uint64_t v) {
#if defined(FC_GPU_HIP)
  constexpr int scope = S == Scope::system ? __HIP_MEMORY_SCOPE_SYSTEM : __HIP_MEMORY_SCOPE_AGENT;
  return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, scope);
#else
  constexpr auto scope = S == Scope::system ? cuda::thread_scope_system : cuda::thread_scope_device;
  cuda::atomic_ref<std::uint64_t, scope> ref(*p);
  return ref.fetch_add(v, cuda::std::memory_order_acq_rel);
#endif
}

/// Load of `*p` at `scope`, acquire or relaxed (a poll; an acquire follows it once it succeeds).
template <Scope S, bool Acquire>
__device__ inline std::uint64_t atomic_load(std::uint64_t* p) {
#if defined(FC_GPU_HIP)
  constexpr int scope = S == Scope::system ? __HIP_MEMORY_SCOPE_SYSTEM : __HIP_MEMORY_SCOPE_AGENT;
  return __hip_atomic_load(p, Acquire ? __ATOMIC_ACQUIRE : __ATOMIC_RELAXED, scope);
#else
  constexpr auto scope = S == Scope::system ? cuda::thread_scope_system : cuda::thread_scope_device;
  cuda::atomic_ref<std::uint64_t, scope> ref(*p);
  return ref.load(Acquire ? cuda::std::memory_order_acquire : cuda::std::memory_order_relaxed);
#endif
}
template <Scope S>
__device__ inline std::uint64_t atomic_load_acquire(std::uint64_t* p) {
  return atomic_load<S, true>(p);
}
template <Scope S>
__device__ inline std::uint64_t atomic_load_relaxed(std::uint64_t* p) {
  return atomic_load<S, false>(p);
}

/// Compare-and-swap of a 32-bit word (relaxed); returns the previous value.
__device__ inline unsigned int atomic_cas(unsigned int* p, unsigned int expected,
                                          unsigned int desired) {
  return atomicCAS(p, expected, desired);
}

/// Loads a float the kernel only reads (an operator's input) through the read-only global path.
/// The fused kernels reach their inputs through pointers loaded from parameter arrays, where
/// nvcc cannot prove the global space and emits generic loads; the unfused ones got global loads.
__device__ inline float load_ro(const float* p) {
#if defined(FC_GPU_HIP)
  return *p;
#else
  return __ldg(p);
#endif
}

/// f32 arithmetic rounded exactly as written: never contracted into an FMA, whatever the
/// compiler's contraction default (hipcc's is `fast`). The build also passes -fmad=false /
/// -ffp-contract=off; these keep the kernels right if someone drops the flag.
__device__ inline float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float div(float a, float b) { return __fdiv_rn(a, b); }

#endif

}  // namespace fusedcoll::gpu::port
