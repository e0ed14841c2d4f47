// EmbeddingAllToAll on the emulator: pooled embedding-bag lookups fused with the All-to-All that
// hands every rank the pooled vectors of its own samples (docs/semantics.md, "EmbeddingAllToAll").
//
// The plan (tiles, their order, per-destination tile counts, staging and receive layout) is
// detail/embedding_plan.hpp's, shared with mpi/ and gpu/; this file only says how a tile's rows move
// and how completion is observed. A tile is (local table, block of up to kBagBlock samples of ONE
// destination rank's batch range). Every pooled element is computed by the shared kernel
// `detail::embedding_bag_rows`, so the bits are ref/'s whatever the tiling, the schedule or the
// mode; the rest only moves bytes.
//
// All three modes run a persistent kernel: grid = min(#tiles, max_resident_wgs), and a WG that
// finishes a tile claims the next unclaimed one in the plan's order (`WgContext::claim`), so the
// tiles, whose bags differ in length, spread as a GPU's dispatcher would spread them; which WG
// pools a tile changes no bit. The fused tile list goes table by table, and within each table is
// communication-aware (destinations rank+1, rank+2, ..., the local rank's tiles last).
//
// - scale_up (zero-copy): a WG pools its tile into a WG-local buffer and stores every row segment
//   straight into its final place in the destination's output (whose address the ranks exchanged
//   at entry: the emulator's stand-in for IPC-mapping the peer's buffer), then bumps the
//   per-(source, destination) counter 'emb.from'[source] on the destination. A receiver knows from
//   the agreed arguments how many tiles every source sends it; WG 0, after its own tiles, waits for
//   all those counts. When the kernel returns the output is complete.
// - scale_out: each remote destination q has a staging slice in this rank's symmetric scratch
//   ('emb.stage', [B_q, T_p, D], in q's sample order). Tiles pool straight into it and bump the
//   local done counter of q ('emb.done'[q]); the WG whose increment reaches the slice's tile count
//   is the slice's last one and puts the whole slice into q's receive scratch ('emb.recv': the
//   slices of all sources concatenated in rank order) with ONE put_signal on 'emb.arrive'[me].
//   Tiles of the local rank pool straight into the local output. Then, in the same kernel, every
//   WG waits for each source's slice and unpacks its share of the rows into the output
//   ([B_q, T, D], tables of different owners interleaved by table id): copies only.
// - unfused (the baseline): kernel 1 pools all local bags into L [B, T_p, D] ('emb.local');
//   kernel 2 is the All-to-All: it puts each destination's block [B_q, T_p, D] into the
//   destination's receive scratch with a signal on 'emb.a2a'[me] (every pair, even empty
//   blocks), waits for all P blocks and permutes them into the output, one workgroup per output
//   row up to the resident limit.
//
// Symmetric scratch sizes and slot keys depend only on the agreed (global) arguments, so every
// rank makes the same collective scratch/slots calls. Slot counters are cumulative: targets come
// from Rank::expect, never from resets. Each call starts with the rendezvous of `enter`, so no rank
// can put into a receive buffer a peer is still unpacking from the previous call.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu/ops.hpp"
#include "fusedcoll/detail/embedding_plan.hpp"

