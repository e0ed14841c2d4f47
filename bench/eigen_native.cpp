// Eigen's single-threaded SGEMM at its best on an AVX2 + FMA CPU. This file alone is compiled with
// -mavx2 -mfma (bench/CMakeLists.txt), into a shared library whose symbols are hidden except the
// one below, so that none of its Eigen instantiations can be merged with the baseline (SSE2) ones
// of the benchmark executable. Call it only where the CPU has AVX2 and FMA.

#include <Eigen/Core>
#include <cstdint>

namespace fusedcoll::bench {

/// `c = a * b` for row-major `n x n` matrices. Declared again in kernels_bench.cpp.
__attribute__((visibility("default"))) void eigen_native_gemm(const float* a, const float* b,
                                                              float* c, std::int64_t n) {
  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMatrix> am(a, n, n);
  const Eigen::Map<const RowMatrix> bm(b, n, n);
  Eigen::Map<RowMatrix> cm(c, n, n);
  cm.noalias() = am * bm;
}

}  // namespace fusedcoll::bench
