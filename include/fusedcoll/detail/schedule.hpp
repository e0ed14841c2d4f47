#pragma once
/// @file
/// Scheduling helpers every backend's kernels share.

#include <algorithm>
#include <cstddef>
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

/// Across hosts (host_of[r]: rank r's host, numbered 0, 1, ...): the ranks of the other hosts
/// first, host by host starting with the next host, then this host's other ranks in remote_first
/// order, the local rank last. Within a remote host the ranks of one host start at different
/// ranks (rotated by the sender's index on its host), so that a host's ranks do not all send to
/// the same remote rank first while the others wait (with hosts of equal size, at every step the
/// senders of one host address distinct ranks). On one host this is remote_first.
inline std::vector<int> remote_hosts_first(int rank, const std::vector<int>& host_of) {
  const int size = static_cast<int>(host_of.size());
  int hosts = 0;
  for (int h : host_of) hosts = h + 1 > hosts ? h + 1 : hosts;
  std::vector<std::vector<int>> on(static_cast<std::size_t>(hosts));
  for (int r = 0; r < size; ++r) on[static_cast<std::size_t>(host_of[r])].push_back(r);
  const int mine = host_of[rank];
  std::size_t local = 0;  // this rank's index among its host's ranks
  while (on[static_cast<std::size_t>(mine)][local] != rank) ++local;
  std::vector<int> order;
  for (int s = 1; s < hosts; ++s) {
    const auto& them = on[static_cast<std::size_t>((mine + s) % hosts)];
    for (std::size_t t = 0; t < them.size(); ++t) order.push_back(them[(local + t) % them.size()]);
  }
  for (int q : remote_first(rank, size))
    if (q != rank && host_of[q] == mine) order.push_back(q);
  order.push_back(rank);
  return order;
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// Workgroups of a persistent kernel over `work` items on a device that holds `resident`
/// workgroups at once: one per item, at least one, never more than can be resident (a persistent
/// kernel's workgroups wait on each other, so all of them must be). The emulator launches this
/// grid and the simulator prices it.
inline int persistent_grid(std::size_t work, std::size_t resident) {
  return static_cast<int>(std::clamp<std::size_t>(work, 1, std::max<std::size_t>(resident, 1)));
}

/// How many of `first, first + step, ...` lie below `n`: the items of `n` that workgroup `first`
/// of a `step`-workgroup kernel takes when they are dealt round robin.
inline std::int64_t strided_count(std::int64_t n, std::int64_t first, std::int64_t step) {
  return first < n ? (n - first + step - 1) / step : 0;
}

}  // namespace fusedcoll::detail