namespace fusedcoll::emu::ops {
namespace {

using namespace fusedcoll::detail::embedding;  // Plan, Tile, kBagBlock, pool

/// A rank's output as the other ranks see it: base address and strides in elements.
struct OutRef {
  float* data = nullptr;
  std::int64_t s0 = 0;  // between samples
  std::int64_t s1 = 0;  // between tables
};

/// The cost model's view of `pool` (the rows it gathers are the bags' index count).
model::Work pool_work(const EmbeddingTableShard& sh, std::int64_t dim, std::int64_t b0,
                      std::int64_t b1) {
  if (dim == 0 || b1 <= b0) return model::embedding(0, 0, dim);
  const bool i64 = sh.offsets.dtype() == DType::i64;
  auto at = [&](std::int64_t b) {
    return i64 ? static_cast<const std::int64_t*>(sh.offsets.data())[b]
               : std::int64_t{static_cast<const std::int32_t*>(sh.offsets.data())[b]};
  };
  return model::embedding(at(b1) - at(b0), b1 - b0, dim, i64 ? 8 : 4,
                          sh.per_sample_weights.data() != nullptr);
}

/// Copies rows `i = first, first + step, ...` of the block [B_me, T_p, D] received from `p` into
/// their places in this rank's output (Plan::unpack_floats prices it).
void unpack(const Plan& pl, int p, const float* block, const OutRef& out, std::int64_t first,
            std::int64_t step) {
  if (pl.D == 0) return;
  const std::int64_t tpp = pl.tp[p];
  const std::size_t row_bytes = static_cast<std::size_t>(pl.D) * sizeof(float);
  for (std::int64_t i = first; i < pl.batch[pl.me]; i += step)
    for (std::int64_t k = 0; k < tpp; ++k)
      std::memcpy(out.data + i * out.s0 + pl.ids[p][k] * out.s1, block + (i * tpp + k) * pl.D,
                  row_bytes);
}

void run_scale_up(Rank& rk, const Plan& pl, const std::vector<EmbeddingTableShard>& shards,
                  const std::vector<OutRef>& outs) {
  const int P = pl.P, me = pl.me;
  const int from = rk.slots("emb.from", P);
  std::vector<std::uint64_t> target(P);
  for (int p = 0; p < P; ++p)
    target[p] = rk.expect(from + p, static_cast<std::uint64_t>(pl.tiles(p, me)));
  const std::vector<Tile> tiles = pl.fused_tiles();
  const int grid = grid_for(rk, tiles.size());
  const std::int64_t D = pl.D;
  rk.launch("embedding_alltoall scale_up", grid, [&](WgContext& wg) -> WgTask {
    std::vector<float> buf(static_cast<std::size_t>(kBagBlock * D));
    const std::size_t row_bytes = static_cast<std::size_t>(D) * sizeof(float);
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= tiles.size()) break;
      const Tile& tl = tiles[i];
      const std::int64_t t = pl.ids[me][tl.k];
      const std::int64_t b0 = pl.start[tl.q] + tl.i0, b1 = pl.start[tl.q] + tl.i1;
      wg.compute("pool", {pool_work(shards[tl.k], D, b0, b1)},
                 [&] { pool(shards[tl.k], D, pl.pooling, b0, b1, buf.data(), D); });
      if (D > 0) {
        const OutRef& o = outs[tl.q];
        for (std::int64_t r = 0; r < tl.i1 - tl.i0; ++r)
          wg.store(tl.q, o.data + (tl.i0 + r) * o.s0 + t * o.s1, buf.data() + r * D, row_bytes);
      }
      wg.signal(tl.q, from + me, SignalOp::add, 1);
    }
    if (wg.wg() == 0)
      for (int p : remote_first(me, P)) co_await wg.wait_until(from + p, Cmp::ge, target[p]);
    co_return;
  });
}

void run_scale_out(Rank& rk, const Plan& pl, const std::vector<EmbeddingTableShard>& shards,
                   const OutRef& mine) {
  const int P = pl.P, me = pl.me;
  const SymBuffer stage = rk.scratch("emb.stage", pl.stage_bytes());
  const SymBuffer recv = rk.scratch("emb.recv", pl.recv_bytes());
  const int done = rk.slots("emb.done", P);
  const int arrive = rk.slots("emb.arrive", P);
  std::vector<std::uint64_t> done_target(P, 0), arrive_target(P, 0);
  for (int q = 0; q < P; ++q)
    if (q != me) done_target[q] = rk.expect(done + q, static_cast<std::uint64_t>(pl.tiles(me, q)));
  // A source sends a slice (one signal) exactly when it has tiles for us.
  for (int p = 0; p < P; ++p)
    if (p != me) arrive_target[p] = rk.expect(arrive + p, pl.tiles(p, me) > 0 ? 1 : 0);
  const std::vector<Tile> tiles = pl.fused_tiles();
  const int grid = grid_for(rk, tiles.size());
  const std::int64_t D = pl.D, tpm = pl.tp[me];
  rk.launch("embedding_alltoall scale_out", grid, [&](WgContext& wg) -> WgTask {
    float* st = wg.local_as<float>(stage);
    // Phase 1: tiles. Remote ones fill q's staging slice; the slice's last WG sends it.
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= tiles.size()) break;
      const Tile& tl = tiles[i];
      const std::int64_t b0 = pl.start[tl.q] + tl.i0, b1 = pl.start[tl.q] + tl.i1;
      if (tl.q == me) {
        if (D > 0) {
          float* dst = mine.data + tl.i0 * mine.s0 + pl.ids[me][tl.k] * mine.s1;
          wg.compute("pool", {pool_work(shards[tl.k], D, b0, b1)},
                     [&] { pool(shards[tl.k], D, pl.pooling, b0, b1, dst, mine.s0); });
        }
        continue;
      }
      float* slice = st + pl.stage_offset(tl.q);  // [B_q, T_me, D]
      wg.compute("pool", {pool_work(shards[tl.k], D, b0, b1)}, [&] {
        pool(shards[tl.k], D, pl.pooling, b0, b1, slice + (tl.i0 * tpm + tl.k) * D, tpm * D);
      });
      const std::uint64_t now = wg.add_local(done + tl.q, 1);
      if (now == done_target[tl.q]) {
        wg.put_signal(tl.q, recv,
                      static_cast<std::size_t>(pl.recv_offset(me, tl.q)) * sizeof(float), slice,
                      static_cast<std::size_t>(pl.slice_floats(me, tl.q)) * sizeof(float),
                      arrive + me, SignalOp::add, 1);
      }
    }
    // Phase 2: every WG unpacks its share of each received slice once it has landed.
    const std::int64_t w = wg.wg(), g = wg.num_wgs();
    for (int p : remote_first(me, P)) {
      if (p == me || pl.tiles(p, me) == 0) continue;
      co_await wg.wait_until(arrive + p, Cmp::ge, arrive_target[p]);
      const float* block =
          wg.read_as<const float>(recv, pl.recv_offset(p, me), pl.slice_floats(p, me));
      wg.compute("unpack", {model::copy(pl.unpack_floats(p, w, g) * 4)},
                 [&] { unpack(pl, p, block, mine, w, g); });
    }
    co_return;
  });
}

