#pragma once
/// @file
/// EmbeddingAllToAll's plan, the one schedule every backend runs (emu/, mpi/, gpu/, and the
/// simulators): tiles, their order, the per-destination tile counts that completion is counted
/// against, and the staging / receive layout, all from the agreed arguments alone
/// (docs/semantics.md, "EmbeddingAllToAll"). Because nothing here depends on a rank's local data,
/// every rank derives the same numbers for every other rank: a receiver knows how many tiles a
/// source will signal without being told, and symmetric buffers have the same size everywhere.
///
/// A tile is (local table k, a block of up to kBagBlock samples of ONE destination q's batch
/// range). A tile never splits a bag, so every pooled element is one call of
/// `detail::embedding_bag_rows` (or the GPU's port of it) and the bits are ref/'s whatever the
/// tiling or the order. Backends keep only how a tile's rows move and how completion is observed.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/schedule.hpp"
#include "fusedcoll/embedding_alltoall.hpp"

namespace fusedcoll::detail::embedding {

/// Samples per tile. 16 bags keep a tile's output rows (16 x D floats) in a WG-local buffer and
/// give a batch of a few hundred samples enough tiles to spread over the workgroups; larger blocks
/// left workgroups idle at small batches, smaller ones paid a signal per few rows.
inline constexpr std::int64_t kBagBlock = 16;

/// One tile: local table `k` (this rank's k-th table, global id `Plan::ids[me][k]`), samples
/// `[i0, i1)` counted from the start of destination `q`'s batch range. In the unfused pooling
/// kernel, which pools the global batch before any exchange, `q` is 0 and `[i0, i1)` are global
/// sample ids.
struct Tile {
  int q = 0;
  int k = 0;
  std::int64_t i0 = 0;
  std::int64_t i1 = 0;
};

/// Everything the agreed arguments say about the whole problem, seen from rank `me`.
/// Layouts (floats): a rank p's staging area holds, for each destination q, the slice
/// [B_q, T_p, D] that p sends q, at start[q] * T_p * D (q's samples in q's order, p's tables in
/// local order); q's receive area holds the slices of every source concatenated in rank order,
/// p's at batch[q] * tables_before[p] * D, so a slice is one contiguous put.
struct Plan {
  int P = 1;   ///< world size
  int me = 0;  ///< the rank this plan's tile list is for
  std::int64_t T = 0;  ///< tables in the model (all owners)
  std::int64_t D = 0;  ///< embedding dimension
  PoolingMode pooling = PoolingMode::sum;
  std::vector<std::int64_t> batch;          ///< [P] samples whose pooled rows rank q receives
  std::vector<std::int64_t> start;          ///< [P + 1] q's first global sample (prefix of batch)
  std::vector<std::int64_t> tp;             ///< [P] tables each rank owns: slice widths
  std::vector<std::int64_t> tables_before;  ///< [P + 1] prefix of tp: where p's slice lands
  std::vector<std::vector<std::int64_t>> ids;  ///< [P][T_p] global id of p's k-th table
  std::vector<int> owner;                      ///< [T] owning rank of each table
  std::vector<std::int64_t> local_k;           ///< [T] t's position k among its owner's tables

