// The emulator's standalone collectives: AllReduce (direct and ring), All-to-All(v),
// ReduceScatter, AllGather and Broadcast, as kernels of workgroups that move data with one-sided
// puts into the peers' symmetric scratch buffers and wait on signal slots.
//
// Common shape of every call:
//   1. `enter` checks the call on every rank (nothing moves before that), the host copies what it
//      needs from the other ranks' argument structs (only All-to-All(v) needs anything), then
//      `leave_args`.
//   2. The host builds the call's plan (detail/collective_plan.hpp: who sends which tile to whom,
//      in which order), reserves scratch buffers and signal slots (collective, identical on every
//      rank) and computes the cumulative target of every slot this rank will wait on in this call
//      (collectives.hpp).
//   3. One persistent kernel: `G = min(work items, max_resident_wgs)` workgroups, all resident at
//      once, deal the plan's items out round-robin. Sends never wait, so no workgroup can wait on
//      one that never becomes resident.
//
// Data is cut into the plan's tiles (Tiling: as a GPU collective spreads a chunk over its compute
// units, a segment is spread over the workgroups the device holds, 4-64 KiB a tile, larger only so
// that a segment has at most max_tiles of them); a tile is a set of whole elements, so tiling
// never changes a bit. Each (segment, tile) has its own slot, signalled once per call by the put
// that fills it, so a receiver works on a tile as soon as it has arrived. Every region of scratch
// is written at most once per call, so nothing is overwritten before it is consumed. Across calls
// the buffers and slots are reused: `enter` meets every rank, and a rank only gets there after all
// its kernels of the previous call finished.
//
// Reduction order (docs/semantics.md, "Collectives"): the owner of an element folds the ranks'
// values with detail::reduce_into in the pinned order, whatever order they arrived in; `avg` then
// divides with detail::finish_average. The bits therefore equal ref/'s.
//
// With `wire.format != none` the four compressible collectives take separate kernels
// (compressed.cpp) with the same plans; puts carry encoded bytes.
//
// User buffers are only ever touched by their own rank: data crosses ranks through symmetric
// scratch only. In-place calls work because a rank overwrites its part `x` of `recv` only after
// its own contribution to `x` has been read (causally: the result of `x` cannot exist before
// every contribution to it was read), and tiles never straddle parts.

#include "emu/collectives.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "emu/ops.hpp"
#include "fusedcoll/detail/kernels.hpp"

