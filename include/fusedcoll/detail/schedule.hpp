#pragma once
/// @file
/// Scheduling helpers every backend's kernels share.

#include <cstdint>
#include <vector>

namespace fusedcoll::detail {

/// Which peers go first: rank+1, rank+2, ..., the local rank last, so that remote data leaves
/// early (the paper's communication-aware order).
inline std::vector<int> remote_first(int rank, int size) {
  std::vector<int> order;
  for (int i = 1; i <= size; ++i) order.push_back((rank + i) % size);
  return order;
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace fusedcoll::detail