  Plan(const EmbeddingAllToAllArgs& a, int rank, int size)
      : P(size), me(rank), T(static_cast<std::int64_t>(a.owner.size())), D(a.dim),
        pooling(a.pooling), batch(a.batch_sizes), start(size + 1, 0), tp(size, 0),
        tables_before(size + 1, 0), ids(size), owner(a.owner), local_k(a.owner.size(), 0) {
    for (int q = 0; q < P; ++q) start[q + 1] = start[q] + batch[q];
    for (std::int64_t t = 0; t < T; ++t) {
      local_k[t] = tp[a.owner[t]]++;
      ids[a.owner[t]].push_back(t);
    }
    for (int p = 0; p < P; ++p) tables_before[p + 1] = tables_before[p] + tp[p];
  }
  std::int64_t global_batch() const { return start[P]; }
  /// Tiles rank p computes for destination q: what q's completion counter for p must reach
  /// (per-tile signals) and what p's done counter for q must reach before the slice ships.
  std::int64_t tiles(int p, int q) const { return tp[p] * ceil_div(batch[q], kBagBlock); }
  /// Floats of the slice p sends q: [B_q, T_p, D].
  std::int64_t slice_floats(int p, int q) const { return batch[q] * tp[p] * D; }
  /// Where this rank's slice for q starts in its own staging area, in floats.
  std::int64_t stage_offset(int q) const { return start[q] * tp[me] * D; }
  /// Where p's slice starts in q's receive area, in floats.
  std::int64_t recv_offset(int p, int q) const { return batch[q] * tables_before[p] * D; }
  /// The staging area of the rank with the most tables, so that symmetric allocations agree.
  std::int64_t stage_floats() const {
    return global_batch() * *std::max_element(tp.begin(), tp.end()) * D;
  }
  /// The receive area of the rank with the largest batch: [max B_q, T, D].
  std::int64_t recv_floats() const { return *std::max_element(batch.begin(), batch.end()) * T * D; }
  std::size_t stage_bytes() const { return static_cast<std::size_t>(stage_floats()) * sizeof(float); }
  std::size_t recv_bytes() const { return static_cast<std::size_t>(recv_floats()) * sizeof(float); }
  /// The orders of the fused kernels' tiles (fused_tiles). Both send remote data first; they
  /// trade compute locality against when a destination's slice is complete.
  enum class Order {
    /// Table by table, and within a table the destinations in communication-aware order (rank+1,
    /// rank+2, ..., the local rank last). A WG stays on one table for consecutive tiles, as in
    /// the unfused kernel; destination-major made every WG sweep each table P times and measured
    /// up to ~25% slower on the emulator (docs/results/emulator.md). But every slice is complete only
    /// with the last table's tiles, near the end of the grid.
    table_major,
    /// Destination by destination (`destinations`, default communication-aware order), all
    /// tables of one destination before the next: destination q's slice is complete after about
    /// (its position + 1) / P of the grid, so it can be on the wire while the rest is computed.
    /// Within a destination table by table, for locality. For links whose time is comparable to
    /// the compute (the MPI backend's p2p transport across hosts).
    destination_major,
    /// As destination_major, but within a destination block by block: every local table of a
    /// block of samples before the next block, so the rows [i0, i1) of every local table, a
    /// contiguous run of the staging slice [B_q, T_me, D], complete in sample order and the
    /// slice can leave in pieces. It touches all local tables in turn (less locality than
    /// destination_major; measured ~5% slower per call for scale-up's per-row puts over p2p).
    destination_block_major,
  };
  std::vector<Tile> fused_tiles(Order order = Order::table_major) const {
    return fused_tiles(order, remote_first(me, P));
  }
  /// `destinations`: the order of the destinations, each rank once (e.g. remote_hosts_first).
  std::vector<Tile> fused_tiles(Order order, const std::vector<int>& destinations) const {
    std::vector<Tile> out;
    const auto add = [&](int q, int k) {
      for (std::int64_t i0 = 0; i0 < batch[q]; i0 += kBagBlock)
        out.push_back({q, k, i0, std::min(i0 + kBagBlock, batch[q])});
    };
    if (order == Order::destination_major) {
      for (int q : destinations)
        for (int k = 0; k < static_cast<int>(tp[me]); ++k) add(q, k);
    } else if (order == Order::destination_block_major) {
      for (int q : destinations)
        for (std::int64_t i0 = 0; i0 < batch[q]; i0 += kBagBlock)
          for (int k = 0; k < static_cast<int>(tp[me]); ++k)
            out.push_back({q, k, i0, std::min(i0 + kBagBlock, batch[q])});
    } else {
      for (int k = 0; k < static_cast<int>(tp[me]); ++k)
        for (int q : destinations) add(q, k);
    }
    return out;
  }
  /// The unpack after the exchange (the unfused All-to-All kernel and scale_out's second phase):
  /// workgroup `w` of `g` copies this rank's output rows w, w + g, ... out of each received
  /// slice, the floats below from p's. The unfused All-to-All kernel has a workgroup per output
  /// row (up to the resident limit, `a2a_items`): permuting the received blocks into the output is
  /// a device-wide copy, as a framework's permute kernel after a library All-to-All is; one
  /// workgroup per peer would copy it on P compute units (docs/simulation.md).
  std::int64_t unpack_rows(std::int64_t w, std::int64_t g) const {
    return strided_count(batch[me], w, g);
  }
  std::int64_t unpack_floats(int p, std::int64_t w, std::int64_t g) const {
    return unpack_rows(w, g) * tp[p] * D;
  }
  /// Work items of the unfused All-to-All kernel: one per output row, at least one per peer
  /// (workgroup j puts the blocks of peers j, j + grid, ...).
  std::size_t a2a_items() const {
    return static_cast<std::size_t>(std::max<std::int64_t>(P, batch[me]));
  }
  /// The unfused baseline's pooling tiles: every local bag of the global batch into L
  /// [B, T_me, D] (laid out like the staging area), table by table.
  std::vector<Tile> unfused_tiles() const {
    std::vector<Tile> out;
    const std::int64_t B = global_batch();
    for (int k = 0; k < static_cast<int>(tp[me]); ++k)
      for (std::int64_t b0 = 0; b0 < B; b0 += kBagBlock)
        out.push_back({0, k, b0, std::min(b0 + kBagBlock, B)});
    return out;
  }
};

/// Where a transport wants data finished destination by destination (the MPI backend's p2p, the
/// one that crosses hosts), scale-out chooses between finishing slices one after another so that
/// each leaves, in pieces, while the rest is computed (destination_block_major) and table_major's
/// locality and fewer, larger messages, by this share of the call's compute its wire time must
/// reach. 2 x 2 ranks on the 2-vCPU VM, 1 and 4 MiB (docs/results/embedding-order.md): where the
/// backend read wire / compute at 0.21-0.48 (median per setting; unshaped, 10 Gbit/s), fused /
/// unfused was 1.03-1.11 table-major against 1.23-1.42 destination-block-major; at 1 Gbit/s
/// (2.6-3.5) destination-block-major kept its 0.76-0.78. 1: the order that overlaps once the
/// link, not the compute, bounds the call; the single calls read nearest it were 1.46 (unshaped
/// 1 MiB) and 0.88 (1 Gbit/s).
inline constexpr double kSlicesLeaveEarlyAt = 1.0;

/// Scale-out's tile order over a destination-by-destination transport, from the call's wire
/// seconds (its bytes for other ranks at the rates of their links) and compute seconds (its
/// pooling): destination_block_major once the wire takes kSlicesLeaveEarlyAt of the compute or
/// more, else table_major. Either figure unknown (0): table_major, whose whole slices are what
/// lets a transport measure its links. The one rule the MPI backend runs with its measured
/// figures and the simulator prices with a preset's.
inline Plan::Order scale_out_order(double wire_seconds, double compute_seconds) {
  return wire_seconds > 0 && compute_seconds > 0 &&
                 wire_seconds >= kSlicesLeaveEarlyAt * compute_seconds
             ? Plan::Order::destination_block_major
             : Plan::Order::table_major;
}

/// Pools bags `[b0, b1)` (global sample ids) of one local table into `out` (row stride
/// `out_stride` floats) with the shared CPU kernel: the compute of a tile on the CPU backends.
inline void pool(const EmbeddingTableShard& sh, std::int64_t dim, PoolingMode mode, std::int64_t b0,
                 std::int64_t b1, float* out, std::int64_t out_stride) {
  if (dim == 0 || b1 <= b0) return;  // nothing to write (and `out` may be null)
  const auto* table = static_cast<const float*>(sh.weights.data());
  const auto* weights = static_cast<const float*>(sh.per_sample_weights.data());
  if (sh.offsets.dtype() == DType::i64) {
    embedding_bag_rows(table, sh.weights.stride(0), dim,
                       static_cast<const std::int64_t*>(sh.offsets.data()),
                       static_cast<const std::int64_t*>(sh.indices.data()), weights, mode, b0, b1,
                       out, out_stride);
  } else {
    embedding_bag_rows(table, sh.weights.stride(0), dim,
                       static_cast<const std::int32_t*>(sh.offsets.data()),
                       static_cast<const std::int32_t*>(sh.indices.data()), weights, mode, b0, b1,
                       out, out_stride);
  }
}

}  // namespace fusedcoll::detail::embedding
