#pragma once
/// @file
/// The collectives' plan, the one schedule every backend runs (emu/, mpi/, gpu/, and the
/// simulator): how a call's buffer is cut into tiles, all from the agreed arguments alone, so that
/// a sender and its receiver cut a segment alike without being told. Tiles are sets of whole
/// elements and never split a reduction, so the tiling never changes a bit (docs/semantics.md,
/// "Collectives"). The plan holds no backend types: a backend maps its tiles onto its own work
/// items, slots and buffers.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusedcoll/detail/schedule.hpp"

namespace fusedcoll::detail::collective {

// ---------------------------------------------------------------------------------------------
// Tiling

/// How a collective kernel cuts a segment (an owner's chunk, one peer's block) into tiles, each
/// one put, one signal slot and one work item. Like a GPU collective kernel, it spreads a segment
/// over the device: tiles of the segment's bytes / `spread` (the workgroups the device holds at
/// once), no smaller than `min_bytes`, no larger than kTileBytes unless the segment would
/// need more than max(64, spread) tiles (at most `max_tiles`). Tiles are whole elements, so tiling
/// never changes a bit.
inline constexpr std::int64_t kTileBytes = 64 * 1024;
/// The smallest tile worth a GPU workgroup: 256 threads' 16-byte loads.
inline constexpr std::int64_t kGpuMinTileBytes = 4 * 1024;

/// The most tiles a segment of a `ranks`-rank call may be cut into. Slots are reserved per tile
/// and per source rank, so a kernel's slots (ranks × this) stay at most 4096 from 16 ranks up.
inline int max_tiles_of(int ranks) { return std::clamp(4096 / std::max(ranks, 1), 64, 256); }

/// Elements per tile of a segment of `len` elements of `elem` bytes.
inline std::int64_t tile_elems(std::int64_t len, std::size_t elem, int spread,
                               std::int64_t min_bytes, int max_tiles) {
  const auto e = static_cast<std::int64_t>(elem);
  spread = std::max(spread, 1);
  const std::int64_t bytes =
      std::clamp(ceil_div(len * e, spread), std::min(min_bytes, kTileBytes), kTileBytes);
  const int most = std::clamp(spread, 64, std::max(max_tiles, 64));
  return std::max({std::int64_t{1}, bytes / e, ceil_div(len, most)});
}

/// The tiling of one collective call, the same on every rank so that senders and receivers cut a
/// segment alike (tile_elems). Which one a backend uses says what runs a tile.
struct Tiling {
  int spread = 1;
  std::int64_t min_bytes = kTileBytes;
  int max_tiles = 64;  ///< the most tiles of one segment: a backend's slot stride per segment

  /// Elements per tile of a segment of `len` elements of `elem` bytes.
  std::int64_t elems(std::int64_t len, std::size_t elem) const {
    return tile_elems(len, elem, spread, min_bytes, max_tiles);
  }

