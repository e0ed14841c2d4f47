#pragma once
/// @file
/// GemvAllReduce's plan, the one schedule every backend runs (emu/, mpi/, gpu/, and the
/// simulators): owner chunks, tiles, their order and the staging layout, all from the agreed
/// arguments alone (docs/semantics.md, "GemvAllReduce"), so every rank knows how many tiles and
/// slices every peer will send it without being told.
///
/// The AllReduce is `direct`: output column chunk `chunk_of(N, P, j)` is owned by rank j, which
/// receives every rank's partial of it (reduce-scatter), folds them in rank order and sends the
/// result to every rank (all-gather). A tile is up to kTileN columns of ONE owner chunk, all M
/// rows; tiles split columns only, never K, so each partial element is one call of
/// `detail::gemv_rows` (or the GPU's port of it) and the bits are ref/'s whatever the tiling.
/// Backends keep only how a partial or a reduced chunk moves and how completion is observed.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/schedule.hpp"
#include "fusedcoll/gemv_allreduce.hpp"

namespace fusedcoll::detail::gemv {

/// Columns per tile: 64 floats = 256 B row segments, few enough that a chunk has several tiles to
/// spread over the workgroups, enough that each put or signal carries real work.
inline constexpr std::int64_t kTileN = 64;

/// One tile: output columns `[n0, n1)` of `owner`'s chunk, all M rows.
struct Tile {
  int owner = 0;
  std::int64_t n0 = 0, n1 = 0;
};

/// Everything the agreed arguments say about the whole problem, seen from rank `me`.
/// A slice is a [m, len_j] block of one owner chunk (row stride len_j, not N), so a whole chunk's
/// partial or reduced result is one contiguous put; S floats (m times the longest chunk) per slot
/// make every rank's staging, inbox and gather areas the same size.
struct Plan {
  int P = 1;   ///< world size
  int me = 0;  ///< the rank whose K range and tile order this plan holds
  std::int64_t m = 0, n = 0;
  std::int64_t k = 0;         ///< this rank's K split: the length of its partial's dot products
  std::int64_t max_chunk = 0;  ///< the longest owner chunk: every rank's slots are sized by it
  std::int64_t S = 0;          ///< floats per slice slot: m * max_chunk
  std::vector<Chunk> chunks;  ///< [P] owner j's columns
  std::vector<Tile> tiles;    ///< every tile, owner-major: a tile's id is its index here
  std::vector<std::int64_t> tiles_of;  ///< [P] tiles in owner j's chunk: when its slice is done
  std::vector<int> first_tile;         ///< [P + 1] owner j's tile ids: [first_tile[j], [j + 1])
  std::vector<int> compute;  ///< this rank's tile ids, owners remote-first (rank+1, ..., me last)
  std::vector<int> mine;     ///< ids of the tiles of this rank's own chunk, which it reduces

  Plan(const GemvAllReduceArgs& a, int rank, int size)
      : P(size), me(rank), m(a.m), n(a.n), k(a.k_splits[rank]), tiles_of(size, 0),
        first_tile(size + 1, 0) {
    for (int j = 0; j < P; ++j) {
      const Chunk c = chunk_of(n, P, j);
      chunks.push_back(c);
      max_chunk = std::max(max_chunk, c.length);
      tiles_of[j] = ceil_div(c.length, kTileN);
      for (std::int64_t c0 = 0; c0 < c.length; c0 += kTileN)
        tiles.push_back({j, c.offset + c0, c.offset + std::min(c0 + kTileN, c.length)});
      first_tile[j + 1] = static_cast<int>(tiles.size());
    }
    S = m * max_chunk;
    // Remote owners first so partials leave early; the own chunk's partials need no transfer.
    for (int owner : remote_first(me, P))
      for (int t = first_tile[owner]; t < first_tile[owner + 1]; ++t) compute.push_back(t);
    for (int t = first_tile[me]; t < first_tile[me + 1]; ++t) mine.push_back(t);
  }
  int num_tiles() const { return static_cast<int>(tiles.size()); }
  /// Work items of the fused scale_out kernel: its tiles, and at least one workgroup per owner
  /// (workgroup j unpacks the gathered chunks of owners j, j + grid, ...).
  std::size_t scale_out_items() const {
    return std::max(tiles.size(), static_cast<std::size_t>(P));
  }
  /// Where tile `t` starts inside its owner's [m, len] slice, in columns.
  std::int64_t in_slice(const Tile& t) const { return t.n0 - chunks[t.owner].offset; }
};

/// This rank's partial of tile `t` into `out` (row stride `ld`) with the shared CPU kernel, from
/// its K range of `a.w` and `a.x`: the compute of a tile on the CPU backends.
inline void partial_tile(const Plan& pl, const GemvAllReduceArgs& a, const Tile& t, float* out,
                         std::int64_t ld) {
  const auto* w = static_cast<const float*>(a.w.data());
  const auto* x = static_cast<const float*>(a.x.data());
  const std::int64_t ldw = a.w.stride(0);
  gemv_rows(w + t.n0 * ldw, ldw, x, a.x.stride(0), pl.m, pl.k, 0, t.n1 - t.n0, out, ld);
}

}  // namespace fusedcoll::detail::gemv
