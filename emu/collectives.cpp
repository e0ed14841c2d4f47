// The emulator's standalone collectives: AllReduce (direct and ring), All-to-All(v),
// ReduceScatter, AllGather and Broadcast, as kernels of workgroups that move data with one-sided
// puts into the peers' symmetric scratch buffers and wait on signal slots.
//
// Common shape of every call:
//   1. `enter` checks the call on every rank (nothing moves before that), the host copies what it
//      needs from the other ranks' argument structs (only All-to-All(v) needs anything), then
//      `leave_args`.
//   2. The host reserves scratch buffers and signal slots (collective, identical on every rank)
//      and computes the cumulative target of every slot this rank will wait on in this call.
//   3. One persistent kernel: `G = min(work items, max_resident_wgs)` workgroups, all resident at
//      once, deal the items out round-robin. Sends never wait, so no workgroup can wait on one
//      that never becomes resident.
//
// Data is cut into tiles (64 KiB, or larger so that a segment has at most kMaxTiles of them); a
// tile is a set of whole elements, so tiling never changes a bit. Each (segment, tile) has its own
// slot, signalled once per call by the put that fills it, so a receiver works on a tile as soon as
// it has arrived. Every region of scratch is written at most once per call, so nothing is
// overwritten before it is consumed. Across calls the buffers and slots are reused: `enter` meets
// every rank, and a rank only gets there after all its kernels of the previous call finished.
//
// Reduction order (docs/semantics.md, "Collectives"): the owner of an element folds the ranks'
// values with detail::reduce_into in the pinned order, whatever order they arrived in; `avg` then
// divides with detail::finish_average. The bits therefore equal ref/'s.
//
// With `wire.format != none` the four compressible collectives take separate kernels (section
// "Compressed wire" below) with the same schedules; puts carry encoded bytes.
//
// User buffers are only ever touched by their own rank: data crosses ranks through symmetric
// scratch only. In-place calls work because a rank overwrites its part `x` of `recv` only after
// its own contribution to `x` has been read (causally: the result of `x` cannot exist before
// every contribution to it was read), and tiles never straddle parts.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu/ops.hpp"
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/wire.hpp"

