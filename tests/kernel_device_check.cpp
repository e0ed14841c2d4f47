// Compile check, run by ctest with nvcc (-x cu) and hipcc (-x hip) when they are installed: the
// public device API (fusedcoll/kernel.hpp) and kernel bodies written against it compile as GPU
// device code, with no backend #ifdef in the bodies. Nothing here runs.
//
// `Archetype` is a compile-time stand-in for a GPU backend's workgroup: every member the API
// names, as a `__device__` function of a block of threads, so that a body that calls anything
// else, or that only compiles as a coroutine, fails here. It is not the GPU backend's
// implementation (gpu/ has that, with its timeouts and scopes) and is never launched.

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#endif

#include <cstdint>

#include "fusedcoll/detail/gemv_kernel.hpp"
#include "fusedcoll/kernel.hpp"
#include "kernels/ag_gemm.hpp"
#include "kernels/tutorial.hpp"

namespace fc = fusedcoll;

namespace kernel_device_check {

struct Archetype {
  using Task = void;
  void** bases;  // [P][buffers]
  int buffers;
  std::uint64_t* slots;  // [P][slots]
  int slots_per_rank;
  unsigned long long* claims;

  __device__ int rank() const { return static_cast<int>(blockIdx.y); }
  __device__ int world_size() const { return static_cast<int>(gridDim.y); }
  __device__ int wg() const { return static_cast<int>(blockIdx.x); }
  __device__ int num_wgs() const { return static_cast<int>(gridDim.x); }
  __device__ int thread_rank() const { return static_cast<int>(threadIdx.x); }
  __device__ int num_threads() const { return static_cast<int>(blockDim.x); }
  __device__ void sync() { __syncthreads(); }
  template <class T>
  __device__ T* at(int pe, fc::Symmetric<T> b) const {
    return static_cast<T*>(bases[pe * buffers + b.id]);
  }
  template <class T>
  __device__ T* local(fc::Symmetric<T> b) const {
    return at(rank(), b);
  }
  template <class T>
  __device__ T* read(fc::Symmetric<T> b, std::int64_t first, std::int64_t) const {
    return local(b) + first;
  }
  template <class T>
  __device__ void put_nbi(int pe, fc::Symmetric<T> dst, std::int64_t first, const T* src,
                          std::int64_t count) {
    __syncthreads();
    T* d = at(pe, dst) + first;
    for (std::int64_t i = thread_rank(); i < count; i += num_threads()) d[i] = src[i];
  }
  template <class T>
  __device__ void put_rows_nbi(int pe, fc::Symmetric<T> dst, std::int64_t first,
                               std::int64_t dst_ld, const T* src, std::int64_t src_ld,
                               std::int64_t rows, std::int64_t cols) {
    __syncthreads();
    T* d = at(pe, dst) + first;
    for (std::int64_t e = thread_rank(); e < rows * cols; e += num_threads())
      d[(e / cols) * dst_ld + e % cols] = src[(e / cols) * src_ld + e % cols];
  }
  __device__ void signal_op(int pe, fc::Signal s, fc::SignalOp op, std::uint64_t v) {
    __syncthreads();
    if (thread_rank() == 0) {
      __threadfence();
      auto* p = reinterpret_cast<unsigned long long*>(slots + pe * slots_per_rank + s.slot);
      if (op == fc::SignalOp::add)
        atomicAdd(p, v);
      else
        atomicExch(p, v);
    }
  }
  template <class T>
  __device__ void put_signal_nbi(int pe, fc::Symmetric<T> dst, std::int64_t first, const T* src,
                                 std::int64_t count, fc::Signal s, fc::SignalOp op,
                                 std::uint64_t v) {
    put_nbi(pe, dst, first, src, count);
    signal_op(pe, s, op, v);
  }
  __device__ std::uint64_t signal_fetch(fc::Signal s) const {
    return *static_cast<volatile std::uint64_t*>(slots + rank() * slots_per_rank + s.slot);
  }
  __device__ std::uint64_t signal_fetch_add(fc::Signal s, std::uint64_t v) {
    __shared__ unsigned long long old;
    __syncthreads();
    if (thread_rank() == 0)
      old = atomicAdd(
          reinterpret_cast<unsigned long long*>(slots + rank() * slots_per_rank + s.slot), v);
    __syncthreads();
    return old;
  }
  __device__ bool wait_until(fc::Signal s, fc::Cmp cmp, std::uint64_t v) {
    while (!fc::satisfies(signal_fetch(s), cmp, v)) {
    }
    __syncthreads();
    return true;
  }
  __device__ std::int64_t claim() {
    __shared__ unsigned long long i;
    __syncthreads();
    if (thread_rank() == 0) i = atomicAdd(claims + rank(), 1ull);
    __syncthreads();
    return static_cast<std::int64_t>(i);
  }
  __device__ void fence() { __threadfence(); }
  __device__ void quiet() {
    __syncthreads();
    __threadfence();
  }
  template <class F>
  __device__ void compute(const char*, const fc::Cost&, F&& f) {
    f();
    __syncthreads();
  }
};

/// The GEMV kernels' arithmetic as plain thread loops (the GPU backend has its tuned one).
struct ArchetypeGemvMath {
  template <class Wg>
  __device__ static void tile(Wg& wg, const fc::detail::gemv::GemvKernelParams& p,
                              const fc::detail::gemv::Tile& t, float* out, std::int64_t ld) {
    const std::int64_t width = t.n1 - t.n0;
    for (std::int64_t e = wg.thread_rank(); e < p.m * width; e += wg.num_threads()) {
      const std::int64_t r = e / width, c = e % width;
      float acc = 0.0f;
      for (std::int64_t k = 0; k < p.k; ++k)
        acc = __fadd_rn(acc, __fmul_rn(p.x[r * p.ldx + k], p.w[(t.n0 + c) * p.ldw + k]));
      out[r * ld + c] = acc;
    }
  }
  template <class Wg>
  __device__ static void copy_rows(Wg& wg, float* dst, std::int64_t dst_ld, const float* src,
                                   std::int64_t src_ld, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t e = wg.thread_rank(); e < rows * cols; e += wg.num_threads())
      dst[(e / cols) * dst_ld + e % cols] = src[(e / cols) * src_ld + e % cols];
  }
  template <class Wg>
  __device__ static void add_rows(Wg& wg, float* acc, std::int64_t acc_ld, const float* v,
                                  std::int64_t v_ld, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t e = wg.thread_rank(); e < rows * cols; e += wg.num_threads()) {
      float& a = acc[(e / cols) * acc_ld + e % cols];
      a = __fadd_rn(a, v[(e / cols) * v_ld + e % cols]);
    }
  }
};

