#pragma once
/// @file
/// GemmAllToAll's plan, the one schedule every backend runs (emu/, mpi/, gpu/, and the
/// simulators): tiles, their order and every offset the agreed arguments determine
/// (docs/semantics.md, "GemmAllToAll"), so that every rank knows without being told how many tiles
/// each host computes for it and where each slice lands. A tile is (local expert, source rank, a
/// block of up to kRowBlock of the rows that source routed to the expert, a block of up to
/// kColBlock of the N output columns); tiles split output dimensions only, never K, so every
/// element is one call of `detail::gemm_tile` (or the GPU's port of it) and the bits are ref/'s
/// whatever the tiling. Backends keep only how a tile's rows move and how completion is observed.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusedcoll/communicator.hpp"  // Mode
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/schedule.hpp"
#include "fusedcoll/gemm_alltoall.hpp"

namespace fusedcoll::detail::gemm {

/// Rows and columns per tile.
inline constexpr std::int64_t kRowBlock = 16;
inline constexpr std::int64_t kColBlock = 64;

/// One tile: local expert `j`, rows `[r0, r1)` of the c[s][e] rows source `s` routed to it,
/// columns `[n0, n1)`.
struct Tile {
  int s = 0;
  int j = 0;
  std::int64_t r0 = 0, r1 = 0, n0 = 0, n1 = 0;
};

/// Everything the agreed arguments say about the whole problem, seen from rank `me`. Row counts
/// are in rows of N floats. Layouts: host h's staging area holds its slice for each source s (the
/// rows of every expert h hosts that s routed, expert by expert) one after another by source, so
/// a slice is one contiguous put; source s's receive area holds every host's slice for s one
/// after another by host, and the rows go to expert order in s's output only on the copy out.
struct Plan {
  int P = 1;   ///< world size
  int me = 0;  ///< the rank this plan's tile list is for
  std::int64_t E = 0, K = 0, N = 0;
  std::vector<int> host;             ///< [E] the rank that hosts expert e
  std::vector<std::int64_t> counts;  ///< [P * E] rows source s routed to expert e
  std::vector<std::vector<int>> experts_of;  ///< [P] experts each rank hosts, increasing id: j -> e
  /// [P][E] first row of s's block in A_e (the host's input stacks the sources in rank order).
  std::vector<std::vector<std::int64_t>> a0;
  /// [P][E] first row of e's block in output_s (s's output lists experts in id order).
  std::vector<std::vector<std::int64_t>> o0;
  /// [P][E] where e's rows start within host[e]'s slice for s.
  std::vector<std::vector<std::int64_t>> so;
  /// [h][s] rows host h computes for source s: a slice's size, and what s's copy-out expects.
  std::vector<std::vector<std::int64_t>> rows;
  /// [h][s] where h's slice for s starts in h's staging area.
  std::vector<std::vector<std::int64_t>> stage_at;
  /// [h][s] where h's slice lands in s's receive area.
  std::vector<std::vector<std::int64_t>> recv_at;