namespace fusedcoll::emu::ops {
namespace {

struct OwnerReduce {
  std::string key;  // scratch and slot names
  Parts parts;      // in elements of the send buffer
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  bool gather = false;  // AllReduce: every rank receives every part
  const void* send = nullptr;
  void* recv = nullptr;  // gather: the full result; else this rank's part only
};

void owner_reduce(Rank& rk, const OwnerReduce& spec) {
  const int P = rk.size(), me = rk.rank();
  const std::size_t elem = dtype_size(spec.dtype);
  const int64_t max_len = spec.parts.max_len;

  // Scratch (collective; sizes agree because the parts do). `in`: the plan's inbox, where part
  // me's contributions land. `out`: the folded results; with gather, in the layout of the full
  // buffer (part q at off[q]) on every rank, else this rank's part alone.
  OwnerPlan plan = owner_plan(rk, spec.parts, elem, spec.gather);
  const SymBuffer in = rk.scratch(spec.key + ".in", bytes_of(plan.inbox_elems(), elem));
  const SymBuffer out =
      rk.scratch(spec.key + ".out", bytes_of(spec.gather ? spec.parts.total : max_len, elem));
  const OwnerSchedule sc = owner_schedule(rk, spec.key, std::move(plan));
  const OwnerPlan& pl = sc.plan;
  if (max_len == 0) return;  // nothing moves; every rank agrees

  const auto* send = cbytes(spec.send);
  auto* recv = mbytes(spec.recv);
  const int64_t my_base = spec.gather ? pl.parts.off[me] : 0;  // of part me in `out` and `recv`

  rk.launch(spec.key, grid_for(rk, pl.most_items()), [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    // 1. Scatter: this rank's slice of part q goes to owner q's row `me` (remote owners first).
    for (std::size_t i = w; i < pl.scatter.size(); i += G) {
      const Item& it = pl.scatter[i];
      const Span s = pl.span(it);
      wg.put_signal(it.peer, in, bytes_of(pl.inbox_at(me) + s.begin, elem),
                    send + bytes_of(pl.at(it), elem), bytes_of(s.length, elem),
                    sc.in_slot + it.tile, SignalOp::add, 1);
    }
    // 2. Reduce part me, tile by tile, once all P - 1 contributions are in: acc = v_0, then
    //    acc = acc op v_p in rank order (this rank's own value read from its send buffer).
    for (std::size_t i = w; i < pl.reduce.size(); i += G) {
      const int t = pl.reduce[i].tile;
      co_await wg.wait_until(sc.in_slot + t, Cmp::ge, sc.in_target[t]);
      const Span s = pl.span(pl.reduce[i]);
      const std::size_t bytes = bytes_of(s.length, elem);
      std::byte* acc = wg.local(out) + bytes_of(my_base + s.begin, elem);
      wg.compute("reduce",
                 {model::copy(static_cast<int64_t>(bytes)),
                  model::reduce(s.length * (P - 1), static_cast<int64_t>(elem))},
                 [&] {
        auto value_of = [&](int p) -> const std::byte* {
          return p == me ? send + bytes_of(pl.at(pl.reduce[i]), elem)
                         : wg.read(in, bytes_of(pl.inbox_at(p) + s.begin, elem), bytes);
        };
        std::memcpy(acc, value_of(0), bytes);
        for (int p = 1; p < P; ++p)
          fusedcoll::detail::reduce_into(acc, value_of(p), s.length, spec.dtype, spec.op);
        if (spec.op == ReduceOp::avg)
          fusedcoll::detail::finish_average(acc, s.length, spec.dtype, P);
      });
      if (spec.gather)
        for (int q : pl.order)
          if (q != me)
            wg.put_signal(q, out, bytes_of(my_base + s.begin, elem), acc, bytes,
                          sc.out_slot_of(me, t), SignalOp::add, 1);
      // Own contribution to this tile was read above; the in-place recv may now be written.
      copy_span(wg, recv + bytes_of(my_base + s.begin, elem), acc, bytes);
    }
    // 3. Gather: copy the other owners' results out of scratch as their tiles arrive.
    for (std::size_t i = w; i < pl.collect.size(); i += G) {
      const Item& it = pl.collect[i];
      co_await wg.wait_until(sc.out_slot_of(it.peer, it.tile), Cmp::ge,
                             sc.out_target[it.peer * sc.mt + it.tile]);
      const std::size_t at = bytes_of(pl.at(it), elem), bytes = bytes_of(pl.span(it).length, elem);
      copy_span(wg, recv + at, wg.read(out, at, bytes), bytes);
    }
    co_return;
  });
}

// ---------------------------------------------------------------------------------------------
// AllReduce ring: P - 1 reduce-scatter steps, then P - 1 all-gather steps, both around the ring
// r -> r + 1. Chunk c is folded ((v_{c+1} op v_{c+2}) op ...) op v_c (docs/semantics.md).

void all_reduce_ring(Rank& rk, const AllReduceArgs& args) {
  const int P = rk.size(), me = rk.rank();
  const std::size_t elem = dtype_size(args.dtype);
  // `rs` step s receives the running chunk recv_chunk(s), then holds acc = received op own.
  const RingSchedule sc = ring_schedule(rk, "all_reduce.ring", args.count, elem, elem);
  if (args.count == 0) return;
  const RingPlan& pl = sc.plan;
  const SymBuffer &rs = sc.rs, &ag = sc.ag;
  const int steps = pl.steps, nt = pl.tiles;
  const auto& off = pl.parts.off;

  const auto* send = cbytes(args.send);
  auto* recv = mbytes(args.recv);
  auto region = [&](int s) { return bytes_of(pl.region_at(s), elem); };

  rk.launch("all_reduce_ring", grid_for(rk, nt), [&](WgContext& wg) -> WgTask {
    const int w = wg.wg(), G = wg.num_wgs();
    std::byte* rs_mem = wg.local(rs);
    // Reduce-scatter. Step s: send the running chunk, whose acc this workgroup made at step
    // s - 1 (own data at step 0); then receive the next one and fold the own value in.
    for (int s = 0; s < steps; ++s) {
      const int c_send = pl.send_chunk(s), c_recv = pl.recv_chunk(s);
      for (int t = w; t < nt; t += G) {
        const Span sp = pl.span(c_send, t);
        const std::byte* src = s == 0 ? send + bytes_of(off[c_send] + sp.begin, elem)
                                      : rs_mem + region(s - 1) + bytes_of(sp.begin, elem);
        wg.put_signal(pl.next, rs, region(s) + bytes_of(sp.begin, elem), src,
                      bytes_of(sp.length, elem), sc.rs_at(s, t), SignalOp::add, 1);
      }
      for (int t = w; t < nt; t += G) {
        co_await wg.wait_until(sc.rs_at(s, t), Cmp::ge, sc.rs_until(s, t));
        const Span sp = pl.span(c_recv, t);
        std::byte* acc = wg.read(rs, region(s) + bytes_of(sp.begin, elem), bytes_of(sp.length, elem));
        wg.compute("reduce", {model::reduce(sp.length, static_cast<int64_t>(elem))}, [&] {
          fusedcoll::detail::reduce_into(acc, send + bytes_of(off[c_recv] + sp.begin, elem),
                                         sp.length, args.dtype, args.op);
          if (s == steps - 1 && args.op == ReduceOp::avg)
            fusedcoll::detail::finish_average(acc, sp.length, args.dtype, P);
        });
      }
    }
    // Chunk me is finished in the last step's region. All-gather step g: forward its chunk (own
    // at g = 0, else the one received at step g - 1, copied out to recv on the way).
    const std::byte* fin = rs_mem + region(steps - 1);
    for (int g = 0; g < steps; ++g) {
      const int c = pl.gather_chunk(g);
      for (int t = w; t < nt; t += G) {
        const Span sp = pl.span(c, t);
        const std::size_t at = bytes_of(off[c] + sp.begin, elem), bytes = bytes_of(sp.length, elem);
        const std::byte* src = fin + bytes_of(sp.begin, elem);
        if (g > 0) {
          co_await wg.wait_until(sc.ag_at(g - 1, t), Cmp::ge,
                                 sc.ag_until(g - 1, t));
          src = wg.read(ag, at, bytes);
          copy_span(wg, recv + at, src, bytes);
        }
        wg.put_signal(pl.next, ag, at, src, bytes, sc.ag_at(g, t), SignalOp::add, 1);
      }
    }
    const int c_last = pl.gather_chunk(steps);  // received at the last all-gather step
    for (int t = w; t < nt; t += G) {
      co_await wg.wait_until(sc.ag_at(steps - 1, t), Cmp::ge,
                             sc.ag_until(steps - 1, t));
      const Span sp = pl.span(c_last, t);
      const std::size_t at = bytes_of(off[c_last] + sp.begin, elem);
      copy_span(wg, recv + at, wg.read(ag, at, bytes_of(sp.length, elem)), bytes_of(sp.length, elem));
      const Span mine = pl.span(me, t);
      copy_span(wg, recv + bytes_of(off[me] + mine.begin, elem), fin + bytes_of(mine.begin, elem),
                 bytes_of(mine.length, elem));
    }
    co_return;
  });
}

// ---------------------------------------------------------------------------------------------
// Exchange (collectives.hpp): All-to-All(v) and AllGather.

void exchange(Rank& rk, const std::string& key, const ExchangePlan& ex, DType dtype,
              const void* send_buf, void* recv_buf) {
  const int me = rk.rank();
  const std::size_t elem = dtype_size(dtype);
  const ExchangeSchedule sc = exchange_schedule(rk, key, ex, elem);
  if (ex.inbox == 0) return;
  const int mt = sc.mt;
  const auto* send = cbytes(send_buf);
  auto* recv = mbytes(recv_buf);

  const int grid = grid_for(rk, std::max(ex.sends.size(), ex.receives.size()));
  rk.launch(key, grid, [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    for (std::size_t i = w; i < ex.sends.size(); i += G) {
      const int q = ex.sends[i].peer, t = ex.sends[i].tile;
      const Span s = ex.send_span(ex.sends[i]);
      const std::byte* src = send + bytes_of(ex.send_at[q] + s.begin, elem);
      if (q == me)  // skipped in place
        copy_span(wg, recv + bytes_of(ex.recv_at[me] + s.begin, elem), src, bytes_of(s.length, elem));
      else
        wg.put_signal(q, sc.box, bytes_of(ex.put_at[q] + s.begin, elem), src,
                      bytes_of(s.length, elem), sc.slot + me * mt + t, SignalOp::add, 1);
    }
    for (std::size_t i = w; i < ex.receives.size(); i += G) {
      const int p = ex.receives[i].peer, t = ex.receives[i].tile;
      co_await wg.wait_until(sc.slot + p * mt + t, Cmp::ge, sc.target[p * mt + t]);
      const Span s = ex.recv_span(ex.receives[i]);
      copy_span(wg, recv + bytes_of(ex.recv_at[p] + s.begin, elem),
                wg.read(sc.box, bytes_of(ex.box_at[p] + s.begin, elem), bytes_of(s.length, elem)),
                bytes_of(s.length, elem));
    }
    co_return;
  });
}

/// Declares the call's working set (`Rank::declare_working_set`): its send and receive buffers,
/// counted once where it runs in place (the same address), of `send` and `recv` elements.
void declare_buffers(Rank& rk, DType dtype, const void* send, std::int64_t send_count,
                     const void* recv, std::int64_t recv_count) {
  const std::size_t s = bytes_of(send_count, dtype_size(dtype));
  const std::size_t r = bytes_of(recv_count, dtype_size(dtype));
  rk.declare_working_set(send == recv ? std::max(s, r) : s + r);
}

std::int64_t total_of(const std::vector<std::int64_t>& counts) {
  std::int64_t n = 0;
  for (const std::int64_t c : counts) n += c;
  return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

void all_reduce(Rank& rk, const AllReduceArgs& args) {
  (void)enter(rk, "all_reduce", args);
  declare_buffers(rk, args.dtype, args.send, args.count, args.recv, args.count);
  if (args.wire.format != WireFormat::none) {
    all_reduce_wire(rk, args);
    return;
  }
  leave_args(rk, "all_reduce");  // the global fields agree; nothing else is needed from peers
  const int P = rk.size();
  if (args.algo == AllReduceAlgo::ring && P > 1) {
    all_reduce_ring(rk, args);
    return;
  }
  // direct (and ring with P = 1, whose order [0] is direct's).
  owner_reduce(rk, {.key = "all_reduce.direct",
                    .parts = Parts::chunks(args.count, P),
                    .dtype = args.dtype,
                    .op = args.op,
                    .gather = true,
                    .send = args.send,
                    .recv = args.recv});
}

void reduce_scatter(Rank& rk, const ReduceScatterArgs& args) {
  (void)enter(rk, "reduce_scatter", args);
  declare_buffers(rk, args.dtype, args.send, total_of(args.recv_counts), args.recv,
                  args.recv_counts[static_cast<std::size_t>(rk.rank())]);
  if (args.wire.format != WireFormat::none) {
    reduce_scatter_wire(rk, args);
    return;
  }
  leave_args(rk, "reduce_scatter");
  owner_reduce(rk, {.key = "reduce_scatter",
                    .parts = Parts::counts(args.recv_counts),
                    .dtype = args.dtype,
                    .op = args.op,
                    .gather = false,
                    .send = args.send,
                    .recv = args.recv});
}

void all_to_allv(Rank& rk, const AllToAllvArgs& args) {
  const auto all = enter(rk, "all_to_allv", args);
  declare_buffers(rk, args.dtype, args.send, total_of(args.send_counts), args.recv,
                  total_of(args.recv_counts));
  const ExchangePlan ex = all_to_allv_plan(rk, args, all);
  if (args.wire.format != WireFormat::none) {
    all_to_allv_wire(rk, args, ex);
    return;
  }
  leave_args(rk, "all_to_allv");
  exchange(rk, "all_to_allv", ex, args.dtype, args.send, args.recv);
}

void all_gather(Rank& rk, const AllGatherArgs& args) {
  (void)enter(rk, "all_gather", args);
  declare_buffers(rk, args.dtype, args.send,
                  args.recv_counts[static_cast<std::size_t>(rk.rank())], args.recv,
                  total_of(args.recv_counts));
  if (args.wire.format != WireFormat::none) {
    all_gather_wire(rk, args);
    return;
  }
  leave_args(rk, "all_gather");
  exchange(rk, "all_gather", all_gather_plan(rk, args), args.dtype, args.send, args.recv);
}

void broadcast(Rank& rk, const BroadcastArgs& args) {
  (void)enter(rk, "broadcast", args);
  declare_buffers(rk, args.dtype, args.send, rk.rank() == args.root ? args.count : 0, args.recv,
                  args.count);
  leave_args(rk, "broadcast");
  const int P = rk.size(), me = rk.rank(), root = args.root;
  const std::size_t elem = dtype_size(args.dtype);
  const SymBuffer box = rk.scratch("broadcast", bytes_of(args.count, elem));
  const Tiling tl = tiling_of(rk);
  const int slot = rk.slots("broadcast", tl.max_tiles);  // [tile]
  if (args.count == 0) return;

  // The root puts every tile to every other rank (remote first, then its own local copy); the
  // others copy each tile out of scratch once it has arrived.
  const BroadcastPlan pl(args.count, root, me, P, tl, elem);
  std::vector<std::uint64_t> target(tl.max_tiles);
  if (me != root)
    for (const Item& it : pl.items) target[it.tile] = rk.expect(slot + it.tile, 1);
  const auto* send = cbytes(args.send);
  auto* recv = mbytes(args.recv);

  rk.launch("broadcast", grid_for(rk, pl.items.size()), [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    for (std::size_t i = w; i < pl.items.size(); i += G) {
      const int q = pl.items[i].peer, t = pl.items[i].tile;
      const Span s = pl.span(t);
      const std::size_t at = bytes_of(s.begin, elem), bytes = bytes_of(s.length, elem);
      if (me != root) {
        co_await wg.wait_until(slot + t, Cmp::ge, target[t]);
        copy_span(wg, recv + at, wg.read(box, at, bytes), bytes);
      } else if (q == me) {
        copy_span(wg, recv + at, send + at, bytes);  // skipped in place
      } else {
        wg.put_signal(q, box, at, send + at, bytes, slot + t, SignalOp::add, 1);
      }
    }
    co_return;
  });
}

}  // namespace fusedcoll::emu::ops
