// GemmAllToAll on the emulator: MoE expert GEMMs fused with the combine All-to-All that returns
// every row's result to the rank that routed it (docs/semantics.md, "GemmAllToAll").
//
// A tile is (local expert e, source rank s, a block of up to kRowBlock of the c[s][e] rows s routed
// to e, a block of up to kColBlock of the N output columns). Tiles split output dimensions only,
// never K: every element is one call of the shared kernel `detail::gemm_tile`, so the bits are
// ref/'s whatever the tiling, the schedule or the mode; everything else only moves bytes.
//
// All three modes run a persistent kernel: grid = min(#tiles, max_resident_wgs), and a WG that
// finishes a tile claims the next unclaimed one in the plan's order (`WgContext::claim`): tiles of
// unequal rows spread as a GPU's dispatcher would spread them. The fused tile list goes expert by
// expert, and within each expert is communication-aware (tiles whose rows return to rank+1,
// rank+2, ... first, the local rank's tiles last, see ops::remote_first).
//
// - scale_up (zero-copy): a WG computes its tile into a WG-local buffer and stores it straight
//   into its final rows of the source's output (whose address the ranks exchanged at entry), then
//   bumps 'gemm.from'[host] on that source. Every rank knows from the agreed counts how many tiles
//   each host sends it; WG 0, after its own tiles, waits for all of them.
// - scale_out: each remote source s has a staging slice in this rank's symmetric scratch
//   ('gemm.stage': this host's experts in increasing id, each with its c[s][e] rows, N columns).
//   Tiles compute straight into it and bump the local done counter 'gemm.done'[s]; the WG whose
//   increment completes the slice puts it into s's receive scratch ('gemm.recv': slices of all
//   hosts concatenated in rank order) with ONE put_signal on 'gemm.arrive'[me]. Tiles of the local
//   rank compute straight into the local output. In the same kernel every WG then waits for each
//   host's slice and copies its share of the rows to their expert-ordered places in the output.
// - unfused (the baseline): kernel 1 computes every local tile into the per-source row blocks of
//   'gemm.stage'; kernel 2 is the All-to-All(v): a put_signal of every block (empty ones too) on
//   'gemm.a2a'[me], then wait for all P blocks and reorder their rows into expert order.
//
// Scratch sizes and slot keys depend only on the agreed arguments (identical collective calls on
// every rank); slot counters are cumulative (Rank::expect). The rendezvous of `enter` at the start
// of each call keeps a fast rank from overwriting a receive buffer a peer is still unpacking.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu/ops.hpp"
#include "fusedcoll/detail/gemm_plan.hpp"

namespace fusedcoll::emu::ops {
namespace {

using namespace fusedcoll::detail::gemm;  // Plan, Tile, compute_tile

/// A rank's output as the other ranks see it.
struct OutRef {
  float* data = nullptr;
  std::int64_t ld = 0;  // row stride in elements
};

/// Copies the rows `first, first + step, ...` of the slice host `h` sent this rank into their
/// places in the output (expert order).
void unpack(const Plan& pl, int h, const float* slice, const OutRef& out, std::int64_t first,
            std::int64_t step) {
  const int s = pl.me;
  const std::size_t row_bytes = static_cast<std::size_t>(pl.N) * sizeof(float);
  if (row_bytes == 0) return;
  for (int e : pl.experts_of[h]) {
    const std::int64_t base = pl.so[s][e];  // slice row of e's first row
    // The first of this expert's rows that falls to this WG.
    const std::int64_t skip = ((first - base) % step + step) % step;
    for (std::int64_t i = skip; i < pl.c(s, e); i += step)
      std::memcpy(out.data + (pl.o0[s][e] + i) * out.ld, slice + (base + i) * pl.N, row_bytes);
  }
}

/// The panels (local expert, column block) a kernel has used on this device: the first tile on
/// each reads its panel from memory (model::Work::first_touch). Atomic because wall-clock
/// workgroups run on several threads; in virtual time they run one at a time, in virtual-time
/// order, so which tile comes first is deterministic.
class Touched {
 public:
  explicit Touched(const Plan& pl)
      : pl_(pl), seen_(static_cast<std::size_t>(std::max<std::int64_t>(1, pl.panels()))) {}
  bool first(const Tile& tl) {
    return seen_[static_cast<std::size_t>(pl_.panel_of(tl))].exchange(1) == 0;
  }