  /// Host threads (the emulator on the wall clock, `workers` compute units): a work item costs far
  /// more than a GPU workgroup, so tiles stay 64 KiB (at most 64 per segment, larger beyond).
  static Tiling threads(int workers) { return {workers, kTileBytes, 64}; }
  /// A GPU's `resident` workgroups (the emulator in virtual time, the simulator): a segment is
  /// spread over them in tiles down to 4 KiB (up to max_tiles_of(ranks) of them), so that
  /// a small chunk's fold runs on many compute units and large ones pipeline, as a GPU collective
  /// does.
  static Tiling device(int resident, int ranks) {
    return {resident, kGpuMinTileBytes, max_tiles_of(ranks)};
  }
  /// The GPU backend (gpu/): every segment spread over kGpuTiles tiles of 4 to 64 KiB, so that a
  /// small call still keeps many blocks busy.
  static constexpr int kGpuTiles = 64;
  static Tiling gpu() { return {kGpuTiles, kGpuMinTileBytes, kGpuTiles}; }
};

/// Number of tiles of a segment of `len` elements (0 for an empty one).
inline int num_tiles(std::int64_t len, std::int64_t te) {
  return static_cast<int>((len + te - 1) / te);
}

/// Tile `t` of a segment: [begin, begin + length), empty past the end.
struct Span {
  std::int64_t begin = 0;
  std::int64_t length = 0;
};
inline Span tile_of(std::int64_t len, std::int64_t te, std::int64_t t) {
  const std::int64_t b = std::min(len, t * te);
  return {b, std::min(len, b + te) - b};
}

/// A work item: a (peer, tile) pair.
struct Item {
  int peer = 0;
  int tile = 0;
};

/// `a` mod `p` in [0, p).
inline int mod(int a, int p) { return ((a % p) + p) % p; }

// ---------------------------------------------------------------------------------------------
// Owner reduction: rank q folds part q of every rank's contribution, in rank order. The engine of
// AllReduce `direct` (parts = chunk_of, then every owner's result goes to every rank) and of
// ReduceScatter (parts = recv_counts, each result stays with its owner).

/// The parts of an owner reduction, in elements: part q is [off[q], off[q] + len[q]).
struct Parts {
  std::vector<std::int64_t> off, len;
  std::int64_t max_len = 0;  ///< the longest part
  std::int64_t total = 0;    ///< where the last part ends

  /// AllReduce's parts: chunk_of(count, P, q), the same on every rank.
  static Parts chunks(std::int64_t count, int P);
  /// ReduceScatter's (and AllGather's) parts: `counts` laid end to end.
  static Parts counts(const std::vector<std::int64_t>& counts);
};

/// One rank's share of an owner reduction, from the agreed parts alone:
/// - `scatter`: its slice of every other owner's part, tile by tile, owners remote-first, each put
///   into row `me` of the owner's inbox;
/// - `reduce`: its own part's tiles, each folded once every other rank's slice of it is in:
///   acc = v_0, then acc = acc op v_p in rank order, whatever order they arrived in;
/// - `collect` (with `gather`): every other owner's finished tiles, in the same order.
/// Every part is cut into tiles of `te` elements, those of the longest part, so that a tile of
/// part q is the same on every rank. Signals, per call: the slot of reduce tile t (in[t]) gets
/// one from every other rank (`in_signals`), the slot of collect item (q, t) (out[q][t]) one from
/// owner q; a backend keeps a slot per tile or per source, as its transport prefers.
struct OwnerPlan {
  OwnerPlan(Parts parts, int me, int P, const Tiling& tiling, std::size_t tile_elem, bool gather);

  Parts parts;
  int P = 1, me = 0;
  bool gather = false;
  std::int64_t te = 1;     ///< elements per tile, in every part
  int tiles = 0;           ///< tiles of the longest part
  std::vector<int> order;  ///< remote_first(me, P): the peers' order
  std::vector<Item> scatter, reduce, collect;

  /// The tile of `it` within its part.
  Span span(const Item& it) const { return tile_of(parts.len[it.peer], te, it.tile); }
  /// Where the tile of `it` starts in the whole buffer, in elements.
  std::int64_t at(const Item& it) const { return parts.off[it.peer] + span(it).begin; }
  /// Signals a reduce tile's slot gets per call: one from every other rank.
  std::uint64_t in_signals() const { return static_cast<std::uint64_t>(P - 1); }
  /// The inbox, where the contributions to part `me` land: row p (from source p) at p * max_len.
  std::int64_t inbox_elems() const { return P > 1 ? std::int64_t{P} * parts.max_len : 0; }
  std::int64_t inbox_at(int source) const { return std::int64_t{source} * parts.max_len; }
  /// The most work items of one phase: the grid of a kernel that runs all three.
  std::size_t most_items() const {
    return std::max({scatter.size(), reduce.size(), collect.size()});
  }
};

}  // namespace fusedcoll::detail::collective