void run_unfused(Rank& rk, const Plan& pl, const std::vector<EmbeddingTableShard>& shards,
                 const OutRef& mine) {
  const int P = pl.P, me = pl.me;
  const SymBuffer local = rk.scratch("emb.local", pl.stage_bytes());
  const SymBuffer recv = rk.scratch("emb.recv", pl.recv_bytes());
  const int arrive = rk.slots("emb.a2a", P);
  const std::int64_t D = pl.D, tpm = pl.tp[me];

  // Kernel 1: pool every local bag into L [B, T_me, D].
  const std::vector<Tile> tiles = pl.unfused_tiles();
  rk.launch("embedding_bag", grid_for(rk, tiles.size()), [&](WgContext& wg) -> WgTask {
    float* l = wg.local_as<float>(local);
    for (;;) {
      const auto i = static_cast<std::size_t>(co_await wg.claim());
      if (i >= tiles.size()) break;
      const Tile& tl = tiles[i];
      wg.compute("pool", {pool_work(shards[tl.k], D, tl.i0, tl.i1)}, [&] {
        pool(shards[tl.k], D, pl.pooling, tl.i0, tl.i1, l + (tl.i0 * tpm + tl.k) * D, tpm * D);
      });
    }
    co_return;
  });

  // Kernel 2: the All-to-All(v) and the permutation into table-id order.
  std::vector<std::uint64_t> target(P);
  for (int p = 0; p < P; ++p) target[p] = rk.expect(arrive + p, 1);
  const std::vector<int> order = remote_first(me, P);
  // One workgroup per output row (Plan::a2a_items), not per peer.
  rk.launch("embedding_alltoall a2a", grid_for(rk, pl.a2a_items()), [&](WgContext& wg) -> WgTask {
    const float* l = wg.local_as<const float>(local);
    const std::int64_t w = wg.wg(), g = wg.num_wgs();
    for (std::int64_t j = w; j < P; j += g) {
      const int q = order[static_cast<std::size_t>(j)];
      wg.put_signal(q, recv, static_cast<std::size_t>(pl.recv_offset(me, q)) * sizeof(float),
                    l + pl.stage_offset(q),
                    static_cast<std::size_t>(pl.slice_floats(me, q)) * sizeof(float), arrive + me,
                    SignalOp::add, 1);
    }
    for (int p : order) {
      co_await wg.wait_until(arrive + p, Cmp::ge, target[p]);
      const float* block =
          wg.read_as<const float>(recv, pl.recv_offset(p, me), pl.slice_floats(p, me));
      wg.compute("unpack", {model::copy(pl.unpack_floats(p, w, g) * 4)},
                 [&] { unpack(pl, p, block, mine, w, g); });
    }
    co_return;
  });
}

}  // namespace

void embedding_alltoall(Rank& rk, const EmbeddingAllToAllArgs& args, Mode mode) {
  detail::check_mode(mode);
  // The mode is part of the rendezvous key, so ranks calling different modes fail at entry.
  const std::string name = std::string("embedding_alltoall ") + to_string(mode);
  const auto all = enter(rk, name, args);
  const Plan pl(args, rk.rank(), rk.size());
  // Exchanging output addresses stands for registering / IPC-mapping the peers' outputs: scale_up
  // stores straight into them. Nothing else of another rank is read.
  std::vector<OutRef> outs(static_cast<std::size_t>(pl.P));
  for (int q = 0; q < pl.P; ++q) {
    const TensorView& o = all[q]->output;
    outs[q] = {static_cast<float*>(o.data()), o.stride(0), o.stride(1)};
  }
  leave_args(rk, name);

  switch (mode) {
    case Mode::scale_up: run_scale_up(rk, pl, args.local_tables, outs); break;
    case Mode::scale_out: run_scale_out(rk, pl, args.local_tables, outs[pl.me]); break;
    case Mode::unfused: run_unfused(rk, pl, args.local_tables, outs[pl.me]); break;
  }
  rk.set_activity("returned from " + name);
}

}  // namespace fusedcoll::emu::ops
