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

/// How a collective kernel cuts a segment (an owner's chunk, one peer's block) into tiles, each
/// one put, one signal slot and one work item. Like a GPU collective kernel, it spreads a segment
/// over the device: tiles of the segment's bytes / `spread` (the workgroups the device holds at
/// once), no smaller than `min_bytes`, no larger than kCollectiveTileBytes unless the segment would
/// need more than max(64, spread) tiles (at most `max_tiles`). Tiles are whole elements, so tiling
/// never changes a bit.
inline constexpr std::int64_t kCollectiveTileBytes = 64 * 1024;
/// The smallest tile worth a GPU workgroup: 256 threads' 16-byte loads.
inline constexpr std::int64_t kCollectiveGpuMinTileBytes = 4 * 1024;

/// The most tiles a segment of a `ranks`-rank call may be cut into. Slots are reserved per tile
/// and per source rank, so a kernel's slots (ranks × this) stay at most 4096 from 16 ranks up.
inline int collective_max_tiles(int ranks) { return std::clamp(4096 / std::max(ranks, 1), 64, 256); }

/// Elements per tile of a segment of `len` elements of `elem` bytes.
inline std::int64_t collective_tile_elems(std::int64_t len, std::size_t elem, int spread,
                                          std::int64_t min_bytes, int max_tiles) {
  const auto e = static_cast<std::int64_t>(elem);
  spread = std::max(spread, 1);
  const std::int64_t bytes = std::clamp(ceil_div(len * e, spread),
                                        std::min(min_bytes, kCollectiveTileBytes), kCollectiveTileBytes);
  const int most = std::clamp(spread, 64, std::max(max_tiles, 64));
  return std::max({std::int64_t{1}, bytes / e, ceil_div(len, most)});
}

}  // namespace fusedcoll::detail