 private:
  const Plan& pl_;
  std::vector<std::atomic<unsigned char>> seen_;
};

/// The cost model's view of `compute_tile`.
model::Work tile_work(const Plan& pl, const Tile& tl, Touched& touched) {
  return model::gemm(tl.r1 - tl.r0, tl.n1 - tl.n0, pl.K, touched.first(tl));
}

void run_scale_up(Rank& rk, const Plan& pl, const std::vector<LocalExpert>& experts,
                  const std::vector<OutRef>& outs) {
  const int P = pl.P, me = pl.me;
  const int from = rk.slots("gemm.from", P);
  std::vector<std::uint64_t> target(P);
  for (int h = 0; h < P; ++h)
    target[h] = rk.expect(from + h, static_cast<std::uint64_t>(pl.tiles(h, me)));
  const std::vector<Tile> tiles = pl.fused_tiles();
  const int grid = grid_for(rk, tiles.size());
  Touched touched(pl);
  rk.launch("gemm_alltoall scale_up", grid, [&](WgContext& wg) -> WgTask {
    std::vector<float> buf(static_cast<std::size_t>(kRowBlock * std::min(kColBlock, pl.N)));
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= tiles.size()) break;
      const Tile& tl = tiles[i];
      const std::int64_t nr = tl.r1 - tl.r0, nc = tl.n1 - tl.n0;
      wg.compute("gemm", {tile_work(pl, tl, touched)},
                 [&] { compute_tile(pl, experts[tl.j], tl, buf.data(), nc); });
      const OutRef& o = outs[tl.s];
      float* dst = o.data + (pl.o0[tl.s][pl.experts_of[me][tl.j]] + tl.r0) * o.ld + tl.n0;
      if (nc == pl.N && (o.ld == pl.N || nr == 1)) {  // the tile is one contiguous block there
        wg.store(tl.s, dst, buf.data(), static_cast<std::size_t>(nr * nc) * sizeof(float));
      } else {
        for (std::int64_t r = 0; r < nr; ++r)
          wg.store(tl.s, dst + r * o.ld, buf.data() + r * nc,
                   static_cast<std::size_t>(nc) * sizeof(float));
      }
      wg.signal(tl.s, from + me, SignalOp::add, 1);
    }
    if (wg.wg() == 0)
      for (int h : remote_first(me, P)) co_await wg.wait_until(from + h, Cmp::ge, target[h]);
    co_return;
  });
}

void run_scale_out(Rank& rk, const Plan& pl, const std::vector<LocalExpert>& experts,
                   const OutRef& mine) {
  const int P = pl.P, me = pl.me;
  const SymBuffer stage = rk.scratch("gemm.stage", pl.stage_bytes());
  const SymBuffer recv = rk.scratch("gemm.recv", pl.recv_bytes());
  const int done = rk.slots("gemm.done", P);
  const int arrive = rk.slots("gemm.arrive", P);
  std::vector<std::uint64_t> done_target(P, 0), arrive_target(P, 0);
  for (int s = 0; s < P; ++s)
    if (s != me) done_target[s] = rk.expect(done + s, static_cast<std::uint64_t>(pl.tiles(me, s)));
  // A host sends a slice (one signal) exactly when it has tiles for us.
  for (int h = 0; h < P; ++h)
    if (h != me) arrive_target[h] = rk.expect(arrive + h, pl.tiles(h, me) > 0 ? 1 : 0);
  const std::vector<Tile> tiles = pl.fused_tiles();
  const int grid = grid_for(rk, tiles.size());
  const std::int64_t N = pl.N;
  Touched touched(pl);
  rk.launch("gemm_alltoall scale_out", grid, [&](WgContext& wg) -> WgTask {
    float* st = wg.local_as<float>(stage);
    // Phase 1: tiles. Remote ones fill s's staging slice; the slice's last WG sends it.
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= tiles.size()) break;
      const Tile& tl = tiles[i];
      const int e = pl.experts_of[me][tl.j];
      if (tl.s == me) {
        float* dst = mine.data + (pl.o0[me][e] + tl.r0) * mine.ld + tl.n0;
        wg.compute("gemm", {tile_work(pl, tl, touched)},
                   [&] { compute_tile(pl, experts[tl.j], tl, dst, mine.ld); });
        continue;
      }
      float* slice = st + pl.stage_at[me][tl.s] * N;
      wg.compute("gemm", {tile_work(pl, tl, touched)}, [&] {
        compute_tile(pl, experts[tl.j], tl, slice + (pl.so[tl.s][e] + tl.r0) * N + tl.n0, N);
      });
      const std::uint64_t now = wg.add_local(done + tl.s, 1);
      if (now == done_target[tl.s]) {
        wg.put_signal(tl.s, recv, static_cast<std::size_t>(pl.recv_at[me][tl.s] * N) * sizeof(float),
                      slice, static_cast<std::size_t>(pl.rows[me][tl.s] * N) * sizeof(float),
                      arrive + me, SignalOp::add, 1);
      }
    }
    // Phase 2: every WG copies its share of each received slice once it has landed.
    const std::int64_t w = wg.wg(), g = wg.num_wgs();
    for (int h : remote_first(me, P)) {
      if (h == me || pl.tiles(h, me) == 0) continue;
      co_await wg.wait_until(arrive + h, Cmp::ge, arrive_target[h]);
      const float* slice = wg.read_as<const float>(recv, pl.recv_at[h][me] * N, pl.rows[h][me] * N);
      wg.compute("unpack", {model::copy(pl.unpack_rows(h, w, g) * N * 4)},
                 [&] { unpack(pl, h, slice, mine, w, g); });
    }
    co_return;
  });
}