  Plan(const GemmAllToAllArgs& a, int rank, int size)
      : P(size), me(rank), E(static_cast<std::int64_t>(a.host.size())), K(a.k), N(a.n),
        host(a.host), counts(a.counts), experts_of(size),
        a0(size, std::vector<std::int64_t>(E, 0)), o0(size, std::vector<std::int64_t>(E, 0)),
        so(size, std::vector<std::int64_t>(E, 0)), rows(size, std::vector<std::int64_t>(size, 0)),
        stage_at(size, std::vector<std::int64_t>(size, 0)),
        recv_at(size, std::vector<std::int64_t>(size, 0)) {
    for (std::int64_t e = 0; e < E; ++e) experts_of[host[e]].push_back(static_cast<int>(e));
    for (int s = 0; s < P; ++s) {
      std::int64_t o = 0;
      for (std::int64_t e = 0; e < E; ++e) {
        if (s + 1 < P) a0[s + 1][e] = a0[s][e] + c(s, e);
        o0[s][e] = o;
        o += c(s, e);
        const int h = host[e];
        so[s][e] = rows[h][s];
        rows[h][s] += c(s, e);
      }
    }
    for (int h = 0; h < P; ++h)
      for (int s = 1; s < P; ++s) stage_at[h][s] = stage_at[h][s - 1] + rows[h][s - 1];
    for (int s = 0; s < P; ++s)
      for (int h = 1; h < P; ++h) recv_at[h][s] = recv_at[h - 1][s] + rows[h - 1][s];
  }
  std::int64_t c(int s, std::int64_t e) const { return counts[static_cast<std::size_t>(s * E + e)]; }
  /// Tiles host h computes for source s (the same formula on every rank).
  std::int64_t tiles(int h, int s) const {
    std::int64_t n = 0;
    for (int e : experts_of[h]) n += ceil_div(c(s, e), kRowBlock);
    return n * ceil_div(N, kColBlock);
  }
  /// Rows of the largest host's staging area (its slices for every source, by source): symmetric
  /// allocations take the largest so that every rank asks for the same size.
  std::int64_t stage_rows() const {
    std::int64_t most = 0;
    for (int h = 0; h < P; ++h) most = std::max(most, stage_at[h][P - 1] + rows[h][P - 1]);
    return most;
  }
  /// Rows of the largest receive area (every host's slice for one source, by host).
  std::int64_t recv_rows() const {
    std::int64_t most = 0;
    for (int s = 0; s < P; ++s) most = std::max(most, recv_at[P - 1][s] + rows[P - 1][s]);
    return most;
  }
  /// Symmetric sizes in bytes, identical on every rank.
  std::size_t stage_bytes() const {
    return static_cast<std::size_t>(stage_rows() * N) * sizeof(float);
  }
  std::size_t recv_bytes() const { return static_cast<std::size_t>(recv_rows() * N) * sizeof(float); }
  /// This rank's tiles of local expert j for source s.
  void add_tiles(int s, int j, std::vector<Tile>& out) const {
    for (std::int64_t r0 = 0; r0 < c(s, experts_of[me][j]); r0 += kRowBlock)
      for (std::int64_t n0 = 0; n0 < N; n0 += kColBlock)
        out.push_back({s, j, r0, std::min(r0 + kRowBlock, c(s, experts_of[me][j])), n0,
                       std::min(n0 + kColBlock, N)});
  }
  /// This rank's tiles for source s.
  void add_tiles(int s, std::vector<Tile>& out) const {
    for (int j = 0; j < static_cast<int>(experts_of[me].size()); ++j) add_tiles(s, j, out);
  }
  /// The unfused baseline's expert kernel: every local tile, expert by expert (one weight panel
  /// after another, as fused_tiles), the sources in rank order.
  std::vector<Tile> unfused_tiles() const {
    std::vector<Tile> out;
    for (int j = 0; j < static_cast<int>(experts_of[me].size()); ++j)
      for (int s = 0; s < P; ++s) add_tiles(s, j, out);
    return out;
  }
  /// A kernel's weight panels, (local expert, column block): the first tile on each reads it from
  /// memory (model::Work::first_touch); `panel_of` numbers them from 0 to panels() - 1.
  std::int64_t panels() const {
    return static_cast<std::int64_t>(experts_of[me].size()) * ceil_div(N, kColBlock);
  }
  std::int64_t panel_of(const Tile& t) const {
    return t.j * ceil_div(N, kColBlock) + t.n0 / kColBlock;
  }
  /// Rows of the slice host h sent this rank that workgroup `w` of `g` copies out (rows w, w + g,
  /// ... of each expert's block, counted from the block's first row in the slice).
  std::int64_t unpack_rows(int h, std::int64_t w, std::int64_t g) const {
    std::int64_t n = 0;
    for (int e : experts_of[h]) {
      const std::int64_t skip = ((w - so[me][e]) % g + g) % g;
      n += strided_count(c(me, e), skip, g);
    }
    return n;
  }
  /// Rows every host sends this rank.
  std::int64_t received_rows() const {
    std::int64_t n = 0;
    for (int h = 0; h < P; ++h) n += rows[h][me];
    return n;
  }
  /// The bytes of this rank's own buffers a call works over: its local experts' weights and the
  /// rows routed to them, and its output (the rows every host computes for it). The cost model's
  /// cache test reads it (model::in_cache), with the staging and receive areas of the modes that
  /// use them (`working_set_bytes`): calls reuse these buffers, so where every rank's set fits in
  /// the cache a kernel's first tile on a weight panel finds it there, not in memory.
  std::size_t user_bytes() const {
    std::int64_t rows_in = 0;
    for (int e : experts_of[me])
      for (int s = 0; s < P; ++s) rows_in += c(s, e);
    const auto experts = static_cast<std::int64_t>(experts_of[me].size());
    return static_cast<std::size_t>(experts * K * N + rows_in * K + received_rows() * N) *
           sizeof(float);
  }
  /// `user_bytes` and, in the modes that stage slices (scale_out, unfused), the staging and
  /// receive areas: what the emulator counts as the call's working set (its scratch included).
  std::size_t working_set_bytes(Mode mode) const {
    return user_bytes() + (mode == Mode::scale_up ? 0 : stage_bytes() + recv_bytes());
  }
  /// Work items of the unfused All-to-All kernel: one per received row (the reorder into expert
  /// order is a device-wide copy, as EmbeddingAllToAll's), at least one per peer (workgroup j puts
  /// the blocks of peers j, j + grid, ...).
  std::size_t a2a_items() const {
    return static_cast<std::size_t>(std::max<std::int64_t>(P, received_rows()));
  }
  /// Expert by expert, and within an expert communication-aware: sources rank+1, rank+2, ...,
  /// the local rank last. Expert-major keeps a WG on one weight panel (its column block of W_e)
  /// for consecutive tiles, as in the unfused kernel: source-major order alternated experts
  /// every tile at small row counts and measured up to ~20% slower (docs/results/emulator.md).
  std::vector<Tile> fused_tiles() const {
    std::vector<Tile> out;
    for (int j = 0; j < static_cast<int>(experts_of[me].size()); ++j)
      for (int s : remote_first(me, P)) add_tiles(s, j, out);
    return out;
  }
};

/// Computes a tile with the shared kernel into `dst` (row stride `ldd`).
inline void compute_tile(const Plan& pl, const LocalExpert& ex, const Tile& tl, float* dst,
                  std::int64_t ldd) {
  const int e = pl.experts_of[pl.me][tl.j];
  const auto* a = static_cast<const float*>(ex.a.data());
  const auto* w = static_cast<const float*>(ex.w.data());
  const std::int64_t lda = ex.a.stride(0), ldw = ex.w.stride(0);
  if (pl.K > 0) {  // with K == 0 neither matrix has elements (and may be null)
    a += (pl.a0[tl.s][e] + tl.r0) * lda;
    w += tl.n0;
  }
  fusedcoll::detail::gemm_tile(a, lda, w, ldw, dst, ldd, tl.r1 - tl.r0, tl.n1 - tl.n0, pl.K);
}

}  // namespace fusedcoll::detail::gemm
