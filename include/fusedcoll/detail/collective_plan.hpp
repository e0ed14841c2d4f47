#pragma once
/// @file
/// The collectives' plans, the one schedule of each collective that every backend runs (emu/,
/// mpi/, gpu/) and the simulator prices: how a call's buffer is cut into owner parts and tiles,
/// which (peer, tile) items each rank sends, folds and receives and in which order (remote peers
/// first), the ring's steps, the chain's order (in rank order, and across hosts), the exchanges'
/// layouts, where a compressed wire encodes and decodes, and how many signals each of a rank's
/// slots gets per call. All of it follows from the agreed arguments alone, so every rank can build
/// every other rank's plan and knows what will arrive without being told. Tiles are sets of whole
/// elements and never split a reduction, so a plan never changes a bit (docs/semantics.md,
/// "Collectives"). A plan holds no backend types: a backend maps its items onto its own work
/// items, its slots and buffers onto its own (docs/design.md, "Plans").

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/compression.hpp"
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
  bool whole = false;  ///< every segment is one tile

  /// Elements per tile of a segment of `len` elements of `elem` bytes.
  std::int64_t elems(std::int64_t len, std::size_t elem) const {
    if (whole) return std::max<std::int64_t>(len, 1);
    return tile_elems(len, elem, spread, min_bytes, max_tiles);
  }

  /// Host threads (the emulator on the wall clock, `workers` compute units): a work item costs far
  /// more than a GPU workgroup, so tiles stay 64 KiB (at most 64 per segment, larger beyond).
  static Tiling threads(int workers) { return {workers, kTileBytes, 64, false}; }
  /// A GPU's `resident` workgroups (the emulator in virtual time, the simulator): a segment is
  /// spread over them in tiles down to 4 KiB (up to max_tiles_of(ranks) of them), so that
  /// a small chunk's fold runs on many compute units and large ones pipeline, as a GPU collective
  /// does.
  static Tiling device(int resident, int ranks) {
    return {resident, kGpuMinTileBytes, max_tiles_of(ranks), false};
  }
  /// The GPU backend (gpu/): every segment spread over kGpuTiles tiles of 4 to 64 KiB, so that a
  /// small call still keeps many blocks busy.
  static constexpr int kGpuTiles = 64;
  static Tiling gpu() { return {kGpuTiles, kGpuMinTileBytes, kGpuTiles, false}; }
  /// One tile per segment (the MPI backend: a segment is one put, and what arrives is folded or
  /// copied in pieces spread over the workgroups afterwards).
  static Tiling segments() { return {1, kTileBytes, 1, true}; }
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

/// Where a reduction's compressed wire encodes and decodes (docs/compression.md; the points of
/// ref/compressed.cpp): every contribution that travels is encoded by its sender and decoded by
/// its receiver, and the folds run in f32 on decoded values. OwnerPlan: each slice is encoded by
/// its sender, the owner's own too (a round trip that never leaves it), and the owner decodes every
/// row; with gather it encodes the finished tile once and every rank, itself included, decodes it.
/// RingPlan and ChainPlan: the running value is encoded at every hop, the rank that finishes a
/// tile encodes it once, and the way back forwards those bytes unchanged. ExchangePlan: every
/// block, the own one included, is encoded by its sender and decoded by its receiver. Plain
/// collectives move the dtype's bytes as they are.
struct WireFold {
  bool compressed = false;
  bool predivide = false;  ///< avg with wire.predivide: each contribution is divided by P first
  bool divide = false;     ///< the fold ends with avg's division by P
  std::size_t elem = 0;    ///< bytes per element on the wire

  static WireFold of(const CompressionOptions& wire, ReduceOp op, std::size_t dtype_elem);
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
  /// The other ranks, remote first, when this rank's part has elements: each sends it a slice
  /// and, with gather, receives its finished part; none otherwise.
  std::vector<int> part_peers() const;
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

// ---------------------------------------------------------------------------------------------
// AllReduce ring: P - 1 reduce-scatter steps around the ring r -> r + 1; chunk c (chunk_of) is
// folded ((v_{c+1} op v_{c+2}) op ...) op v_c (docs/semantics.md), so rank c finishes it. Then
// the finished chunks reach every rank: by P - 1 ring all-gather steps, or straight from their
// owners (OwnerPlan's gather).

/// One rank's ring, from the agreed count alone. Reduce-scatter step s sends the running value of
/// chunk send_chunk(s) (this rank's own value at s = 0, else the one it folded at step s - 1) to
/// `next`, and receives chunk recv_chunk(s) from `prev`, which it folds with its own value (the
/// received value on the left); recv_chunk(steps - 1) is `me`, finished. Ring all-gather step g
/// forwards chunk gather_chunk(g) (its own at g = 0, else the one received at step g - 1), and
/// the last step's receipt is gather_chunk(steps). Every chunk is cut into tiles of `te` elements
/// (those of the longest chunk, `tiles` of them): a backend either moves every (step, tile <
/// tiles) of either phase, empty tiles included, so that each slot gets one signal per call (the
/// emulator), or only the tiles_of(c) tiles of the chunk it moves, which its receiver skips alike
/// (the GPU backend).
struct RingPlan {
  RingPlan(std::int64_t count, int me, int P, const Tiling& tiling, std::size_t tile_elem);

