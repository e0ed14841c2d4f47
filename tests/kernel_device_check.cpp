// Compile check, run by ctest with nvcc (-x cu) and hipcc (-x hip) when they are installed: the
// public device API (fusedcoll/kernel.hpp) and kernel bodies written against it compile as GPU
// device code over the GPU backend's own workgroup (gpu/kernel_wg.hpp's DeviceWg and its
// `__global__` entry), with no backend #ifdef in the bodies. Nothing here runs; the GPU builds of
// scripts/test.sh compile the same bodies into the backend, and its `gpu` suites run them.

#include <cstdint>

#include "fusedcoll/detail/gemv_kernel.hpp"
#include "fusedcoll/kernel.hpp"
#include "gpu/kernel_wg.hpp"
#include "kernels/ag_gemm.hpp"
#include "kernels/tutorial.hpp"

namespace fc = fusedcoll;

namespace kernel_device_check {

/// The GEMV kernels' arithmetic as plain thread loops (the GPU backend has its tuned one).
struct PlainGemvMath {
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

// Each body's `__global__` entry over the GPU's workgroup (gpu::kernel_entry, which
// fusedcoll_add_kernel registers): taking its address instantiates it, so each must compile.
template <class K>
constexpr auto entry = &fc::gpu::kernel_entry<K, fc::gpu::min_blocks_of<K>()>;
[[maybe_unused]] const void* const kEntries[] = {
    reinterpret_cast<const void*>(entry<fc::detail::gemv::GemvScaleUp<PlainGemvMath>>),
    reinterpret_cast<const void*>(entry<fc::detail::gemv::GemvScaleOut<PlainGemvMath>>),
    reinterpret_cast<const void*>(entry<fc::detail::gemv::GemvPartial<PlainGemvMath>>),
    reinterpret_cast<const void*>(entry<ag_gemm::AgGemm>),
    reinterpret_cast<const void*>(entry<ag_gemm::Gemm>),
    reinterpret_cast<const void*>(entry<tutorial::ReduceScatterRelu>),
    reinterpret_cast<const void*>(entry<tutorial::MissingSignal>),
    reinterpret_cast<const void*>(entry<tutorial::ReadBeforeWait>),
    reinterpret_cast<const void*>(entry<tutorial::WrongOffset>),
};

}  // namespace kernel_device_check