template <class K>
__global__ void run_on_device(typename K::Params p, Archetype wg) {
  K::run(wg, p);
}

// One instantiation per body: each must compile as device code.
template __global__ void run_on_device<fc::detail::gemv::GemvScaleUp<ArchetypeGemvMath>>(
    fc::detail::gemv::GemvKernelParams, Archetype);
template __global__ void run_on_device<fc::detail::gemv::GemvScaleOut<ArchetypeGemvMath>>(
    fc::detail::gemv::GemvKernelParams, Archetype);
template __global__ void run_on_device<fc::detail::gemv::GemvPartial<ArchetypeGemvMath>>(
    fc::detail::gemv::GemvKernelParams, Archetype);
template __global__ void run_on_device<ag_gemm::AgGemm>(ag_gemm::Params, Archetype);
template __global__ void run_on_device<ag_gemm::Gemm>(ag_gemm::Params, Archetype);
template __global__ void run_on_device<tutorial::ReduceScatterRelu>(tutorial::Params, Archetype);
template __global__ void run_on_device<tutorial::MissingSignal>(tutorial::Params, Archetype);
template __global__ void run_on_device<tutorial::ReadBeforeWait>(tutorial::Params, Archetype);
template __global__ void run_on_device<tutorial::WrongOffset>(tutorial::Params, Archetype);

}  // namespace kernel_device_check