  Parts parts;  ///< chunk_of(count, P, c)
  int P = 1, me = 0, next = 0, prev = 0;
  int steps = 0;        ///< P - 1 per phase
  std::int64_t te = 1;  ///< elements per tile, in every chunk
  int tiles = 0;        ///< tiles of the longest chunk, moved by every step

  int send_chunk(int s) const { return mod(me - 1 - s, P); }
  int recv_chunk(int s) const { return mod(me - 2 - s, P); }
  int gather_chunk(int g) const { return mod(me - g, P); }
  /// Tile `t` of chunk `c`, and the tiles chunk `c` has (at most `tiles`).
  Span span(int c, int t) const { return tile_of(parts.len[c], te, t); }
  int tiles_of(int c) const { return num_tiles(parts.len[c], te); }
  /// Where step s's running value lands in its receiver's scratch: one region of the longest
  /// chunk per step, so that a fast sender never overwrites a value not yet folded.
  std::int64_t region_at(int s) const { return std::int64_t{s} * parts.max_len; }
  std::int64_t regions_elems() const { return std::int64_t{steps} * parts.max_len; }
};

// ---------------------------------------------------------------------------------------------
// AllReduce chain (P > 1): every element's running value passes rank 0, 1, ..., P - 1, each
// adding its own value (the received value on the left), so every element is folded in rank order.

/// One rank's chain, tile by tile over the whole buffer (tiles of `te` elements, `tiles` of
/// them), so that the ranks work as a pipeline. A rank receives each tile's running value from
/// `prev` (none at rank 0) and sends its sum on to `next` (none at the last rank, which finishes
/// the tile). How the finished tiles come back is the Return: `relay`, rank by rank back down the
/// chain (P-1 -> P-2 -> ... -> 0, the bytes unchanged: every link carries each element at most
/// twice, and between two groups of consecutive ranks each element crosses once each way), or
/// `spread`, the last rank to every other rank (remote first). Signals, per call: run[t] gets one
/// on every rank but 0, res[t] one on every rank but the last.
struct ChainPlan {
  enum class Return { relay, spread };
  ChainPlan(std::int64_t count, int me, int P, const Tiling& tiling, std::size_t tile_elem,
            Return ret);

  std::int64_t count = 0;
  int P = 1, me = 0;
  int prev = -1, next = -1;  ///< -1: none (rank 0's prev, the last rank's next)
  std::int64_t te = 1;
  int tiles = 0;
  int result_from = -1;        ///< the rank the finished tiles come from (-1: it finishes them)
  std::vector<int> result_to;  ///< the ranks this rank sends the finished tiles to, in order

  bool first() const { return me == 0; }
  bool last() const { return me == P - 1; }
  Span span(int t) const { return tile_of(count, te, t); }
};

// ---------------------------------------------------------------------------------------------
// Across hosts (docs/mpi.md, "Across hosts"): the chain of host segments and the relayed gather,
// which cross each host boundary once per element where the flat schedules cross it per rank.

/// The host structure of a communicator (host_of[r]: rank r's host, numbered 0, 1, ...), as the
/// schedules use it; the same on every rank.
struct Topology {
  explicit Topology(const std::vector<int>& host_of);

  std::vector<std::vector<int>> ranks;  ///< per host, its ranks in increasing order
  /// Segments: maximal runs of consecutive ranks on one host, in rank order.
  std::vector<int> seg_first, seg_last, seg_host;
  std::vector<int> seg_of;  ///< per rank, its segment
  int max_local = 1;        ///< the most ranks on one host

