#pragma once
// AllGather + GEMM by its definition (examples/kernels/ag_gemm.hpp): the rows of A in rank
// order, times rank r's weight shard, each element a fold over k from +0.0f with every product
// and sum rounded. Plain loops, no tiling: what the fused and unfused kernels must match bit for
// bit. And the inputs every test and the prediction use.

#include <cstdint>
#include <vector>

namespace ag_gemm {

/// A reproducible input value in [-1, 1) with 24 significant bits: element `i` of stream `seed`.
inline float input(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) / 8388608.0f - 1.0f;
}

/// Rank `s`'s rows of A ([rows, k]) and rank `r`'s weight shard ([k, n]).
inline std::vector<float> a_rows_of(int s, std::int64_t rows, std::int64_t k) {
  std::vector<float> a(static_cast<std::size_t>(rows * k));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = input(1000 + s, i);
  return a;
}
inline std::vector<float> b_of(int r, std::int64_t k, std::int64_t n) {
  std::vector<float> b(static_cast<std::size_t>(k * n));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = input(2000 + r, i);
  return b;
}

/// Rank `r`'s C = [A_0; A_1; ...; A_{P-1}] · B_r, [sum of rows, n].
inline std::vector<float> oracle(int r, const std::vector<std::int64_t>& rows, std::int64_t k,
                                 std::int64_t n) {
  std::vector<float> a;  // all of A, rank order
  for (std::size_t s = 0; s < rows.size(); ++s) {
    const std::vector<float> block = a_rows_of(static_cast<int>(s), rows[s], k);
    a.insert(a.end(), block.begin(), block.end());
  }
  const std::vector<float> b = b_of(r, k, n);
  std::int64_t m = 0;
  for (std::int64_t rs : rows) m += rs;
  std::vector<float> c(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::int64_t kk = 0; kk < k; ++kk) acc = acc + a[i * k + kk] * b[kk * n + j];
      c[i * n + j] = acc;
    }
  return c;
}

}  // namespace ag_gemm
