#pragma once
/// @file
/// GemvAllReduce's kernels, written once against the public device API (fusedcoll/kernel.hpp)
/// for every backend that runs it as a fused kernel (emu/, gpu/): the communication skeleton of
/// its three modes over the plan of detail/gemv_plan.hpp. What differs between a CPU and a GPU
/// is only the arithmetic of a tile, which the backend passes as `Math`:
///
///   template <class Wg> static void tile(Wg&, const GemvKernelParams&, const gemv::Tile&,
///                                        float* out, std::int64_t ld);
///       this rank's partial of the tile's columns, all m rows, into `out` (row stride `ld`):
///       ref/'s per-element order (detail::gemv_rows on the CPU)
///   template <class Wg> static void copy_rows(Wg&, float* dst, std::int64_t dst_ld,
///                                             const float* src, std::int64_t src_ld,
///                                             std::int64_t rows, std::int64_t cols);
///   template <class Wg> static void add_rows(Wg&, float* acc, std::int64_t acc_ld,
///                                            const float* v, std::int64_t v_ld,
///                                            std::int64_t rows, std::int64_t cols);
///       acc = acc + v element-wise, ref/'s cross-rank f32 sum (detail::reduce_into)
///
/// (`FC_DEVICE` functions on a GPU, each run by every thread of the workgroup inside a compute
/// span.) How each mode moves partials and observes completion:
///
///   scale_up : a WG computes its partial of a tile, puts it into the owner's slot for its source
///              rank and bumps the owner's per-tile counter; the owner's WG waits for all P
///              partials, folds them in rank order and puts the reduced tile into every rank's
///              y, bumping each rank's y counter.
///   scale_out: tiles fill a local staging slice per owner; the WG that finishes a slice last puts
///              it whole; owners reduce tiles into a reduced slice whose last WG puts it to every
///              rank's gather buffer; every rank unpacks that into y.
///   unfused  : the GEMV kernel writes the whole partial; the backend's AllReduce follows.
///
/// The GEMV tiles are claimed (`FC_CLAIM`: a WG that finishes one takes the next in the plan's
/// order); the owners' reductions, which wait for their partials, are dealt statically (tiles
/// w, w + grid, ... of the owner's chunk to WG w).

#include <cstdint>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/detail/gemv_plan.hpp"
#include "fusedcoll/kernel.hpp"

namespace fusedcoll::detail::gemv {

/// One rank's view of a GemvAllReduce call: its inputs, the plan's lists (host arrays on the
/// emulator, device arrays on a GPU), and the buffers and signals of the mode that runs.
struct GemvKernelParams {
  std::int64_t m = 0, n = 0;
  std::int64_t k = 0;        ///< this rank's K split
  const float* w = nullptr;  ///< this rank's W, [n, k], row stride ldw
  std::int64_t ldw = 0;
  const float* x = nullptr;  ///< this rank's x, [m, k], row stride ldx
  std::int64_t ldx = 0;
  float* y = nullptr;  ///< this rank's output, [m, n], row stride ldy (scale_out; unfused: partial)
  std::int64_t ldy = 0;
  const Tile* tiles = nullptr;  ///< every tile, owner-major
  int num_tiles = 0;
  const int* compute = nullptr;  ///< this rank's tile order, remote owners first
  int num_compute = 0;
  const int* mine = nullptr;  ///< the tiles of this rank's own chunk
  int num_mine = 0;
  const Chunk* chunks = nullptr;  ///< [P]
  std::int64_t slice = 0;         ///< floats per slice slot (the plan's S)

  // scale_up: partials [P][num_tiles][m][kTileN] on every rank (the owner's copy is used), y as
  // a symmetric [m, n] (every owner puts its reduced tiles into every rank's), one kTileN-wide
  // tile of staging per workgroup.
  Symmetric<float> partials, ysym, wgbuf;
  Signals part, yready;                        ///< [num_tiles], [1]
  const std::uint64_t* part_target = nullptr;  ///< [num_tiles]; only this rank's own tiles used
  std::uint64_t y_target = 0;

  // scale_out: stage[P][slice] (my partial of each owner's chunk, [m][len_j]), slices[P][slice]
  // (received partials), reduced[slice] (my reduced chunk), gathered[P][slice] (every owner's).
  Symmetric<float> stage, slices, reduced, gathered;
  Signals done, arrive, rdone, gather;         ///< [P], [1], [1], [1]
  const std::uint64_t* done_target = nullptr;  ///< [P]
  std::uint64_t arrive_target = 0, rdone_target = 0, gather_target = 0;
};

/// scale_up (see the file comment).
template <class Math>
struct GemvScaleUp {
  static constexpr const char* name = "gemv_allreduce_scale_up";
  using Params = GemvKernelParams;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const int P = wg.world_size(), me = wg.rank();
    const std::int64_t tf = p.m * kTileN;
    float* buf = wg.local(p.wgbuf) + wg.wg() * tf;
    for (;;) {
      const std::int64_t i = FC_CLAIM(wg);
      if (i >= p.num_compute) break;
      const int t = p.compute[i];
      const Tile tile = p.tiles[t];
      wg.compute("gemv", cost::gemv(p.m, p.k, tile.n1 - tile.n0),
                 [&] { Math::tile(wg, p, tile, buf, kTileN); });
      wg.put_signal_nbi(tile.owner, p.partials, (me * p.num_tiles + t) * tf, buf, tf, p.part[t],
                        SignalOp::add, 1);
    }
    for (int i = wg.wg(); i < p.num_mine; i += wg.num_wgs()) {
      const int t = p.mine[i];
      const Tile tile = p.tiles[t];
      FC_WAIT_UNTIL(wg, p.part[t], Cmp::ge, p.part_target[t]);
      // Fold in rank order, starting from rank 0's partial itself: the `direct` order.
      wg.compute("reduce", cost::copy(tf * 4) + cost::reduce(tf * (P - 1)), [&] {
        Math::copy_rows(wg, buf, tf, wg.read(p.partials, t * tf, tf), tf, 1, tf);
        for (int src = 1; src < P; ++src)
          Math::add_rows(wg, buf, tf, wg.read(p.partials, (src * p.num_tiles + t) * tf, tf), tf, 1,
                         tf);
      });
      for (int j = 1; j <= P; ++j) {  // remote ranks first, this rank last
        const int q = (me + j) % P;
        wg.put_rows_nbi(q, p.ysym, tile.n0, p.n, buf, kTileN, p.m, tile.n1 - tile.n0);
        wg.signal_op(q, p.yready[0], SignalOp::add, 1);
      }
    }
    if (wg.wg() == 0) FC_WAIT_UNTIL(wg, p.yready[0], Cmp::ge, p.y_target);
    FC_RETURN;
  }
};