  int hosts() const { return static_cast<int>(ranks.size()); }
  int segments() const { return static_cast<int>(seg_first.size()); }
  /// The rank of `host` that relays item `j` (a piece, an owner's chunk) to the host's other
  /// ranks: the items are dealt round-robin over its ranks.
  int relay(int host, int j) const {
    const auto& on = ranks[static_cast<std::size_t>(host)];
    return on[static_cast<std::size_t>(j) % on.size()];
  }
  /// Whether the AllReduce as a chain of segments moves less over the busiest host link than the
  /// flat (direct) schedule: in units of N / P leaving each host, the chain sends a running value
  /// per segment boundary it starts, and the producer's host the result to every other host; the
  /// direct one sends L (P - L) / P of N into owners elsewhere, and as much back in its gather.
  bool chain_moves_less() const;
};

/// One rank's AllReduce as a chain of host segments. The buffer is cut into `pieces` pieces;
/// piece j's running value starts at segment 0 and crosses the segments in rank order, each
/// folding in its ranks' values in rank order, so every element is folded in rank order. In
/// segment k, piece j is carried by carrier(k, j) (dealt round-robin over the segment's ranks),
/// to which the segment's other ranks give their values of j (`row` in its window). The last
/// segment's carrier (the producer) sends the finished piece to every rank on its host and to
/// relay(h, j) on every other host h, which forwards it to its host's ranks: so each finished
/// piece crosses into a host once, and a running value crosses each segment boundary once (with
/// two hosts in blocks, ~N wire bytes per link direction each way, where the flat schedule sends
/// ~2N). Pieces pipeline (`steps`): a rank carries piece j, then finishes (receives, relays,
/// delivers) piece j - kLag, so the chain never waits for the way back.
struct SegmentChain {
  /// Values of `value_size` bytes (a rank's own, given to its carrier) and `wire_size` (a running
  /// value and a finished piece).
  SegmentChain(const Topology& t, int me, std::int64_t count, std::size_t value_size,
               std::size_t wire_size);

  /// Pieces of at most 1 MiB, and at least kMinPieces of at least 256 KiB each where the buffer
  /// allows: the way back starts only when the first piece is finished, so a buffer of a few
  /// pieces pays the pipeline's fill (4 MiB in 4 pieces took 1.47x MPI_Allreduce at 1 Gbit/s).
  /// Sized by the larger of the value and wire widths: compressed pieces cut by wire bytes held
  /// 4 MiB of f32 each in fp8, and the longer fill made 64 MiB at 1 Gbit/s 175 ms, not 154-164.
  static constexpr std::int64_t kPieceBytes = std::int64_t{1} << 20;
  static constexpr std::int64_t kMinPieceBytes = 256 << 10;
  static constexpr std::int64_t kMinPieces = 16;
  static constexpr int kLag = 4;

  const Topology* topo = nullptr;
  int me = 0;
  std::int64_t count = 0;
  int pieces = 0;
  int seg = 0;           ///< this rank's segment
  int first = 0, L = 1;  ///< its first rank and its number of ranks
  int host = 0, producer_host = 0;

  Chunk piece(int j) const { return chunk_of(count, pieces, j); }
  int carrier(int segment, int j) const {
    return topo->seg_first[segment] + j % (topo->seg_last[segment] - topo->seg_first[segment] + 1);
  }
  int producer(int j) const { return carrier(topo->segments() - 1, j); }
  bool last_segment() const { return seg + 1 == topo->segments(); }
  /// Row of segment mate m's values in carrier c's window (c's own value never travels), and the
  /// rows a window holds.
  std::int64_t row(int m, int c) const { return m < c ? m - first : m - first - 1; }
  std::int64_t rows() const { return std::max(topo->max_local - 1, 1); }

  /// This rank's work, in order: give its value of a piece to the piece's carrier (when it is not
  /// the carrier), carry a piece (when it is), finish a piece (when it is not its producer).
  enum class Op { give, carry, finish };
  struct Step {
    Op op;
    int piece;
  };
  std::vector<Step> steps() const;
};

// ---------------------------------------------------------------------------------------------
// Exchange: every rank sends one block to every rank, itself included (All-to-All(v), and
// AllGather, whose blocks to all peers are one and the same). Each receiver's inbox holds its
// incoming blocks; offsets and lengths are in elements.

/// One rank's side of an exchange, from the agreed arguments alone: its blocks (`send_len[q]` at
/// `send_at[q]` of its send buffer, landing at `put_at[q]` of q's inbox), what it receives
/// (`recv_len[p]` at `recv_at[p]` of its receive buffer, sitting at `box_at[p]` of its own
/// inbox), and, once tiled, its work: `sends` (remote peers first, its own block last, a local
/// copy) and `receives` (remote peers only, in the same order). The slot [source][tile] of a
/// receive item gets one signal per call. A block of n elements is tiled by te(n), so that its
/// sender and its receiver agree, as n does.
struct ExchangePlan {
  int P = 1, me = 0;
  std::int64_t inbox = 0;  ///< inbox elements: the largest of any rank, so the same everywhere
  std::vector<std::int64_t> send_len, send_at, put_at;  ///< [q]
  std::vector<std::int64_t> recv_len, recv_at, box_at;  ///< [p]
  std::vector<int> order;                               ///< remote_first(me, P)
  std::vector<Item> sends, receives;
  Tiling tiling;
  std::size_t tile_elem = 4;
  std::int64_t uniform_te = 0;  ///< when nonzero, every block's tile size

