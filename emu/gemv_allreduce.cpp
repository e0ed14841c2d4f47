// GemvAllReduce on the emulator: the row-parallel GEMV fused with a direct (reduce-scatter +
// all-gather) AllReduce. The output columns are split into owner chunks (`chunk_of(N, P, j)`),
// each chunk into tiles of `kTileN` columns: the plan of detail/gemv_plan.hpp, shared with mpi/
// and gpu/; this file says how partials move and how completion is observed.
//
//   scale_up : a WG computes its partial of a tile, puts it into the owner's slot for its source
//              rank and bumps the owner's per-tile counter; the owner's WG waits for all P
//              partials, folds them in rank order and stores the reduced tile straight into every
//              rank's y (zero-copy), bumping each rank's y counter.
//   scale_out: tiles fill a local staging slice per owner; the WG that finishes a slice last puts
//              it whole; owners reduce tiles into a reduced slice whose last WG puts it to every
//              rank's gather buffer; every rank unpacks that into y.
//   unfused  : a GEMV kernel writes the whole partial, then the emulator's AllReduce (direct).
//
// The GEMV tiles are claimed (`WgContext::claim`: a WG that finishes one takes the next in the
// plan's order); the owners' reductions, which wait for their partials, are dealt statically
// (tiles w, w + grid, ... of the owner's chunk to WG w).

#include <algorithm>
#include <cstring>
#include <vector>

#include "emu/ops.hpp"
#include "fusedcoll/detail/gemv_plan.hpp"

namespace fusedcoll::emu::ops {
namespace {

using namespace fusedcoll::detail::gemv;  // Plan, Tile, kTileN, partial_tile

/// Every rank's y, exchanged at entry: the zero-copy destinations of the scale-up variant.
struct Ys {
  std::vector<float*> y;
  std::vector<std::int64_t> ld;
};

void run_scale_up(Rank& rk, const Plan& p, const GemvAllReduceArgs& a, const Ys& ys) {
  const std::size_t tile_floats = static_cast<std::size_t>(p.m * kTileN);
  const std::size_t num_tiles = p.tiles.size();
  // partials[src][tile][m][kTileN] on every rank; only the owner's copy of a tile is used.
  const SymBuffer partials =
      rk.scratch("gemv.partials", std::max<std::size_t>(1, p.P * num_tiles * tile_floats * 4));
  const int part_slot = rk.slots("gemv.partial", static_cast<int>(std::max<std::size_t>(num_tiles, 1)));
  const int y_slot = rk.slots("gemv.y", 1);
  std::vector<std::uint64_t> part_target(num_tiles, 0);
  for (int t : p.mine) part_target[t] = rk.expect(part_slot + t, p.P);
  const std::uint64_t y_target = rk.expect(y_slot, num_tiles);
  const int grid = grid_for(rk, num_tiles);

  rk.launch("gemv_allreduce_scale_up", grid, [&](WgContext& wg) -> WgTask {
    std::vector<float> buf(tile_floats);
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= p.compute.size()) break;
      const int t = p.compute[i];
      const Tile& tile = p.tiles[t];
      wg.compute("gemv", {model::gemv(p.m, p.k, tile.n1 - tile.n0)},
                 [&] { partial_tile(p, a, tile, buf.data(), kTileN); });
      const std::size_t offset = (p.me * num_tiles + t) * tile_floats * 4;
      wg.put_signal(tile.owner, partials, offset, buf.data(), tile_floats * 4, part_slot + t,
                    SignalOp::add, 1);
    }
    for (std::size_t i = wg.wg(); i < p.mine.size(); i += grid) {
      const int t = p.mine[i];
      const Tile& tile = p.tiles[t];
      co_await wg.wait_until(part_slot + t, Cmp::ge, part_target[t]);
      auto partial_of = [&](int src) {
        return wg.read_as<float>(partials, (src * num_tiles + t) * tile_floats, tile_floats);
      };
      // Fold in rank order, starting from rank 0's partial itself: the `direct` order.
      const auto n = static_cast<std::int64_t>(tile_floats);
      wg.compute("reduce", {model::copy(n * 4), model::reduce(n * (p.P - 1))}, [&] {
        if (tile_floats > 0) std::memcpy(buf.data(), partial_of(0), tile_floats * 4);
        for (int src = 1; src < p.P; ++src)
          detail::reduce_into(buf.data(), partial_of(src), static_cast<std::int64_t>(tile_floats),
                              DType::f32, ReduceOp::sum);
      });
      const std::size_t row_bytes = (tile.n1 - tile.n0) * 4;
      for (int q : remote_first(p.me, p.P)) {
        for (std::int64_t r = 0; r < p.m; ++r)
          wg.store(q, ys.y[q] + r * ys.ld[q] + tile.n0, buf.data() + r * kTileN, row_bytes);
        wg.signal(q, y_slot, SignalOp::add, 1);
      }
    }
    if (wg.wg() == 0) co_await wg.wait_until(y_slot, Cmp::ge, y_target);
    co_return;
  });
}