namespace fusedcoll::emu::ops {
namespace {

using std::int64_t;

/// Preferred tile size, and the most tiles a segment (a chunk, a peer's block) is cut into: slots
/// are reserved per tile, so their number must stay bounded.
constexpr int64_t kTileBytes = 64 * 1024;
constexpr int kMaxTiles = 64;

/// Elements per tile for a segment of `len` elements of `elem` bytes.
int64_t tile_elems(int64_t len, std::size_t elem) {
  const int64_t base = std::max<int64_t>(1, kTileBytes / static_cast<int64_t>(elem));
  return std::max(base, (len + kMaxTiles - 1) / kMaxTiles);
}

/// Number of tiles of a segment of `len` elements (0 for an empty one); at most kMaxTiles.
int num_tiles(int64_t len, int64_t te) { return static_cast<int>((len + te - 1) / te); }

/// Tile `t` of a segment of `len` elements: [begin, begin + length), empty past the end.
struct Span {
  int64_t begin = 0;
  int64_t length = 0;
};
Span tile_of(int64_t len, int64_t te, int64_t t) {
  const int64_t b = std::min(len, t * te);
  return {b, std::min(len, b + te) - b};
}

/// A work item: a (rank, tile) pair.
struct Item {
  int peer = 0;
  int tile = 0;
};

/// Grid of a persistent kernel with `items` work items in its largest phase.

int mod(int a, int p) { return ((a % p) + p) % p; }

std::size_t bytes_of(int64_t count, std::size_t elem) {
  return static_cast<std::size_t>(count) * elem;
}

const std::byte* cbytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* mbytes(void* p) { return static_cast<std::byte*>(p); }

/// memcpy that tolerates empty ranges and identical pointers (in-place slots).
void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

// ---------------------------------------------------------------------------------------------
// Owner reduction: rank q folds part q (off[q], len[q]) of every rank's send buffer in rank
// order. The engine of AllReduce `direct` (parts = chunk_of, then an all-gather of the results)
// and of ReduceScatter (parts = recv_counts, no all-gather).

/// One rank's share of an owner reduction: `scatter` (its slices of the other owners' parts,
/// remote-first `order`), `reduce` (its own part's tiles) and, with gather, `collect` (the other
/// owners' finished tiles), with the cumulative signal targets the reduce and collect tiles wait
/// for. The plain and the compressed-wire kernels share it.
struct OwnerSchedule {
  std::vector<int> order;
  std::vector<Item> scatter, reduce, collect;
  std::vector<std::uint64_t> in_target, out_target;
};

OwnerSchedule owner_schedule(Rank& rk, const std::vector<int64_t>& len, int64_t te, bool gather,
                             int in_slot, int out_slot) {
  const int P = rk.size(), me = rk.rank();
  OwnerSchedule s;
  s.order = remote_first(me, P);
  for (int q : s.order)
    for (int t = 0; t < num_tiles(len[q], te); ++t) {
      if (q != me) s.scatter.push_back({q, t});
      if (q != me && gather) s.collect.push_back({q, t});
    }
  for (int t = 0; t < num_tiles(len[me], te); ++t) s.reduce.push_back({me, t});
  s.in_target.assign(kMaxTiles, 0);
  s.out_target.assign(std::size_t(P) * kMaxTiles, 0);
  for (const Item& it : s.reduce) s.in_target[it.tile] = rk.expect(in_slot + it.tile, P - 1);
  for (const Item& it : s.collect) {
    const int slot = it.peer * kMaxTiles + it.tile;
    s.out_target[slot] = rk.expect(out_slot + slot, 1);
  }
  return s;
}

struct OwnerReduce {
  std::string key;                // scratch and slot names
  std::vector<int64_t> off, len;  // per part, in elements of the send buffer
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  bool gather = false;  // AllReduce: every rank receives every part
  const void* send = nullptr;
  void* recv = nullptr;  // gather: the full result; else this rank's part only
};

void owner_reduce(Rank& rk, const OwnerReduce& spec) {
  const int P = rk.size(), me = rk.rank();
  const std::size_t elem = dtype_size(spec.dtype);
  int64_t max_len = 0, total = 0;
  for (int q = 0; q < P; ++q) {
    max_len = std::max(max_len, spec.len[q]);
    total = std::max(total, spec.off[q] + spec.len[q]);
  }
  const int64_t te = tile_elems(max_len, elem);

  // Scratch (collective; sizes agree because the parts do). `in`: [source][max_len], where part
  // me's contributions land. `out`: the folded results; with gather, in the layout of the full
  // buffer (part q at off[q]) on every rank, else this rank's part alone.
  const SymBuffer in =
      rk.scratch(spec.key + ".in", bytes_of(P > 1 ? int64_t{P} * max_len : 0, elem));
  const SymBuffer out =
      rk.scratch(spec.key + ".out", bytes_of(spec.gather ? total : max_len, elem));
  const int in_slot = rk.slots(spec.key + ".in", kMaxTiles);  // [tile]: P-1 puts
  // [part][tile]: one put each; only the all-gather uses them (same choice on every rank).
  const int out_slot = spec.gather ? rk.slots(spec.key + ".out", P * kMaxTiles) : 0;
  if (max_len == 0) return;  // nothing moves; every rank agrees

  const OwnerSchedule sched = owner_schedule(rk, spec.len, te, spec.gather, in_slot, out_slot);
  const auto& [order, scatter, reduce, collect, in_target, out_target] = sched;

  const auto* send = cbytes(spec.send);
  auto* recv = mbytes(spec.recv);
  const int64_t my_base = spec.gather ? spec.off[me] : 0;  // of part me in `out` and `recv`
  const std::size_t phase_max = std::max({scatter.size(), reduce.size(), collect.size()});

  rk.launch(spec.key, grid_for(rk, phase_max), [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    // 1. Scatter: this rank's slice of part q goes to owner q's row `me` (remote owners first).
    for (std::size_t i = w; i < scatter.size(); i += G) {
      const int q = scatter[i].peer, t = scatter[i].tile;
      const Span s = tile_of(spec.len[q], te, t);
      wg.put_signal(q, in, bytes_of(int64_t{me} * max_len + s.begin, elem),
                    send + bytes_of(spec.off[q] + s.begin, elem), bytes_of(s.length, elem),
                    in_slot + t, SignalOp::add, 1);
    }
    // 2. Reduce part me, tile by tile, once all P - 1 contributions are in: acc = v_0, then
    //    acc = acc op v_p in rank order (this rank's own value read from its send buffer).
    for (std::size_t i = w; i < reduce.size(); i += G) {
      const int t = reduce[i].tile;
      co_await wg.wait_until(in_slot + t, Cmp::ge, in_target[t]);
      const Span s = tile_of(spec.len[me], te, t);
      const std::size_t bytes = bytes_of(s.length, elem);
      std::byte* acc = wg.local(out) + bytes_of(my_base + s.begin, elem);
      wg.compute("reduce", [&] {
        auto value_of = [&](int p) -> const std::byte* {
          return p == me ? send + bytes_of(spec.off[me] + s.begin, elem)
                         : wg.read(in, bytes_of(int64_t{p} * max_len + s.begin, elem), bytes);
        };
        std::memcpy(acc, value_of(0), bytes);
        for (int p = 1; p < P; ++p)
          fusedcoll::detail::reduce_into(acc, value_of(p), s.length, spec.dtype, spec.op);
        if (spec.op == ReduceOp::avg)
          fusedcoll::detail::finish_average(acc, s.length, spec.dtype, P);
      });
      if (spec.gather)
        for (int q : order)
          if (q != me)
            wg.put_signal(q, out, bytes_of(my_base + s.begin, elem), acc, bytes,
                          out_slot + me * kMaxTiles + t, SignalOp::add, 1);
      // Own contribution to this tile was read above; the in-place recv may now be written.
      copy_bytes(recv + bytes_of(my_base + s.begin, elem), acc, bytes);
    }
    // 3. Gather: copy the other owners' results out of scratch as their tiles arrive.
    for (std::size_t i = w; i < collect.size(); i += G) {
      const int q = collect[i].peer, t = collect[i].tile;
      const int slot = q * kMaxTiles + t;
      co_await wg.wait_until(out_slot + slot, Cmp::ge, out_target[slot]);
      const Span s = tile_of(spec.len[q], te, t);
      const std::size_t at = bytes_of(spec.off[q] + s.begin, elem);
      copy_bytes(recv + at, wg.read(out, at, bytes_of(s.length, elem)), bytes_of(s.length, elem));
    }
    co_return;
  });
}

// ---------------------------------------------------------------------------------------------
// AllReduce ring: P - 1 reduce-scatter steps, then P - 1 all-gather steps, both around the ring
// r -> r + 1. Chunk c is folded ((v_{c+1} op v_{c+2}) op ...) op v_c (docs/semantics.md).

void all_reduce_ring(Rank& rk, const AllReduceArgs& args) {
  const int P = rk.size(), me = rk.rank(), next = (me + 1) % P;
  const std::size_t elem = dtype_size(args.dtype);
  std::vector<int64_t> off(P), len(P);
  for (int c = 0; c < P; ++c) {
    const Chunk ch = chunk_of(args.count, P, c);
    off[c] = ch.offset;
    len[c] = ch.length;
  }
  const int64_t max_len = len[0];  // chunk 0 is never shorter than another
  const int64_t te = tile_elems(max_len, elem);
  const int nt = num_tiles(max_len, te);
  const int steps = P - 1;

  // `rs`: one region of max_len per reduce-scatter step s (it receives the running chunk
  // (me - 2 - s) mod P, then holds acc = received op own); `ag`: the full buffer's layout.
  const SymBuffer rs = rk.scratch("all_reduce.ring.rs", bytes_of(int64_t{steps} * max_len, elem));
  const SymBuffer ag = rk.scratch("all_reduce.ring.ag", bytes_of(args.count, elem));
  const int rs_slot = rk.slots("all_reduce.ring.rs", steps * kMaxTiles);  // [step][tile]
  const int ag_slot = rk.slots("all_reduce.ring.ag", steps * kMaxTiles);  // [step][tile]
  if (args.count == 0) return;

  // Every (step, tile < nt) gets exactly one put and signal per call, empty tiles included.
  std::vector<std::uint64_t> rs_target(std::size_t(steps) * nt), ag_target(std::size_t(steps) * nt);
  for (int s = 0; s < steps; ++s)
    for (int t = 0; t < nt; ++t) {
      rs_target[s * nt + t] = rk.expect(rs_slot + s * kMaxTiles + t, 1);
      ag_target[s * nt + t] = rk.expect(ag_slot + s * kMaxTiles + t, 1);
    }

  const auto* send = cbytes(args.send);
  auto* recv = mbytes(args.recv);
  auto region = [&](int s) { return bytes_of(int64_t{s} * max_len, elem); };

  rk.launch("all_reduce_ring", grid_for(rk, nt), [&](WgContext& wg) -> WgTask {
    const int w = wg.wg(), G = wg.num_wgs();
    std::byte* rs_mem = wg.local(rs);
    // Reduce-scatter. Step s: send running chunk (me - 1 - s), whose acc this workgroup made at
    // step s - 1 (own data at step 0); then receive chunk (me - 2 - s) and fold own value in.
    for (int s = 0; s < steps; ++s) {
      const int c_send = mod(me - 1 - s, P), c_recv = mod(me - 2 - s, P);
      for (int t = w; t < nt; t += G) {
        const Span sp = tile_of(len[c_send], te, t);
        const std::byte* src = s == 0 ? send + bytes_of(off[c_send] + sp.begin, elem)
                                      : rs_mem + region(s - 1) + bytes_of(sp.begin, elem);
        wg.put_signal(next, rs, region(s) + bytes_of(sp.begin, elem), src,
                      bytes_of(sp.length, elem), rs_slot + s * kMaxTiles + t, SignalOp::add, 1);
      }
      for (int t = w; t < nt; t += G) {
        co_await wg.wait_until(rs_slot + s * kMaxTiles + t, Cmp::ge, rs_target[s * nt + t]);
        const Span sp = tile_of(len[c_recv], te, t);
        std::byte* acc = wg.read(rs, region(s) + bytes_of(sp.begin, elem), bytes_of(sp.length, elem));
        wg.compute("reduce", [&] {
          fusedcoll::detail::reduce_into(acc, send + bytes_of(off[c_recv] + sp.begin, elem),
                                         sp.length, args.dtype, args.op);
          if (s == steps - 1 && args.op == ReduceOp::avg)
            fusedcoll::detail::finish_average(acc, sp.length, args.dtype, P);
        });
      }
    }
    // Chunk me is finished in the last step's region. All-gather step g: forward chunk (me - g)
    // (own at g = 0, else the one received at step g - 1, copied out to recv on the way).
    const std::byte* fin = rs_mem + region(steps - 1);
    for (int g = 0; g < steps; ++g) {
      const int c = mod(me - g, P);
      for (int t = w; t < nt; t += G) {
        const Span sp = tile_of(len[c], te, t);
        const std::size_t at = bytes_of(off[c] + sp.begin, elem), bytes = bytes_of(sp.length, elem);
        const std::byte* src = fin + bytes_of(sp.begin, elem);
        if (g > 0) {
          co_await wg.wait_until(ag_slot + (g - 1) * kMaxTiles + t, Cmp::ge,
                                 ag_target[(g - 1) * nt + t]);
          src = wg.read(ag, at, bytes);
          copy_bytes(recv + at, src, bytes);
        }
        wg.put_signal(next, ag, at, src, bytes, ag_slot + g * kMaxTiles + t, SignalOp::add, 1);
      }
    }
    const int c_last = mod(me + 1, P);  // received at the last all-gather step
    for (int t = w; t < nt; t += G) {
      co_await wg.wait_until(ag_slot + (steps - 1) * kMaxTiles + t, Cmp::ge,
                             ag_target[(steps - 1) * nt + t]);
      const Span sp = tile_of(len[c_last], te, t);
      const std::size_t at = bytes_of(off[c_last] + sp.begin, elem);
      copy_bytes(recv + at, wg.read(ag, at, bytes_of(sp.length, elem)), bytes_of(sp.length, elem));
      const Span mine = tile_of(len[me], te, t);
      copy_bytes(recv + bytes_of(off[me] + mine.begin, elem), fin + bytes_of(mine.begin, elem),
                 bytes_of(mine.length, elem));
    }
    co_return;
  });
}

// ---------------------------------------------------------------------------------------------
// Compressed wire (docs/compression.md). Puts carry encoded bytes; every reduction runs in f32 on
// decoded values, with the encode and decode points and element indices of ref/compressed.cpp, so
// the bits are ref's. Tiles are cut in f32 elements (tile_elems(len, 4)) on both ends, and a tile's
// wire bytes sit at `index * wire_size` in scratch.
//
// A reduction reads its contribution from `send` in place, except when it must be a copy
// (detail::contribution_view): divided by P for a predivided `avg`, or an in-place call, whose
// early writes to recv must not change what is still to be sent.

using fusedcoll::detail::WirePlan;

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
  for (const Run& r : runs)
    fusedcoll::detail::accumulate_amax(wire, mine, r.data, r.first, r.length);
  std::vector<float> agreed = fusedcoll::detail::empty_amax(wire);
  for (const void* p : rk.exchange(op + ".amax", &mine))
    fusedcoll::detail::combine_amax(agreed, *static_cast<const std::vector<float>*>(p));
  leave_args(rk, op);  // also ends the window in which the peers' tables are read
  return fusedcoll::detail::make_plan(wire, agreed, headroom);
}

struct WireReduce {
  std::string key;
  std::vector<int64_t> off, len;  // per part, in elements
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
  int64_t max_len = 0, total = 0;
  for (int q = 0; q < P; ++q) {
    max_len = std::max(max_len, spec.len[q]);
    total = std::max(total, spec.off[q] + spec.len[q]);
  }
  const int64_t te = tile_elems(max_len, sizeof(float));