void run_unfused(Rank& rk, const Plan& pl, const std::vector<LocalExpert>& experts,
                 const OutRef& mine) {
  const int P = pl.P, me = pl.me;
  const SymBuffer stage = rk.scratch("gemm.stage", pl.stage_bytes());
  const SymBuffer recv = rk.scratch("gemm.recv", pl.recv_bytes());
  const int arrive = rk.slots("gemm.a2a", P);
  const std::int64_t N = pl.N;

  // Kernel 1: the expert GEMMs, into per-source row blocks.
  const std::vector<Tile> tiles = pl.unfused_tiles();
  Touched touched(pl);
  rk.launch("expert_gemm", grid_for(rk, tiles.size()), [&](WgContext& wg) -> WgTask {
    float* st = wg.local_as<float>(stage);
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= tiles.size()) break;
      const Tile& tl = tiles[i];
      const int e = pl.experts_of[me][tl.j];
      float* dst = st + (pl.stage_at[me][tl.s] + pl.so[tl.s][e] + tl.r0) * N + tl.n0;
      wg.compute("gemm", {tile_work(pl, tl, touched)},
                 [&] { compute_tile(pl, experts[tl.j], tl, dst, N); });
    }
    co_return;
  });

  // Kernel 2: the All-to-All(v) of the row blocks and the reorder into expert order.
  std::vector<std::uint64_t> target(P);
  for (int h = 0; h < P; ++h) target[h] = rk.expect(arrive + h, 1);
  const std::vector<int> order = remote_first(me, P);
  // One workgroup per received row (Plan::a2a_items), not per peer.
  rk.launch("gemm_alltoall a2a", grid_for(rk, pl.a2a_items()), [&](WgContext& wg) -> WgTask {
    const float* st = wg.local_as<const float>(stage);
    const std::int64_t w = wg.wg(), g = wg.num_wgs();
    for (std::int64_t k = w; k < P; k += g) {
      const int s = order[static_cast<std::size_t>(k)];
      wg.put_signal(s, recv, static_cast<std::size_t>(pl.recv_at[me][s] * N) * sizeof(float),
                    st + pl.stage_at[me][s] * N,
                    static_cast<std::size_t>(pl.rows[me][s] * N) * sizeof(float), arrive + me,
                    SignalOp::add, 1);
    }
    for (int h : order) {
      co_await wg.wait_until(arrive + h, Cmp::ge, target[h]);
      const float* slice = wg.read_as<const float>(recv, pl.recv_at[h][me] * N, pl.rows[h][me] * N);
      wg.compute("unpack", {model::copy(pl.unpack_rows(h, w, g) * N * 4)},
                 [&] { unpack(pl, h, slice, mine, w, g); });
    }
    co_return;
  });
}

}  // namespace

void gemm_alltoall(Rank& rk, const GemmAllToAllArgs& args, Mode mode) {
  detail::check_mode(mode);
  // The mode is part of the rendezvous key, so ranks calling different modes fail at entry.
  const std::string name = std::string("gemm_alltoall ") + to_string(mode);
  const auto all = enter(rk, name, args);
  const Plan pl(args, rk.rank(), rk.size());
  // The cost model's cache term; the staging and receive scratch count themselves.
  rk.declare_working_set(pl.user_bytes());
  // Exchanging output addresses stands for registering / IPC-mapping the peers' outputs: scale_up
  // stores straight into them. Nothing else of another rank is read.
  std::vector<OutRef> outs(static_cast<std::size_t>(pl.P));
  for (int s = 0; s < pl.P; ++s)
    outs[s] = {static_cast<float*>(all[s]->output.data()), all[s]->output.stride(0)};
  leave_args(rk, name);

  switch (mode) {
    case Mode::scale_up: run_scale_up(rk, pl, args.local_experts, outs); break;
    case Mode::scale_out: run_scale_out(rk, pl, args.local_experts, outs[pl.me]); break;
    case Mode::unfused: run_unfused(rk, pl, args.local_experts, outs[pl.me]); break;
  }
  rk.set_activity("returned from " + name);
}

}  // namespace fusedcoll::emu::ops