void run_scale_out(Rank& rk, const Plan& p, const GemvAllReduceArgs& a, const Ys& ys) {
  const int P = p.P;
  const std::size_t slice_floats = static_cast<std::size_t>(p.S);
  // stage[j]: my partial of owner j's chunk, [m][len_j]; slices[src]: received partial slices;
  // reduced: my reduced chunk; gathered[j]: owner j's reduced chunk, [m][len_j].
  const SymBuffer stage = rk.scratch("gemv.stage", std::max<std::size_t>(1, P * slice_floats * 4));
  const SymBuffer slices = rk.scratch("gemv.slices", std::max<std::size_t>(1, P * slice_floats * 4));
  const SymBuffer reduced = rk.scratch("gemv.reduced", std::max<std::size_t>(1, slice_floats * 4));
  const SymBuffer gathered = rk.scratch("gemv.gathered", std::max<std::size_t>(1, P * slice_floats * 4));
  const int done_slot = rk.slots("gemv.slice_done", P);
  const int arrive_slot = rk.slots("gemv.slice_arrive", 1);
  const int rdone_slot = rk.slots("gemv.reduced_done", 1);
  const int gather_slot = rk.slots("gemv.gathered", 1);
  std::vector<std::uint64_t> done_target(P);
  for (int j = 0; j < P; ++j)
    done_target[j] = rk.expect(done_slot + j, static_cast<std::uint64_t>(p.tiles_of[j]));
  const std::uint64_t arrive_target = rk.expect(arrive_slot, P);
  const std::uint64_t rdone_target = rk.expect(rdone_slot, p.mine.size());
  const std::uint64_t gather_target = rk.expect(gather_slot, P);
  const int grid = grid_for(rk, p.scale_out_items());

  rk.launch("gemv_allreduce_scale_out", grid, [&](WgContext& wg) -> WgTask {
    float* stage_f = wg.local_as<float>(stage);
    // A chunk with no tiles (N < P) has no last WG to ship it: announce the empty slice.
    if (wg.wg() == 0)
      for (int j : remote_first(p.me, P))
        if (p.chunks[j].length == 0) wg.signal(j, arrive_slot, SignalOp::add, 1);
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= p.compute.size()) break;
      const int t = p.compute[i];
      const Tile& tile = p.tiles[t];
      const Chunk c = p.chunks[tile.owner];
      float* slice = stage_f + tile.owner * slice_floats;
      wg.compute("gemv", {model::gemv(p.m, p.k, tile.n1 - tile.n0)},
                 [&] { partial_tile(p, a, tile, slice + (tile.n0 - c.offset), c.length); });
      // The WG that completes a slice (the done-mask reaches its target) ships it whole.
      if (wg.add_local(done_slot + tile.owner, 1) == done_target[tile.owner])
        wg.put_signal(tile.owner, slices, p.me * slice_floats * 4, slice,
                      static_cast<std::size_t>(p.m * c.length) * 4, arrive_slot, SignalOp::add, 1);
    }
    const Chunk mine = p.chunks[p.me];
    for (std::size_t i = wg.wg(); i < p.mine.size(); i += grid) {
      const Tile& tile = p.tiles[p.mine[i]];
      co_await wg.wait_until(arrive_slot, Cmp::ge, arrive_target);
      auto slice_of = [&](int src) {
        return wg.read_as<float>(slices, src * slice_floats, p.m * mine.length);
      };
      float* out = wg.local_as<float>(reduced);
      const std::int64_t c0 = tile.n0 - mine.offset, width = tile.n1 - tile.n0;
      wg.compute("reduce", {model::copy(p.m * width * 4), model::reduce(p.m * width * (P - 1))},
                 [&] {
        for (std::int64_t r = 0; r < p.m; ++r) {
          float* acc = out + r * mine.length + c0;
          std::memcpy(acc, slice_of(0) + r * mine.length + c0, width * 4);
          for (int src = 1; src < P; ++src)
            detail::reduce_into(acc, slice_of(src) + r * mine.length + c0, width, DType::f32,
                                ReduceOp::sum);
        }
      });
      if (wg.add_local(rdone_slot, 1) == rdone_target)
        for (int q : remote_first(p.me, P))
          wg.put_signal(q, gathered, p.me * slice_floats * 4, out,
                        static_cast<std::size_t>(p.m * mine.length) * 4, gather_slot, SignalOp::add,
                        1);
    }
    // An owner with an empty chunk still owes every rank its (empty) slice.
    if (p.mine.empty() && wg.wg() == 0) {
      co_await wg.wait_until(arrive_slot, Cmp::ge, arrive_target);
      for (int q : remote_first(p.me, P)) wg.signal(q, gather_slot, SignalOp::add, 1);
    }
    co_await wg.wait_until(gather_slot, Cmp::ge, gather_target);
    for (int j = wg.wg(); j < P; j += grid) {
      const Chunk c = p.chunks[j];
      const float* g = wg.read_as<float>(gathered, j * slice_floats, p.m * c.length);
      wg.compute("unpack", {model::copy(p.m * c.length * 4)}, [&] {
        for (std::int64_t r = 0; r < p.m; ++r)
          if (c.length > 0)
            std::memcpy(ys.y[p.me] + r * ys.ld[p.me] + c.offset, g + r * c.length, c.length * 4);
      });
    }
    co_return;
  });
}