  const SymBuffer in =
      rk.scratch(spec.key + ".in", bytes_of(P > 1 ? int64_t{P} * max_len : 0, we));
  const SymBuffer out = rk.scratch(spec.key + ".out", bytes_of(spec.gather ? total : 0, we));
  const int in_slot = rk.slots(spec.key + ".in", kMaxTiles);
  const int out_slot = spec.gather ? rk.slots(spec.key + ".out", P * kMaxTiles) : 0;
  if (max_len == 0) return;

  const OwnerSchedule sched = owner_schedule(rk, spec.len, te, spec.gather, in_slot, out_slot);
  const auto& [order, scatter, reduce, collect, in_target, out_target] = sched;
  const std::size_t phase_max = std::max({scatter.size(), reduce.size(), collect.size()});

  rk.launch(spec.key, grid_for(rk, phase_max), [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    std::vector<std::byte> enc;
    std::vector<float> acc, val;
    // 1. Scatter: encode this rank's slice of part q and put it into owner q's row `me`.
    for (std::size_t i = w; i < scatter.size(); i += G) {
      const int q = scatter[i].peer, t = scatter[i].tile;
      const Span s = tile_of(spec.len[q], te, t);
      const int64_t first = spec.off[q] + s.begin;
      enc.resize(bytes_of(s.length, we));
      fusedcoll::detail::wire_encode(plan, spec.y + first, first, s.length, enc.data());
      wg.put_signal(q, in, bytes_of(int64_t{me} * max_len + s.begin, we), enc.data(), enc.size(),
                    in_slot + t, SignalOp::add, 1);
    }
    // 2. Reduce part me: decode every contribution (own: encoded and decoded here), fold in
    //    rank order in f32.
    for (std::size_t i = w; i < reduce.size(); i += G) {
      const int t = reduce[i].tile;
      co_await wg.wait_until(in_slot + t, Cmp::ge, in_target[t]);
      const Span s = tile_of(spec.len[me], te, t);
      const int64_t first = spec.off[me] + s.begin;
      const std::size_t wbytes = bytes_of(s.length, we);
      acc.resize(static_cast<std::size_t>(s.length));
      val.resize(static_cast<std::size_t>(s.length));
      wg.compute("reduce", [&] {
        auto value_of = [&](int p, float* dst) {
          if (p == me) {
            std::copy_n(spec.y + first, s.length, dst);
            fusedcoll::detail::wire_round_trip(plan, dst, first, s.length, enc);
          } else {
            fusedcoll::detail::wire_decode(
                plan, wg.read(in, bytes_of(int64_t{p} * max_len + s.begin, we), wbytes), first,
                s.length, dst);
          }
        };
        value_of(0, acc.data());
        for (int p = 1; p < P; ++p) {
          value_of(p, val.data());
          fusedcoll::detail::reduce_into(acc.data(), val.data(), s.length, DType::f32, spec.op);
        }
        if (fusedcoll::detail::divides_after(spec.op, spec.wire))
          fusedcoll::detail::finish_average(acc.data(), s.length, DType::f32, P);
      });
      if (spec.gather) {
        std::byte* fin = wg.local(out) + bytes_of(first, we);
        fusedcoll::detail::wire_encode(plan, acc.data(), first, s.length, fin);
        for (int q : order)
          if (q != me)
            wg.put_signal(q, out, bytes_of(first, we), fin, wbytes, out_slot + me * kMaxTiles + t,
                          SignalOp::add, 1);
        fusedcoll::detail::wire_decode(plan, fin, first, s.length, spec.recv + first);
      } else {
        copy_bytes(spec.recv + s.begin, acc.data(), bytes_of(s.length, sizeof(float)));
      }
    }
    // 3. Gather: decode the other owners' finished parts as their tiles arrive.
    for (std::size_t i = w; i < collect.size(); i += G) {
      const int q = collect[i].peer, t = collect[i].tile;
      const int slot = q * kMaxTiles + t;
      co_await wg.wait_until(out_slot + slot, Cmp::ge, out_target[slot]);
      const Span s = tile_of(spec.len[q], te, t);
      const int64_t at = spec.off[q] + s.begin;
      fusedcoll::detail::wire_decode(plan, wg.read(out, bytes_of(at, we), bytes_of(s.length, we)),
                                     at, s.length, spec.recv + at);
    }
    co_return;
  });
}

/// Ring AllReduce with a compressed wire: the running value of a chunk leaves its first rank
/// encoded; each later rank decodes it, adds its own f32 value and re-encodes it; the owner
/// encodes the finished chunk once, and the ring all-gather forwards those bytes unchanged.
void all_reduce_ring_wire(Rank& rk, const AllReduceArgs& args, const float* y,
                          const WirePlan& plan) {
  const int P = rk.size(), me = rk.rank(), next = (me + 1) % P;
  const std::size_t we = plan.elem();
  std::vector<int64_t> off(P), len(P);
  for (int c = 0; c < P; ++c) {
    const Chunk ch = chunk_of(args.count, P, c);
    off[c] = ch.offset;
    len[c] = ch.length;
  }
  const int64_t max_len = len[0];
  const int64_t te = tile_elems(max_len, sizeof(float));
  const int nt = num_tiles(max_len, te);
  const int steps = P - 1;

  const SymBuffer rs =
      rk.scratch("all_reduce.ring.wire.rs", bytes_of(int64_t{steps} * max_len, we));
  const SymBuffer ag = rk.scratch("all_reduce.ring.wire.ag", bytes_of(args.count, we));
  const int rs_slot = rk.slots("all_reduce.ring.wire.rs", steps * kMaxTiles);
  const int ag_slot = rk.slots("all_reduce.ring.wire.ag", steps * kMaxTiles);
  if (args.count == 0) return;

  std::vector<std::uint64_t> rs_target(std::size_t(steps) * nt), ag_target(std::size_t(steps) * nt);
  for (int s = 0; s < steps; ++s)
    for (int t = 0; t < nt; ++t) {
      rs_target[s * nt + t] = rk.expect(rs_slot + s * kMaxTiles + t, 1);
      ag_target[s * nt + t] = rk.expect(ag_slot + s * kMaxTiles + t, 1);
    }

  // acc[s]: the running value folded at step s, in f32 (tile t always belongs to workgroup t % G).
  std::vector<float> acc(static_cast<std::size_t>(steps * max_len));
  auto* recv = static_cast<float*>(args.recv);
  auto region = [&](int s) { return int64_t{s} * max_len; };

  rk.launch("all_reduce_ring_wire", grid_for(rk, nt), [&](WgContext& wg) -> WgTask {
    const int w = wg.wg(), G = wg.num_wgs();
    std::vector<std::byte> enc;
    for (int s = 0; s < steps; ++s) {
      const int c_send = mod(me - 1 - s, P), c_recv = mod(me - 2 - s, P);
      for (int t = w; t < nt; t += G) {
        const Span sp = tile_of(len[c_send], te, t);
        const int64_t first = off[c_send] + sp.begin;
        const float* src = s == 0 ? y + first : acc.data() + region(s - 1) + sp.begin;
        enc.resize(bytes_of(sp.length, we));
        fusedcoll::detail::wire_encode(plan, src, first, sp.length, enc.data());
        wg.put_signal(next, rs, bytes_of(region(s) + sp.begin, we), enc.data(), enc.size(),
                      rs_slot + s * kMaxTiles + t, SignalOp::add, 1);
      }
      for (int t = w; t < nt; t += G) {
        co_await wg.wait_until(rs_slot + s * kMaxTiles + t, Cmp::ge, rs_target[s * nt + t]);
        const Span sp = tile_of(len[c_recv], te, t);
        const int64_t first = off[c_recv] + sp.begin;
        float* a = acc.data() + region(s) + sp.begin;
        const std::byte* got =
            wg.read(rs, bytes_of(region(s) + sp.begin, we), bytes_of(sp.length, we));
        wg.compute("reduce", [&] {
          fusedcoll::detail::wire_decode(plan, got, first, sp.length, a);
          fusedcoll::detail::reduce_into(a, y + first, sp.length, DType::f32, args.op);
          if (s == steps - 1 && fusedcoll::detail::divides_after(args.op, args.wire))
            fusedcoll::detail::finish_average(a, sp.length, DType::f32, P);
        });
      }
    }
    // All-gather: step 0 encodes the finished chunk me into this rank's own slot of `ag` (no peer
    // writes there) and forwards it; later steps forward what arrived, decoding it on the way.
    const float* fin = acc.data() + region(steps - 1);
    for (int g = 0; g < steps; ++g) {
      const int c = mod(me - g, P);
      for (int t = w; t < nt; t += G) {
        const Span sp = tile_of(len[c], te, t);
        const int64_t at = off[c] + sp.begin;
        const std::size_t bytes = bytes_of(sp.length, we);
        const std::byte* src;
        if (g == 0) {
          std::byte* mine = wg.local(ag) + bytes_of(at, we);
          fusedcoll::detail::wire_encode(plan, fin + sp.begin, at, sp.length, mine);
          src = mine;
        } else {
          co_await wg.wait_until(ag_slot + (g - 1) * kMaxTiles + t, Cmp::ge,
                                 ag_target[(g - 1) * nt + t]);
          src = wg.read(ag, bytes_of(at, we), bytes);
        }
        fusedcoll::detail::wire_decode(plan, src, at, sp.length, recv + at);
        wg.put_signal(next, ag, bytes_of(at, we), src, bytes, ag_slot + g * kMaxTiles + t,
                      SignalOp::add, 1);
      }
    }
    const int c_last = mod(me + 1, P);
    for (int t = w; t < nt; t += G) {
      co_await wg.wait_until(ag_slot + (steps - 1) * kMaxTiles + t, Cmp::ge,
                             ag_target[(steps - 1) * nt + t]);
      const Span sp = tile_of(len[c_last], te, t);
      const int64_t at = off[c_last] + sp.begin;
      fusedcoll::detail::wire_decode(plan, wg.read(ag, bytes_of(at, we), bytes_of(sp.length, we)),
                                     at, sp.length, recv + at);
    }
    co_return;
  });
}

void all_reduce_wire(Rank& rk, const AllReduceArgs& args) {
  const int P = rk.size();
  std::vector<float> storage;
  const float* y =
      fusedcoll::detail::contribution_view(args.send, args.send == args.recv, args.count, args.op,
                                           args.wire, P, storage);
  const WirePlan plan = agree_plan(rk, "all_reduce", args.wire, {{y, 0, args.count}},
                                   fusedcoll::detail::reduction_headroom(args.op, P));
  if (args.algo == AllReduceAlgo::ring && P > 1) {
    all_reduce_ring_wire(rk, args, y, plan);
    return;
  }
  WireReduce spec;
  spec.key = "all_reduce.direct.wire";
  for (int c = 0; c < P; ++c) {
    const Chunk ch = chunk_of(args.count, P, c);
    spec.off.push_back(ch.offset);
    spec.len.push_back(ch.length);
  }
  spec.op = args.op;
  spec.wire = args.wire;
  spec.gather = true;
  spec.y = y;
  spec.recv = static_cast<float*>(args.recv);
  owner_reduce_wire(rk, spec, plan);
}

void reduce_scatter_wire(Rank& rk, const ReduceScatterArgs& args) {
  const int P = rk.size();
  WireReduce spec;
  spec.key = "reduce_scatter.wire";
  int64_t at = 0;
  for (int64_t n : args.recv_counts) {
    spec.off.push_back(at);
    spec.len.push_back(n);
    at += n;
  }
  std::vector<float> storage;
  // In place for ReduceScatter means recv inside send: compare by overlap, not equality.
  const auto* send = static_cast<const float*>(args.send);
  const auto* recv = static_cast<const float*>(args.recv);
  const bool overlaps = recv < send + at && send < recv + spec.len[rk.rank()];
  const float* y = fusedcoll::detail::contribution_view(args.send, overlaps, at, args.op,
                                                        args.wire, P, storage);
  const WirePlan plan = agree_plan(rk, "reduce_scatter", args.wire, {{y, 0, at}},
                                   fusedcoll::detail::reduction_headroom(args.op, P));
  spec.op = args.op;
  spec.wire = args.wire;
  spec.gather = false;
  spec.y = y;
  spec.recv = static_cast<float*>(args.recv);
  owner_reduce_wire(rk, spec, plan);
}

/// AllGather with a compressed wire: each contribution is encoded by its sender (block indices
/// restart at 0 in every contribution), and every rank, the sender included, decodes it.
void all_gather_wire(Rank& rk, const AllGatherArgs& args) {
  const int P = rk.size(), me = rk.rank();
  const int64_t n_me = args.recv_counts[me];
  const auto* send = static_cast<const float*>(args.send);
  const std::vector<float> y(send, send + n_me);
  const WirePlan plan = agree_plan(rk, "all_gather", args.wire, {{y.data(), 0, n_me}}, 1.0f);
  const std::size_t we = plan.elem();
  std::vector<int64_t> off(P + 1, 0);
  for (int p = 0; p < P; ++p) off[p + 1] = off[p] + args.recv_counts[p];
  const int64_t total = off[P];

  const SymBuffer box = rk.scratch("all_gather.wire", bytes_of(total, we));
  const int slot = rk.slots("all_gather.wire", P * kMaxTiles);
  if (total == 0) return;

  auto te = [&](int p) { return tile_elems(args.recv_counts[p], sizeof(float)); };
  std::vector<Item> sends, receives;
  for (int q : remote_first(me, P))
    for (int t = 0; t < num_tiles(n_me, te(me)); ++t) sends.push_back({q, t});
  std::vector<std::uint64_t> target(std::size_t(P) * kMaxTiles);
  for (int p : remote_first(me, P)) {
    if (p == me) continue;
    for (int t = 0; t < num_tiles(args.recv_counts[p], te(p)); ++t) {
      receives.push_back({p, t});
      target[p * kMaxTiles + t] = rk.expect(slot + p * kMaxTiles + t, 1);
    }
  }
  auto* recv = static_cast<float*>(args.recv);

  const int grid = grid_for(rk, std::max(sends.size(), receives.size()));
  rk.launch("all_gather_wire", grid, [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    std::vector<std::byte> enc;
    for (std::size_t i = w; i < sends.size(); i += G) {
      const int q = sends[i].peer, t = sends[i].tile;
      const Span s = tile_of(n_me, te(me), t);
      enc.resize(bytes_of(s.length, we));
      fusedcoll::detail::wire_encode(plan, y.data() + s.begin, s.begin, s.length, enc.data());
      if (q == me)
        fusedcoll::detail::wire_decode(plan, enc.data(), s.begin, s.length, recv + off[me] + s.begin);
      else
        wg.put_signal(q, box, bytes_of(off[me] + s.begin, we), enc.data(), enc.size(),
                      slot + me * kMaxTiles + t, SignalOp::add, 1);
    }
    for (std::size_t i = w; i < receives.size(); i += G) {
      const int p = receives[i].peer, t = receives[i].tile;
      co_await wg.wait_until(slot + p * kMaxTiles + t, Cmp::ge, target[p * kMaxTiles + t]);
      const Span s = tile_of(args.recv_counts[p], te(p), t);
      const int64_t at = off[p] + s.begin;
      fusedcoll::detail::wire_decode(plan, wg.read(box, bytes_of(at, we), bytes_of(s.length, we)),
                                     s.begin, s.length, recv + at);
    }
    co_return;
  });
}

/// All-to-All(v) with a compressed wire: every segment, the self-segment included, arrives as
/// decode(encode(x)), block indices restarting at 0 in every segment.
void all_to_allv_wire(Rank& rk, const AllToAllvArgs& args,
                      const std::vector<const AllToAllvArgs*>& all) {
  const int P = rk.size(), me = rk.rank();
  const auto* send = static_cast<const float*>(args.send);
  // Where this rank's block lands in each q's scratch (in elements), and the largest inbox.
  std::vector<int64_t> put_at(P, 0);
  int64_t inbox = 0;
  for (int q = 0; q < P; ++q) {
    int64_t sum = 0;
    for (int p = 0; p < P; ++p) {
      if (p == me) put_at[q] = sum;
      sum += all[q]->recv_counts[p];
    }
    inbox = std::max(inbox, sum);
  }
  std::vector<Run> runs;
  for (int q = 0; q < P; ++q) runs.push_back({send + args.send_displs[q], 0, args.send_counts[q]});
  const WirePlan plan = agree_plan(rk, "all_to_allv", args.wire, runs, 1.0f);  // ends args reads
  const std::size_t we = plan.elem();

  std::vector<int64_t> my_at(P, 0);
  for (int p = 1; p < P; ++p) my_at[p] = my_at[p - 1] + args.recv_counts[p - 1];
  const SymBuffer box = rk.scratch("all_to_allv.wire", bytes_of(inbox, we));
  const int slot = rk.slots("all_to_allv.wire", P * kMaxTiles);
  if (inbox == 0) return;

  auto te = [](int64_t n) { return tile_elems(n, sizeof(float)); };
  std::vector<Item> sends, receives;
  for (int q : remote_first(me, P))
    for (int t = 0; t < num_tiles(args.send_counts[q], te(args.send_counts[q])); ++t)
      sends.push_back({q, t});
  std::vector<std::uint64_t> target(std::size_t(P) * kMaxTiles);
  for (int p : remote_first(me, P)) {
    if (p == me) continue;
    for (int t = 0; t < num_tiles(args.recv_counts[p], te(args.recv_counts[p])); ++t) {
      receives.push_back({p, t});
      target[p * kMaxTiles + t] = rk.expect(slot + p * kMaxTiles + t, 1);
    }
  }
  auto* recv = static_cast<float*>(args.recv);

  const int grid = grid_for(rk, std::max(sends.size(), receives.size()));
  rk.launch("all_to_allv_wire", grid, [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    std::vector<std::byte> enc;
    for (std::size_t i = w; i < sends.size(); i += G) {
      const int q = sends[i].peer, t = sends[i].tile;
      const int64_t n = args.send_counts[q];
      const Span s = tile_of(n, te(n), t);
      enc.resize(bytes_of(s.length, we));
      fusedcoll::detail::wire_encode(plan, send + args.send_displs[q] + s.begin, s.begin,
                                     s.length, enc.data());
      if (q == me)
        fusedcoll::detail::wire_decode(plan, enc.data(), s.begin, s.length,
                                       recv + args.recv_displs[me] + s.begin);
      else
        wg.put_signal(q, box, bytes_of(put_at[q] + s.begin, we), enc.data(), enc.size(),
                      slot + me * kMaxTiles + t, SignalOp::add, 1);
    }
    for (std::size_t i = w; i < receives.size(); i += G) {
      const int p = receives[i].peer, t = receives[i].tile;
      co_await wg.wait_until(slot + p * kMaxTiles + t, Cmp::ge, target[p * kMaxTiles + t]);
      const int64_t n = args.recv_counts[p];
      const Span s = tile_of(n, te(n), t);
      fusedcoll::detail::wire_decode(
          plan, wg.read(box, bytes_of(my_at[p] + s.begin, we), bytes_of(s.length, we)), s.begin,
          s.length, recv + args.recv_displs[p] + s.begin);
    }
    co_return;
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------

void all_reduce(Rank& rk, const AllReduceArgs& args) {
  (void)enter(rk, "all_reduce", args);
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
  OwnerReduce spec;
  spec.key = "all_reduce.direct";
  for (int c = 0; c < P; ++c) {
    const Chunk ch = chunk_of(args.count, P, c);
    spec.off.push_back(ch.offset);
    spec.len.push_back(ch.length);
  }
  spec.dtype = args.dtype;
  spec.op = args.op;
  spec.gather = true;
  spec.send = args.send;
  spec.recv = args.recv;
  owner_reduce(rk, spec);
}

void reduce_scatter(Rank& rk, const ReduceScatterArgs& args) {
  (void)enter(rk, "reduce_scatter", args);
  if (args.wire.format != WireFormat::none) {
    reduce_scatter_wire(rk, args);
    return;
  }
  leave_args(rk, "reduce_scatter");
  OwnerReduce spec;
  spec.key = "reduce_scatter";
  int64_t at = 0;
  for (int64_t n : args.recv_counts) {
    spec.off.push_back(at);
    spec.len.push_back(n);
    at += n;
  }
  spec.dtype = args.dtype;
  spec.op = args.op;
  spec.gather = false;
  spec.send = args.send;
  spec.recv = args.recv;
  owner_reduce(rk, spec);
}

void all_to_allv(Rank& rk, const AllToAllvArgs& args) {
  const auto all = enter(rk, "all_to_allv", args);
  if (args.wire.format != WireFormat::none) {
    all_to_allv_wire(rk, args, all);
    return;
  }
  const int P = rk.size(), me = rk.rank();
  const std::size_t elem = dtype_size(args.dtype);
  // Scratch of rank q: its incoming blocks packed in source order. Copy from the peers' calls:
  // where this rank's block lands in each q's scratch, and the largest inbox of all.
  std::vector<int64_t> put_at(P, 0);  // this rank's block offset in q's scratch
  int64_t inbox = 0;
  for (int q = 0; q < P; ++q) {
    int64_t sum = 0;
    for (int p = 0; p < P; ++p) {
      if (p == me) put_at[q] = sum;
      sum += all[q]->recv_counts[p];
    }
    inbox = std::max(inbox, sum);
  }
  leave_args(rk, "all_to_allv");

  std::vector<int64_t> my_at(P, 0);  // where block p lands in this rank's scratch
  for (int p = 1; p < P; ++p) my_at[p] = my_at[p - 1] + args.recv_counts[p - 1];

  const SymBuffer box = rk.scratch("all_to_allv", bytes_of(inbox, elem));
  const int slot = rk.slots("all_to_allv", P * kMaxTiles);  // [source][tile]
  if (inbox == 0) return;

  // A block of n elements is tiled by tile_elems(n): sender and receiver agree, as n does.
  std::vector<Item> sends, receives;
  for (int q : remote_first(me, P))
    for (int t = 0; t < num_tiles(args.send_counts[q], tile_elems(args.send_counts[q], elem)); ++t)
      sends.push_back({q, t});  // q == me: a local copy (last)
  std::vector<std::uint64_t> target(std::size_t(P) * kMaxTiles);
  for (int p : remote_first(me, P)) {
    if (p == me) continue;
    for (int t = 0; t < num_tiles(args.recv_counts[p], tile_elems(args.recv_counts[p], elem));
         ++t) {
      receives.push_back({p, t});
      target[p * kMaxTiles + t] = rk.expect(slot + p * kMaxTiles + t, 1);
    }
  }
  const auto* send = cbytes(args.send);
  auto* recv = mbytes(args.recv);

  const int grid = grid_for(rk, std::max(sends.size(), receives.size()));
  rk.launch("all_to_allv", grid, [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    for (std::size_t i = w; i < sends.size(); i += G) {
      const int q = sends[i].peer, t = sends[i].tile;
      const int64_t n = args.send_counts[q];
      const Span s = tile_of(n, tile_elems(n, elem), t);
      const std::byte* src = send + bytes_of(args.send_displs[q] + s.begin, elem);
      if (q == me)
        copy_bytes(recv + bytes_of(args.recv_displs[me] + s.begin, elem), src,
                   bytes_of(s.length, elem));
      else
        wg.put_signal(q, box, bytes_of(put_at[q] + s.begin, elem), src, bytes_of(s.length, elem),
                      slot + me * kMaxTiles + t, SignalOp::add, 1);
    }
    for (std::size_t i = w; i < receives.size(); i += G) {
      const int p = receives[i].peer, t = receives[i].tile;
      co_await wg.wait_until(slot + p * kMaxTiles + t, Cmp::ge, target[p * kMaxTiles + t]);
      const int64_t n = args.recv_counts[p];
      const Span s = tile_of(n, tile_elems(n, elem), t);
      copy_bytes(recv + bytes_of(args.recv_displs[p] + s.begin, elem),
                 wg.read(box, bytes_of(my_at[p] + s.begin, elem), bytes_of(s.length, elem)),
                 bytes_of(s.length, elem));
    }
    co_return;
  });
}

void all_gather(Rank& rk, const AllGatherArgs& args) {
  (void)enter(rk, "all_gather", args);
  if (args.wire.format != WireFormat::none) {
    all_gather_wire(rk, args);
    return;
  }
  leave_args(rk, "all_gather");
  const int P = rk.size(), me = rk.rank();
  const std::size_t elem = dtype_size(args.dtype);
  std::vector<int64_t> off(P + 1, 0);
  for (int p = 0; p < P; ++p) off[p + 1] = off[p] + args.recv_counts[p];
  const int64_t total = off[P];

  // Scratch in the layout of recv: part p at off[p] on every rank.
  const SymBuffer box = rk.scratch("all_gather", bytes_of(total, elem));
  const int slot = rk.slots("all_gather", P * kMaxTiles);  // [source][tile]
  if (total == 0) return;

  auto tiles = [&](int p) {
    return num_tiles(args.recv_counts[p], tile_elems(args.recv_counts[p], elem));
  };
  std::vector<Item> sends, receives;
  for (int q : remote_first(me, P))
    for (int t = 0; t < tiles(me); ++t) sends.push_back({q, t});  // q == me: local copy (last)
  std::vector<std::uint64_t> target(std::size_t(P) * kMaxTiles);
  for (int p : remote_first(me, P)) {
    if (p == me) continue;
    for (int t = 0; t < tiles(p); ++t) {
      receives.push_back({p, t});
      target[p * kMaxTiles + t] = rk.expect(slot + p * kMaxTiles + t, 1);
    }
  }
  const auto* send = cbytes(args.send);
  auto* recv = mbytes(args.recv);

  const int grid = grid_for(rk, std::max(sends.size(), receives.size()));
  rk.launch("all_gather", grid, [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    for (std::size_t i = w; i < sends.size(); i += G) {
      const int q = sends[i].peer, t = sends[i].tile;
      const int64_t n = args.recv_counts[me];
      const Span s = tile_of(n, tile_elems(n, elem), t);
      const std::byte* src = send + bytes_of(s.begin, elem);
      const std::size_t at = bytes_of(off[me] + s.begin, elem);
      if (q == me)
        copy_bytes(recv + at, src, bytes_of(s.length, elem));  // skipped in place
      else
        wg.put_signal(q, box, at, src, bytes_of(s.length, elem), slot + me * kMaxTiles + t,
                      SignalOp::add, 1);
    }
    for (std::size_t i = w; i < receives.size(); i += G) {
      const int p = receives[i].peer, t = receives[i].tile;
      co_await wg.wait_until(slot + p * kMaxTiles + t, Cmp::ge, target[p * kMaxTiles + t]);
      const int64_t n = args.recv_counts[p];
      const Span s = tile_of(n, tile_elems(n, elem), t);
      const std::size_t at = bytes_of(off[p] + s.begin, elem);
      copy_bytes(recv + at, wg.read(box, at, bytes_of(s.length, elem)), bytes_of(s.length, elem));
    }
    co_return;
  });
}

void broadcast(Rank& rk, const BroadcastArgs& args) {
  (void)enter(rk, "broadcast", args);
  leave_args(rk, "broadcast");
  const int P = rk.size(), me = rk.rank(), root = args.root;
  const std::size_t elem = dtype_size(args.dtype);
  const SymBuffer box = rk.scratch("broadcast", bytes_of(args.count, elem));
  const int slot = rk.slots("broadcast", kMaxTiles);  // [tile]
  if (args.count == 0) return;

  const int64_t te = tile_elems(args.count, elem);
  const int nt = num_tiles(args.count, te);
  // The root puts every tile to every other rank (remote first, then its own local copy); the
  // others copy each tile out of scratch once it has arrived.
  std::vector<Item> items;
  std::vector<std::uint64_t> target(kMaxTiles);
  if (me == root) {
    for (int q : remote_first(me, P))
      for (int t = 0; t < nt; ++t) items.push_back({q, t});
  } else {
    for (int t = 0; t < nt; ++t) {
      items.push_back({me, t});
      target[t] = rk.expect(slot + t, 1);
    }
  }
  const auto* send = cbytes(args.send);
  auto* recv = mbytes(args.recv);

  rk.launch("broadcast", grid_for(rk, items.size()), [&](WgContext& wg) -> WgTask {
    const std::size_t w = wg.wg(), G = wg.num_wgs();
    for (std::size_t i = w; i < items.size(); i += G) {
      const int q = items[i].peer, t = items[i].tile;
      const Span s = tile_of(args.count, te, t);
      const std::size_t at = bytes_of(s.begin, elem), bytes = bytes_of(s.length, elem);
      if (me != root) {
        co_await wg.wait_until(slot + t, Cmp::ge, target[t]);
        copy_bytes(recv + at, wg.read(box, at, bytes), bytes);
      } else if (q == me) {
        copy_bytes(recv + at, send + at, bytes);  // skipped in place
      } else {
        wg.put_signal(q, box, at, send + at, bytes, slot + t, SignalOp::add, 1);
      }
    }
    co_return;
  });
}

}  // namespace fusedcoll::emu::ops
