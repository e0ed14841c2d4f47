// The emulator's collectives with a compressed wire (docs/compression.md): the schedules of
// collectives.cpp with encoded bytes in the puts. Every reduction runs in f32 on decoded values,
// with the encode and decode points and element indices of ref/compressed.cpp, so the bits are
// ref's. Tiles are cut in f32 elements (Tiling::elems(len, 4)) on both ends, and a tile's wire bytes
// sit at `index * wire_size` in scratch.
//
// A reduction reads its contribution from `send` in place, except when it must be a copy
// (detail::contribution_view): divided by P for a predivided `avg`, or an in-place call, whose
// early writes to recv must not change what is still to be sent.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "emu/collectives.hpp"
#include "emu/ops.hpp"
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/wire.hpp"

namespace fusedcoll::emu::ops {
namespace {

using fusedcoll::detail::WirePlan;
using fusedcoll::detail::WireSource;

/// The cost model's view of encoding / decoding `n` values with `plan`.
model::Work enc_work(const WirePlan& plan, int64_t n) {
  return model::encode(plan.format, n, !plan.scales.empty());
}
model::Work dec_work(const WirePlan& plan, int64_t n) {
  return model::decode(plan.format, n, !plan.scales.empty());
}

/// Agrees the scales: this rank's amax table (of `segments`, each {data, length}, indices from
/// `first`), a max-AllReduce of the tables through the host rendezvous, then the plan. The plan
/// is built after the barrier, so that a NaN amax throws InvalidArgument on every rank alike once
/// no rank reads another's table any more.
struct Run {
  const float* data;
  int64_t first;
  int64_t length;
};
WirePlan agree_plan(Rank& rk, const std::string& op, const CompressionOptions& wire,
                    const std::vector<Run>& runs, float headroom) {
  std::vector<float> mine = fusedcoll::detail::empty_amax(wire);
  if (resolved_scaling(wire) != Scaling::none) {
    // The amax pass is a kernel of its own (a reduction over the device on a GPU, a loop over the
    // data on the MPI backend), so that virtual time prices it: each workgroup folds its tiles
    // into a table of its own; max is exact in any order, so the combined table is the same.
    struct Piece {
      const float* data;
      int64_t first, length;
    };
    std::vector<Piece> pieces;
    const Tiling tl = tiling_of(rk);
    for (const Run& r : runs) {
      const int64_t te = tl.elems(r.length, sizeof(float));
      for (int t = 0; t < num_tiles(r.length, te); ++t) {
        const Span s = tile_of(r.length, te, t);
        pieces.push_back({r.data + s.begin, r.first + s.begin, s.length});
      }
    }
    const int grid = grid_for(rk, pieces.size());
    std::vector<std::vector<float>> tables(static_cast<std::size_t>(grid), mine);
    rk.launch(op + ".amax", grid, [&](WgContext& wg) -> WgTask {
      auto& table = tables[static_cast<std::size_t>(wg.wg())];
      for (std::size_t i = wg.wg(); i < pieces.size(); i += wg.num_wgs())
        wg.compute("amax", {model::amax(pieces[i].length)}, [&] {
          fusedcoll::detail::accumulate_amax(wire, table, pieces[i].data, pieces[i].first,
                                             pieces[i].length);
        });
      co_return;
    });
    for (const auto& t : tables) fusedcoll::detail::combine_amax(mine, t);
  }
  std::vector<float> agreed = fusedcoll::detail::empty_amax(wire);
  for (const void* p : rk.exchange(op + ".amax", &mine))
    fusedcoll::detail::combine_amax(agreed, *static_cast<const std::vector<float>*>(p));
  leave_args(rk, op);  // also ends the window in which the peers' tables are read
  return fusedcoll::detail::make_plan(wire, agreed, headroom);
}

struct WireReduce {
  std::string key;
  Parts parts;  // in elements
  ReduceOp op = ReduceOp::sum;
  CompressionOptions wire;
  bool gather = false;       // AllReduce direct: the finished parts travel encoded to every rank
  const float* y = nullptr;  // this rank's contribution, all parts
  float* recv = nullptr;     // gather: the full result; else this rank's part only
};

/// Owner reduction with a compressed wire: every contribution to part q, owner's included, is
/// encoded by its sender; the owner decodes and folds them in rank order in f32. With gather the
/// owner encodes the finished part once and every rank, owner included, decodes it.
void owner_reduce_wire(Rank& rk, const WireReduce& spec, const WirePlan& plan) {
  const int P = rk.size(), me = rk.rank();
  const std::size_t we = plan.elem();

  OwnerPlan owner = owner_plan(rk, spec.parts, sizeof(float), spec.gather);
  const SymBuffer in = rk.scratch(spec.key + ".in", bytes_of(owner.inbox_elems(), we));
  const SymBuffer out =
      rk.scratch(spec.key + ".out", bytes_of(spec.gather ? spec.parts.total : 0, we));
  const OwnerSchedule sc = owner_schedule(rk, spec.key, std::move(owner));
  const OwnerPlan& pl = sc.plan;
  if (pl.parts.max_len == 0) return;

  rk.launch(spec.key, grid_for(rk, pl.most_items()), [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    std::vector<std::byte> enc;
    std::vector<WireSource> srcs(static_cast<std::size_t>(P));
    // 1. Scatter: encode this rank's slice of part q and put it into owner q's row `me`.
    for (std::size_t i = w; i < pl.scatter.size(); i += G) {
      const Item& it = pl.scatter[i];
      const Span s = pl.span(it);
      const int64_t first = pl.at(it);
      enc.resize(bytes_of(s.length, we));
      wg.compute("encode", {enc_work(plan, s.length)}, [&] {
        fusedcoll::detail::wire_encode(plan, spec.y + first, first, s.length, enc.data());
      });
      wg.put_signal(it.peer, in, bytes_of(pl.inbox_at(me) + s.begin, we), enc.data(), enc.size(),
                    sc.in_slot + it.tile, SignalOp::add, 1);
    }
    // 2. Reduce part me in one fused pass: decode every contribution (own: encoded and decoded
    //    here), fold in rank order in f32; with gather, encode the finished tile for the peers
    //    and decode it into recv.
    for (std::size_t i = w; i < pl.reduce.size(); i += G) {
      const int t = pl.reduce[i].tile;
      co_await wg.wait_until(sc.in_slot + t, Cmp::ge, sc.in_target[t]);
      const Span s = pl.span(pl.reduce[i]);
      const int64_t first = pl.at(pl.reduce[i]);
      const std::size_t wbytes = bytes_of(s.length, we);
      for (int p = 0; p < P; ++p)
        srcs[p] = p == me ? WireSource{WireSource::Kind::round_trip, spec.y + first}
                          : WireSource{WireSource::Kind::wire,
                                       wg.read(in, bytes_of(pl.inbox_at(p) + s.begin, we), wbytes)};
      std::byte* fin = spec.gather ? wg.local(out) + bytes_of(first, we) : nullptr;
      const int divide = fusedcoll::detail::divides_after(spec.op, spec.wire) ? P : 0;
      const auto cost = model::wire_reduce(plan.format, s.length, !plan.scales.empty(), P - 1, 1, 0,
                                           spec.gather);
      wg.compute("reduce", {cost[0], cost[1], cost[2]}, [&] {
        fusedcoll::detail::wire_reduce(plan, spec.op, srcs, first, s.length, divide, fin,
                                       spec.gather ? spec.recv + first : spec.recv + s.begin);
      });
      if (spec.gather)
        for (int q : pl.order)
          if (q != me)
            wg.put_signal(q, out, bytes_of(first, we), fin, wbytes, sc.out_slot_of(me, t),
                          SignalOp::add, 1);
    }
    // 3. Gather: decode the other owners' finished parts as their tiles arrive.
    for (std::size_t i = w; i < pl.collect.size(); i += G) {
      const Item& it = pl.collect[i];
      co_await wg.wait_until(sc.out_slot_of(it.peer, it.tile), Cmp::ge,
                             sc.out_target[it.peer * sc.mt + it.tile]);
      const Span s = pl.span(it);
      const int64_t at = pl.at(it);
      const std::byte* got = wg.read(out, bytes_of(at, we), bytes_of(s.length, we));
      wg.compute("decode", {dec_work(plan, s.length)},
                 [&] { fusedcoll::detail::wire_decode(plan, got, at, s.length, spec.recv + at); });
    }
    co_return;
  });
}

/// Ring AllReduce with a compressed wire: the running value of a chunk leaves its first rank
/// encoded; each later rank decodes it, adds its own f32 value and re-encodes it; the owner
/// encodes the finished chunk once, and the ring all-gather forwards those bytes unchanged. Each
/// fold is one pass (detail::wire_reduce) that also encodes its result for the next rank (the
/// owner's: into its all-gather slot, decoded into recv), so no running value is stored in f32.
void all_reduce_ring_wire(Rank& rk, const AllReduceArgs& args, const float* y,
                          const WirePlan& plan) {
  const int P = rk.size();
  const std::size_t we = plan.elem();
  // Scratch holds wire elements: `rs` step s receives the running chunk recv_chunk(s) encoded,
  // `ag` the finished chunks, this rank's own included. Tiles are cut in f32 elements.
  const RingSchedule sc = ring_schedule(rk, "all_reduce.ring.wire", args.count, sizeof(float), we);
  if (args.count == 0) return;
  const RingPlan& pl = sc.plan;
  const SymBuffer &rs = sc.rs, &ag = sc.ag;
  const int steps = pl.steps, nt = pl.tiles;
  const auto& off = pl.parts.off;

  auto* recv = static_cast<float*>(args.recv);
  const bool scaled = !plan.scales.empty();

  rk.launch("all_reduce_ring_wire", grid_for(rk, nt), [&](WgContext& wg) -> WgTask {
    const int w = wg.wg(), G = wg.num_wgs();
    std::vector<std::byte> enc;
    // Step 0 sends this rank's own value of its first chunk, encoded.
    const int c0 = pl.send_chunk(0);
    for (int t = w; t < nt; t += G) {
      const Span sp = pl.span(c0, t);
      const int64_t first = off[c0] + sp.begin;
      enc.resize(bytes_of(sp.length, we));
      wg.compute("encode", {enc_work(plan, sp.length)},
                 [&] { fusedcoll::detail::wire_encode(plan, y + first, first, sp.length, enc.data()); });
      wg.put_signal(pl.next, rs, bytes_of(sp.begin, we), enc.data(), enc.size(), sc.rs_at(0, t),
                    SignalOp::add, 1);
    }
    // Step s receives the running chunk recv_chunk(s) and folds its own value in. Before the
    // last step the sum, encoded, is step s + 1's send; the last one finishes chunk me: encoded
    // into this rank's own slot of `ag` (no peer writes there), decoded into recv, and forwarded
    // as the all-gather's step 0.
    for (int s = 0; s < steps; ++s) {
      const int c = pl.recv_chunk(s);
      const bool last = s == steps - 1;
      for (int t = w; t < nt; t += G) {
        co_await wg.wait_until(sc.rs_at(s, t), Cmp::ge, sc.rs_until(s, t));
        const Span sp = pl.span(c, t);
        const int64_t first = off[c] + sp.begin;
        const std::byte* got =
            wg.read(rs, bytes_of(pl.region_at(s) + sp.begin, we), bytes_of(sp.length, we));
        enc.resize(bytes_of(sp.length, we));
        std::byte* fin = last ? wg.local(ag) + bytes_of(first, we) : enc.data();
        const int divide = last && fusedcoll::detail::divides_after(args.op, args.wire) ? P : 0;
        const auto cost =
            model::wire_reduce(plan.format, sp.length, scaled, 1, 0, 1, true, /*decode_result=*/last);
        wg.compute("reduce", {cost[0], cost[1], cost[2]}, [&] {
          fusedcoll::detail::wire_reduce(plan, args.op,
                                         {{WireSource::Kind::wire, got},
                                          {WireSource::Kind::plain, y + first}},
                                         first, sp.length, divide, fin, last ? recv + first : nullptr);
        });
        if (last)
          wg.put_signal(pl.next, ag, bytes_of(first, we), fin, bytes_of(sp.length, we),
                        sc.ag_at(0, t), SignalOp::add, 1);
        else
          wg.put_signal(pl.next, rs, bytes_of(pl.region_at(s + 1) + sp.begin, we), fin,
                        bytes_of(sp.length, we), sc.rs_at(s + 1, t), SignalOp::add, 1);
      }
    }
    // All-gather step g >= 1: forward the chunk received at step g - 1, decoding it on the way;
    // then decode the chunk received at the last step.
    for (int g = 1; g <= steps; ++g) {
      const int c = pl.gather_chunk(g);
      for (int t = w; t < nt; t += G) {
        co_await wg.wait_until(sc.ag_at(g - 1, t), Cmp::ge, sc.ag_until(g - 1, t));
        const Span sp = pl.span(c, t);
        const int64_t at = off[c] + sp.begin;
        const std::size_t bytes = bytes_of(sp.length, we);
        const std::byte* got = wg.read(ag, bytes_of(at, we), bytes);
        wg.compute("decode", {dec_work(plan, sp.length)},
                   [&] { fusedcoll::detail::wire_decode(plan, got, at, sp.length, recv + at); });
        if (g < steps)
          wg.put_signal(pl.next, ag, bytes_of(at, we), got, bytes, sc.ag_at(g, t),
                        SignalOp::add, 1);
      }
    }
    co_return;
  });
}

/// Chain AllReduce with a compressed wire (P > 1): every element's running value leaves rank 0
/// encoded; rank r = 1, ..., P - 1 decodes it, adds its own f32 value (received value on the left)
/// and encodes the sum in one fused pass, tile by tile, so the ranks work as a pipeline; the last
/// rank divides (avg) and encodes the finished tile once. The finished bytes are relayed back,
/// P-1 -> P-2 -> ... -> 0, unchanged: each link then carries every element at most twice (the
/// running value forward, the result back), where the last rank putting the result to every peer
/// would load its one egress link P - 1 times; and between two groups of consecutive ranks (two
/// hosts) each element crosses once each way, never twice over one NIC.
void all_reduce_chain_wire(Rank& rk, const AllReduceArgs& args, const float* y,
                           const WirePlan& plan) {
  const int P = rk.size();
  const std::size_t we = plan.elem();
  const int64_t n = args.count;
  const Tiling tl = tiling_of(rk);
  const ChainPlan pl(n, rk.rank(), P, tl, sizeof(float), ChainPlan::Return::relay);
  const int nt = pl.tiles;

  // `run`: the running value from rank me - 1; `res`: the finished result (the last rank encodes
  // it into its own copy, the others receive it there from rank + 1).
  const SymBuffer run = rk.scratch("all_reduce.chain.wire.run", bytes_of(n, we));
  const SymBuffer res = rk.scratch("all_reduce.chain.wire.res", bytes_of(n, we));
  const int run_slot = rk.slots("all_reduce.chain.wire.run", tl.max_tiles);  // [tile]
  const int res_slot = rk.slots("all_reduce.chain.wire.res", tl.max_tiles);  // [tile]
  if (n == 0) return;

  // Rank 0 receives no running value, the last rank no result: they expect nothing there.
  std::vector<std::uint64_t> run_target(static_cast<std::size_t>(nt)),
      res_target(static_cast<std::size_t>(nt));
  for (int t = 0; t < nt; ++t) {
    if (!pl.first()) run_target[t] = rk.expect(run_slot + t, 1);
    if (pl.result_from >= 0) res_target[t] = rk.expect(res_slot + t, 1);
  }
  auto* recv = static_cast<float*>(args.recv);
  const bool scaled = !plan.scales.empty();
  const int divide = fusedcoll::detail::divides_after(args.op, args.wire) ? P : 0;

  rk.launch("all_reduce_chain_wire", grid_for(rk, nt), [&](WgContext& wg) -> WgTask {
    const int w = wg.wg(), G = wg.num_wgs();
    std::vector<std::byte> enc;
    for (int t = w; t < nt; t += G) {
      const Span sp = pl.span(t);
      const std::size_t at = bytes_of(sp.begin, we), bytes = bytes_of(sp.length, we);
      if (pl.first()) {
        enc.resize(bytes);
        wg.compute("encode", {enc_work(plan, sp.length)}, [&] {
          fusedcoll::detail::wire_encode(plan, y + sp.begin, sp.begin, sp.length, enc.data());
        });
        wg.put_signal(pl.next, run, at, enc.data(), bytes, run_slot + t, SignalOp::add, 1);
        continue;
      }
      co_await wg.wait_until(run_slot + t, Cmp::ge, run_target[t]);
      const std::vector<WireSource> srcs = {{WireSource::Kind::wire, wg.read(run, at, bytes)},
                                            {WireSource::Kind::plain, y + sp.begin}};
      if (!pl.last()) {
        // Only the encoded running value is written: the fused pass's encode, and no decode of
        // it into an f32 output.
        enc.resize(bytes);
        const auto cost =
            model::wire_reduce(plan.format, sp.length, scaled, 1, 0, 1, true, /*decode_result=*/false);
        wg.compute("reduce", {cost[0], cost[1], cost[2]}, [&] {
          fusedcoll::detail::wire_reduce(plan, args.op, srcs, sp.begin, sp.length, 0, enc.data(),
                                         nullptr);
        });
        wg.put_signal(pl.next, run, at, enc.data(), bytes, run_slot + t, SignalOp::add, 1);
      } else {
        std::byte* fin = wg.local(res) + at;
        const auto cost = model::wire_reduce(plan.format, sp.length, scaled, 1, 0, 1, true);
        wg.compute("reduce", {cost[0], cost[1], cost[2]}, [&] {
          fusedcoll::detail::wire_reduce(plan, args.op, srcs, sp.begin, sp.length, divide, fin,
                                         recv + sp.begin);
        });
        for (int q : pl.result_to)
          wg.put_signal(q, res, at, fin, bytes, res_slot + t, SignalOp::add, 1);
      }
    }
    if (pl.result_from < 0) co_return;
    // The relay: forward the finished bytes first (rank - 1 waits on them), then decode.
    for (int t = w; t < nt; t += G) {
      co_await wg.wait_until(res_slot + t, Cmp::ge, res_target[t]);
      const Span sp = pl.span(t);
      const std::size_t at = bytes_of(sp.begin, we), bytes = bytes_of(sp.length, we);
      const std::byte* got = wg.read(res, at, bytes);
      for (int q : pl.result_to)
        wg.put_signal(q, res, at, got, bytes, res_slot + t, SignalOp::add, 1);
      wg.compute("decode", {dec_work(plan, sp.length)}, [&] {
        fusedcoll::detail::wire_decode(plan, got, sp.begin, sp.length, recv + sp.begin);
      });
    }
    co_return;
  });
}

/// An exchange (collectives.hpp) with a compressed wire: every block, this rank's own included,
/// is encoded by its sender (block indices restarting at 0 in every block) and decoded by its
/// receiver. Tiles are cut in f32 elements; scratch holds wire bytes.
void exchange_wire(Rank& rk, const std::string& key, const std::string& kernel,
                   const ExchangePlan& ex, const WirePlan& plan, const float* send, float* recv) {
  const int me = rk.rank();
  const std::size_t we = plan.elem();
  const ExchangeSchedule sc = exchange_schedule(rk, key, ex, we);
  if (ex.inbox == 0) return;
  const int mt = sc.mt;

  const int grid = grid_for(rk, std::max(ex.sends.size(), ex.receives.size()));
  rk.launch(kernel, grid, [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    std::vector<std::byte> enc;
    for (std::size_t i = w; i < ex.sends.size(); i += G) {
      const int q = ex.sends[i].peer, t = ex.sends[i].tile;
      const Span s = ex.send_span(ex.sends[i]);
      enc.resize(bytes_of(s.length, we));
      wg.compute("encode", {enc_work(plan, s.length)}, [&] {
        fusedcoll::detail::wire_encode(plan, send + ex.send_at[q] + s.begin, s.begin, s.length,
                                       enc.data());
      });
      if (q == me)
        wg.compute("decode", {dec_work(plan, s.length)}, [&] {
          fusedcoll::detail::wire_decode(plan, enc.data(), s.begin, s.length,
                                         recv + ex.recv_at[me] + s.begin);
        });
      else
        wg.put_signal(q, sc.box, bytes_of(ex.put_at[q] + s.begin, we), enc.data(), enc.size(),
                      sc.slot + me * mt + t, SignalOp::add, 1);
    }
    for (std::size_t i = w; i < ex.receives.size(); i += G) {
      const int p = ex.receives[i].peer, t = ex.receives[i].tile;
      co_await wg.wait_until(sc.slot + p * mt + t, Cmp::ge, sc.target[p * mt + t]);
      const Span s = ex.recv_span(ex.receives[i]);
      const std::byte* got =
          wg.read(sc.box, bytes_of(ex.box_at[p] + s.begin, we), bytes_of(s.length, we));
      wg.compute("decode", {dec_work(plan, s.length)}, [&] {
        fusedcoll::detail::wire_decode(plan, got, s.begin, s.length, recv + ex.recv_at[p] + s.begin);
      });
    }
    co_return;
  });
}

}  // namespace

void all_reduce_wire(Rank& rk, const AllReduceArgs& args) {
  const int P = rk.size();
  std::vector<float> storage;
  const float* y = fusedcoll::detail::contribution_view(args.send, args.send == args.recv,
                                                        args.count, args.op, args.wire, P, storage);
  const WirePlan plan = agree_plan(rk, "all_reduce", args.wire, {{y, 0, args.count}},
                                   fusedcoll::detail::reduction_headroom(args.op, P));
  if (args.algo == AllReduceAlgo::ring && P > 1) {
    all_reduce_ring_wire(rk, args, y, plan);
    return;
  }
  if (args.algo == AllReduceAlgo::chain && P > 1) {
    all_reduce_chain_wire(rk, args, y, plan);
    return;
  }
  owner_reduce_wire(rk,
                    {.key = "all_reduce.direct.wire",
                     .parts = Parts::chunks(args.count, P),
                     .op = args.op,
                     .wire = args.wire,
                     .gather = true,
                     .y = y,
                     .recv = static_cast<float*>(args.recv)},
                    plan);
}

void reduce_scatter_wire(Rank& rk, const ReduceScatterArgs& args) {
  const int P = rk.size();
  Parts parts = Parts::counts(args.recv_counts);
  const int64_t at = parts.total;
  std::vector<float> storage;
  // In place for ReduceScatter means recv inside send: compare by overlap, not equality.
  const auto* send = static_cast<const float*>(args.send);
  const auto* recv = static_cast<const float*>(args.recv);
  const bool overlaps = recv < send + at && send < recv + parts.len[rk.rank()];
  const float* y =
      fusedcoll::detail::contribution_view(args.send, overlaps, at, args.op, args.wire, P, storage);
  const WirePlan plan = agree_plan(rk, "reduce_scatter", args.wire, {{y, 0, at}},
                                   fusedcoll::detail::reduction_headroom(args.op, P));
  owner_reduce_wire(rk,
                    {.key = "reduce_scatter.wire",
                     .parts = std::move(parts),
                     .op = args.op,
                     .wire = args.wire,
                     .gather = false,
                     .y = y,
                     .recv = static_cast<float*>(args.recv)},
                    plan);
}

/// AllGather with a compressed wire: each contribution is encoded by its sender (block indices
/// restart at 0 in every contribution), and every rank, the sender included, decodes it.
void all_gather_wire(Rank& rk, const AllGatherArgs& args) {
  const int64_t n_me = args.recv_counts[rk.rank()];
  const auto* send = static_cast<const float*>(args.send);
  const std::vector<float> y(send, send + n_me);
  const ExchangePlan ex = all_gather_plan(rk, args);
  const WirePlan plan = agree_plan(rk, "all_gather", args.wire, {{y.data(), 0, n_me}}, 1.0f);
  exchange_wire(rk, "all_gather.wire", "all_gather_wire", ex, plan, y.data(),
                static_cast<float*>(args.recv));
}

/// All-to-All(v) with a compressed wire: every segment, the self-segment included, arrives as
/// decode(encode(x)), block indices restarting at 0 in every segment.
void all_to_allv_wire(Rank& rk, const AllToAllvArgs& args, const ExchangePlan& ex) {
  const int P = rk.size();
  const auto* send = static_cast<const float*>(args.send);
  std::vector<Run> runs;
  for (int q = 0; q < P; ++q) runs.push_back({send + args.send_displs[q], 0, args.send_counts[q]});
  const WirePlan plan = agree_plan(rk, "all_to_allv", args.wire, runs, 1.0f);  // ends args reads
  exchange_wire(rk, "all_to_allv.wire", "all_to_allv_wire", ex, plan, send,
                static_cast<float*>(args.recv));
}

}  // namespace fusedcoll::emu::ops