void run_unfused(Rank& rk, const Plan& p, const GemvAllReduceArgs& a, const Ys& ys) {
  std::vector<float> partial(static_cast<std::size_t>(p.m * p.n));
  std::vector<int> order(p.tiles.size());
  for (std::size_t t = 0; t < order.size(); ++t) order[t] = static_cast<int>(t);
  const int grid = grid_for(rk, order.size());
  rk.launch("gemv", grid, [&](WgContext& wg) -> WgTask {
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= order.size()) break;
      const Tile& t = p.tiles[order[i]];
      wg.compute("gemv", {model::gemv(p.m, p.k, t.n1 - t.n0)},
                 [&] { partial_tile(p, a, t, partial.data() + t.n0, p.n); });
    }
    co_return;
  });
  std::vector<float> y(partial.size());
  AllReduceArgs ar;
  ar.send = partial.data();
  ar.recv = y.data();
  ar.count = p.m * p.n;
  ar.dtype = DType::f32;
  ar.op = ReduceOp::sum;
  ar.algo = AllReduceAlgo::direct;
  all_reduce(rk, ar);
  for (std::int64_t r = 0; r < p.m; ++r)
    if (p.n > 0) std::memcpy(ys.y[p.me] + r * ys.ld[p.me], y.data() + r * p.n, p.n * 4);
}

}  // namespace

void gemv_allreduce(Rank& rk, const GemvAllReduceArgs& args, Mode mode) {
  detail::check_mode(mode);
  const std::string name = std::string("gemv_allreduce ") + to_string(mode);
  const auto all = enter(rk, name, args);
  const Plan plan(args, rk.rank(), rk.size());
  Ys ys;
  for (const auto* a : all) {
    ys.y.push_back(static_cast<float*>(a->y.data()));
    ys.ld.push_back(a->y.stride(0));
  }
  leave_args(rk, name);
  switch (mode) {
    case Mode::scale_up: run_scale_up(rk, plan, args, ys); break;
    case Mode::scale_out: run_scale_out(rk, plan, args, ys); break;
    case Mode::unfused: run_unfused(rk, plan, args, ys); break;
  }
  rk.set_activity("returned from " + name);
}

}  // namespace fusedcoll::emu::ops