/// scale_out (see the file comment).
template <class Math>
struct GemvScaleOut {
  static constexpr const char* name = "gemv_allreduce_scale_out";
  using Params = GemvKernelParams;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const int P = wg.world_size(), me = wg.rank();
    float* stage = wg.local(p.stage);
    // A chunk with no tiles (N < P) has no last WG to ship it: announce the empty slice.
    if (wg.wg() == 0)
      for (int j = 1; j <= P; ++j)
        if (p.chunks[(me + j) % P].length == 0)
          wg.signal_op((me + j) % P, p.arrive[0], SignalOp::add, 1);
    for (;;) {
      const std::int64_t i = FC_CLAIM(wg);
      if (i >= p.num_compute) break;
      const Tile tile = p.tiles[p.compute[i]];
      const Chunk c = p.chunks[tile.owner];
      float* slice = stage + tile.owner * p.slice;
      wg.compute("gemv", cost::gemv(p.m, p.k, tile.n1 - tile.n0),
                 [&] { Math::tile(wg, p, tile, slice + (tile.n0 - c.offset), c.length); });
      // The WG that completes a slice (the done count reaches its target) ships it whole.
      if (wg.signal_fetch_add(p.done[tile.owner], 1) + 1 == p.done_target[tile.owner])
        wg.put_signal_nbi(tile.owner, p.slices, me * p.slice, slice, p.m * c.length, p.arrive[0],
                          SignalOp::add, 1);
    }
    const Chunk mine = p.chunks[me];
    float* out = wg.local(p.reduced);
    for (int i = wg.wg(); i < p.num_mine; i += wg.num_wgs()) {
      const Tile tile = p.tiles[p.mine[i]];
      FC_WAIT_UNTIL(wg, p.arrive[0], Cmp::ge, p.arrive_target);
      const std::int64_t c0 = tile.n0 - mine.offset, width = tile.n1 - tile.n0, len = mine.length;
      wg.compute("reduce", cost::copy(p.m * width * 4) + cost::reduce(p.m * width * (P - 1)), [&] {
        Math::copy_rows(wg, out + c0, len, wg.read(p.slices, 0, p.m * len) + c0, len, p.m, width);
        for (int src = 1; src < P; ++src)
          Math::add_rows(wg, out + c0, len, wg.read(p.slices, src * p.slice, p.m * len) + c0, len,
                         p.m, width);
      });
      if (wg.signal_fetch_add(p.rdone[0], 1) + 1 == p.rdone_target)
        for (int j = 1; j <= P; ++j)
          wg.put_signal_nbi((me + j) % P, p.gathered, me * p.slice, out, p.m * len, p.gather[0],
                            SignalOp::add, 1);
    }
    // An owner with an empty chunk still owes every rank its (empty) slice.
    if (p.num_mine == 0 && wg.wg() == 0) {
      FC_WAIT_UNTIL(wg, p.arrive[0], Cmp::ge, p.arrive_target);
      for (int j = 1; j <= P; ++j) wg.signal_op((me + j) % P, p.gather[0], SignalOp::add, 1);
    }
    FC_WAIT_UNTIL(wg, p.gather[0], Cmp::ge, p.gather_target);
    for (int j = wg.wg(); j < P; j += wg.num_wgs()) {
      const Chunk c = p.chunks[j];
      const float* g = wg.read(p.gathered, j * p.slice, p.m * c.length);
      wg.compute("unpack", cost::copy(p.m * c.length * 4),
                 [&] { Math::copy_rows(wg, p.y + c.offset, p.ldy, g, c.length, p.m, c.length); });
    }
    FC_RETURN;
  }
};

/// unfused, its first kernel: the whole partial [m, n] of this rank into `y`.
template <class Math>
struct GemvPartial {
  static constexpr const char* name = "gemv";
  using Params = GemvKernelParams;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    for (;;) {
      const std::int64_t i = FC_CLAIM(wg);
      if (i >= p.num_tiles) break;
      const Tile tile = p.tiles[i];
      wg.compute("gemv", cost::gemv(p.m, p.k, tile.n1 - tile.n0),
                 [&] { Math::tile(wg, p, tile, p.y + tile.n0, p.ldy); });
    }
    FC_RETURN;
  }
};

}  // namespace fusedcoll::detail::gemv