  /// All-to-All(v): rank q's inbox packs its incoming blocks in source order; `recv_counts(q)` is
  /// rank q's (agreed) receive counts.
  template <class RecvCounts>
  static ExchangePlan all_to_allv(const AllToAllvArgs& mine, int me, int P,
                                  RecvCounts&& recv_counts);
  /// AllGather: every block is this rank's whole contribution (at 0 in `send`), and every inbox
  /// is laid out like `recv` (part p at its offset, on every rank).
  static ExchangePlan all_gather(const AllGatherArgs& mine, int me, int P);

  /// Cuts the blocks into tiles of `elem`-byte elements and lists the work. With `uniform`, every
  /// block of the call is cut like the longest (the GPU backend's choice: one tile size for a
  /// whole kernel), else each by its own length.
  void tile(const Tiling& t, std::size_t elem, bool uniform = false);

  std::int64_t te(std::int64_t n) const {
    return uniform_te > 0 ? uniform_te : tiling.elems(n, tile_elem);
  }
  Span send_span(const Item& it) const {
    const std::int64_t n = send_len[it.peer];
    return tile_of(n, te(n), it.tile);
  }
  Span recv_span(const Item& it) const {
    const std::int64_t n = recv_len[it.peer];
    return tile_of(n, te(n), it.tile);
  }
  /// Tiles of the block for q / from p.
  int send_tiles(int q) const { return num_tiles(send_len[q], te(send_len[q])); }
  int recv_tiles(int p) const { return num_tiles(recv_len[p], te(recv_len[p])); }
  /// The most tiles of one block: a backend's slot stride per source.
  int tiles() const { return num_tiles(longest(), te(longest())); }
  /// The longest block of the call, on any rank.
  std::int64_t longest() const { return longest_; }

 private:
  std::int64_t longest_ = 0;
};

template <class RecvCounts>
ExchangePlan ExchangePlan::all_to_allv(const AllToAllvArgs& mine, int me, int P,
                                       RecvCounts&& recv_counts) {
  ExchangePlan ex;
  ex.P = P;
  ex.me = me;
  ex.order = remote_first(me, P);
  ex.put_at.assign(static_cast<std::size_t>(P), 0);
  for (int q = 0; q < P; ++q) {
    const std::vector<std::int64_t>& theirs = recv_counts(q);
    std::int64_t sum = 0;
    for (int p = 0; p < P; ++p) {
      if (p == me) ex.put_at[q] = sum;
      sum += theirs[p];
      ex.longest_ = std::max(ex.longest_, theirs[p]);
    }
    ex.inbox = std::max(ex.inbox, sum);
  }
  ex.box_at.assign(static_cast<std::size_t>(P), 0);
  for (int p = 1; p < P; ++p) ex.box_at[p] = ex.box_at[p - 1] + mine.recv_counts[p - 1];
  ex.send_len = mine.send_counts;
  ex.send_at = mine.send_displs;
  ex.recv_len = mine.recv_counts;
  ex.recv_at = mine.recv_displs;
  return ex;
}

// ---------------------------------------------------------------------------------------------
// Broadcast

/// One rank's broadcast: the root sends every tile to every rank (`items`: (q, tile), remote
/// ranks first, its own copy last); every other rank receives every tile from the root (`items`:
/// (root, tile)), whose slot [tile] gets one signal per call.
struct BroadcastPlan {
  BroadcastPlan(std::int64_t count, int root, int me, int P, const Tiling& tiling,
                std::size_t elem);

  std::int64_t count = 0;
  int root = 0;
  std::int64_t te = 1;
  int tiles = 0;
  std::vector<int> order;  ///< remote_first(root, P): the root's order
  std::vector<Item> items;

  Span span(int t) const { return tile_of(count, te, t); }
};

}  // namespace fusedcoll::detail::collective
