#pragma once
// What the emulator's plain collectives (collectives.cpp) and their compressed-wire versions
// (compressed.cpp) share: tiling, the owner reduction's schedule, and the exchange in which every
// rank sends one block to every rank (All-to-All(v), and AllGather, whose blocks to all peers are
// one and the same). Tiles are sets of whole elements, so tiling never changes a bit.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "emu/ops.hpp"
#include "fusedcoll/detail/collective_plan.hpp"

namespace fusedcoll::emu::ops {

using std::int64_t;

using fusedcoll::detail::collective::Item;
using fusedcoll::detail::collective::mod;
using fusedcoll::detail::collective::num_tiles;
using fusedcoll::detail::collective::Span;
using fusedcoll::detail::collective::tile_of;
using fusedcoll::detail::collective::Tiling;

/// The tiling of this rank's calls (detail/collective_plan.hpp): in virtual time the device is the
/// preset's GPU and its resident workgroups, on the host's threads its compute units.
inline Tiling tiling_of(const Rank& rk) {
  return rk.virtual_time() ? Tiling::device(rk.max_resident_wgs(), rk.size())
                           : Tiling::threads(rk.compute_units());
}

inline std::size_t bytes_of(int64_t count, std::size_t elem) {
  return static_cast<std::size_t>(count) * elem;
}

inline const std::byte* cbytes(const void* p) { return static_cast<const std::byte*>(p); }
inline std::byte* mbytes(void* p) { return static_cast<std::byte*>(p); }

/// memcpy that tolerates empty ranges and identical pointers (in-place slots).
inline void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

/// `copy_bytes` as a costed span of `wg` (virtual time, docs/simulation.md).
inline void copy_span(WgContext& wg, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  wg.compute("copy", {model::copy(static_cast<int64_t>(bytes))},
             [&] { copy_bytes(dst, src, bytes); });
}

// ---------------------------------------------------------------------------------------------
// Owner reduction (detail/collective_plan.hpp, OwnerPlan): AllReduce `direct` and ReduceScatter.

using fusedcoll::detail::collective::OwnerPlan;
using fusedcoll::detail::collective::Parts;

/// An owner reduction's plan on this rank's slots: in[tile] (the P - 1 contributions to this
/// rank's part) and, with gather, out[part][tile] (the owners' finished tiles), each with the
/// cumulative target its reduce or collect tile waits for. The plain and the compressed-wire
/// kernels share it.
struct OwnerSchedule {
  OwnerPlan plan;
  int mt = 1;        // the slots' stride: tiles per part at most
  int in_slot = 0;   // [tile]
  int out_slot = 0;  // [part][tile] (gather only)
  std::vector<std::uint64_t> in_target{}, out_target{};  // [tile], [part * mt + tile]

  int out_slot_of(int part, int tile) const { return out_slot + part * mt + tile; }
};

/// This rank's plan, tiled for its device in `tile_elem`-byte elements.
inline OwnerPlan owner_plan(const Rank& rk, Parts parts, std::size_t tile_elem, bool gather) {
  return OwnerPlan(std::move(parts), rk.rank(), rk.size(), tiling_of(rk), tile_elem, gather);
}

/// Reserves the slots of `plan` under `key` (collective: every rank, before anything may return
/// early) and, unless no part has an element, sets the targets.
inline OwnerSchedule owner_schedule(Rank& rk, const std::string& key, OwnerPlan plan) {
  const int P = rk.size();
  OwnerSchedule s{std::move(plan)};
  const bool gather = s.plan.gather;
  s.mt = tiling_of(rk).max_tiles;
  s.in_slot = rk.slots(key + ".in", s.mt);
  // Only the all-gather uses them (the same choice on every rank).
  s.out_slot = gather ? rk.slots(key + ".out", P * s.mt) : 0;
  if (s.plan.parts.max_len == 0) return s;
  s.in_target.assign(s.mt, 0);
  s.out_target.assign(std::size_t(P) * s.mt, 0);
  for (const Item& it : s.plan.reduce)
    s.in_target[it.tile] = rk.expect(s.in_slot + it.tile, s.plan.in_signals());
  for (const Item& it : s.plan.collect) {
    const int slot = it.peer * s.mt + it.tile;
    s.out_target[slot] = rk.expect(s.out_slot + slot, 1);
  }
  return s;
}

/// A ring AllReduce's layout: `count` in chunk_of chunks, each cut into tiles of `te` elements (those
/// of the longest chunk, `nt` of them), P - 1 reduce-scatter and P - 1 all-gather steps. `rs` holds
/// one region of max_len `region_elem`-byte elements per reduce-scatter step, `ag` the whole
/// buffer's layout; every (step, tile < nt) of each gets exactly one put and signal per call,
/// empty tiles included, whose cumulative targets are `rs_target` / `ag_target` [step * nt + tile].
/// The plain and the compressed-wire rings share it.
struct RingSchedule {
  Parts parts;
  int steps = 0;
  int mt = 1;  // the slots' stride: tiles per chunk at most
  int64_t te = 1;
  int nt = 0;
  SymBuffer rs, ag;
  int rs_slot = 0, ag_slot = 0;  // [step][tile]
  std::vector<std::uint64_t> rs_target, ag_target;
};

/// Reserves the scratch and the slots under `key` (collective: every rank, before anything may
/// return early); with `count` = 0 no targets are set. Tiles are cut in `tile_elem`-byte elements.
inline RingSchedule ring_schedule(Rank& rk, const std::string& key, int64_t count,
                                  std::size_t tile_elem, std::size_t region_elem) {
  const int P = rk.size();
  const Tiling tl = tiling_of(rk);
  RingSchedule s;
  s.parts = Parts::chunks(count, P);
  s.steps = P - 1;
  s.mt = tl.max_tiles;
  s.te = tl.elems(s.parts.max_len, tile_elem);
  s.nt = num_tiles(s.parts.max_len, s.te);
  s.rs = rk.scratch(key + ".rs", bytes_of(int64_t{s.steps} * s.parts.max_len, region_elem));
  s.ag = rk.scratch(key + ".ag", bytes_of(count, region_elem));
  s.rs_slot = rk.slots(key + ".rs", s.steps * s.mt);
  s.ag_slot = rk.slots(key + ".ag", s.steps * s.mt);
  if (count == 0) return s;
  s.rs_target.resize(std::size_t(s.steps) * s.nt);
  s.ag_target.resize(std::size_t(s.steps) * s.nt);
  for (int st = 0; st < s.steps; ++st)
    for (int t = 0; t < s.nt; ++t) {
      s.rs_target[st * s.nt + t] = rk.expect(s.rs_slot + st * s.mt + t, 1);
      s.ag_target[st * s.nt + t] = rk.expect(s.ag_slot + st * s.mt + t, 1);
    }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Exchange: every rank sends one block to every rank, itself included (a local copy, last). Each
// receiver's scratch holds its incoming blocks; a block of n elements is tiled by
// Tiling::elems(n), so sender and receiver agree, as n does. Offsets and lengths are in elements.

/// One rank's side of an exchange.
struct Exchange {
  std::string key;     // scratch and slot names
  std::string kernel;  // the kernel's name (traces, timeout reports)
  int64_t inbox = 0;   // scratch elements: the largest inbox of all ranks, so the same everywhere
  std::vector<int64_t> send_len, send_at;  // [q]: the block for q, at send_at[q] in `send`
  std::vector<int64_t> put_at;             // [q]: where that block lands in q's scratch
  std::vector<int64_t> recv_len, recv_at;  // [p]: the block from p, at recv_at[p] in `recv`
  std::vector<int64_t> box_at;             // [p]: where that block sits in this rank's scratch
};

/// All-to-All(v): q's scratch packs its incoming blocks in source order. Reads the peers' calls
/// (`all`), so it must be built before `leave_args`.
inline Exchange all_to_allv_exchange(Rank& rk, const AllToAllvArgs& args,
                                     const std::vector<const AllToAllvArgs*>& all) {
  const int P = rk.size(), me = rk.rank();
  Exchange ex;
  ex.put_at.assign(P, 0);
  for (int q = 0; q < P; ++q) {
    int64_t sum = 0;
    for (int p = 0; p < P; ++p) {
      if (p == me) ex.put_at[q] = sum;
      sum += all[q]->recv_counts[p];
    }
    ex.inbox = std::max(ex.inbox, sum);
  }
  ex.box_at.assign(P, 0);
  for (int p = 1; p < P; ++p) ex.box_at[p] = ex.box_at[p - 1] + args.recv_counts[p - 1];
  ex.send_len = args.send_counts;
  ex.send_at = args.send_displs;
  ex.recv_len = args.recv_counts;
  ex.recv_at = args.recv_displs;
  return ex;
}

/// AllGather: every block is this rank's whole contribution (at 0 in `send`), and every scratch
/// is laid out like `recv` (part p at off[p] on every rank).
inline Exchange all_gather_exchange(Rank& rk, const AllGatherArgs& args) {
  const int P = rk.size(), me = rk.rank();
  Exchange ex;
  std::vector<int64_t> off(P + 1, 0);
  for (int p = 0; p < P; ++p) off[p + 1] = off[p] + args.recv_counts[p];
  ex.inbox = off[P];
  ex.send_len.assign(P, args.recv_counts[me]);
  ex.send_at.assign(P, 0);
  ex.put_at.assign(P, off[me]);
  ex.recv_len = args.recv_counts;
  ex.recv_at.assign(off.begin(), off.end() - 1);
  ex.box_at = ex.recv_at;
  return ex;
}

/// The work of one exchange call: this rank's sends (remote peers first, its own block last) and
/// receives (remote peers only) as (peer, tile) items, and the cumulative target of every slot
/// [source][tile] it waits on.
struct ExchangeSchedule {
  SymBuffer box{};
  Tiling tiling;
  int slot = 0;  // [source * tiling.max_tiles + tile]
  std::vector<Item> sends, receives;
  std::vector<std::uint64_t> target;
};

/// Reserves the scratch (`inbox` elements of `box_elem` bytes) and the slots (collective, the same
/// on every rank); then, unless nothing moves, lists the work with tiles of `tile_elem`-byte
/// elements.
inline ExchangeSchedule exchange_schedule(Rank& rk, const Exchange& ex, std::size_t tile_elem,
                                          std::size_t box_elem) {
  const int P = rk.size(), me = rk.rank();
  ExchangeSchedule s;
  s.tiling = tiling_of(rk);
  const int mt = s.tiling.max_tiles;
  s.box = rk.scratch(ex.key, bytes_of(ex.inbox, box_elem));
  s.slot = rk.slots(ex.key, P * mt);
  if (ex.inbox == 0) return s;
  for (int q : remote_first(me, P))
    for (int t = 0; t < num_tiles(ex.send_len[q], s.tiling.elems(ex.send_len[q], tile_elem)); ++t)
      s.sends.push_back({q, t});
  s.target.assign(std::size_t(P) * mt, 0);
  for (int p : remote_first(me, P)) {
    if (p == me) continue;
    for (int t = 0; t < num_tiles(ex.recv_len[p], s.tiling.elems(ex.recv_len[p], tile_elem)); ++t) {
      s.receives.push_back({p, t});
      s.target[p * mt + t] = rk.expect(s.slot + p * mt + t, 1);
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// The compressed-wire collectives (compressed.cpp), called after `enter` when `wire.format` is
// not none.

void all_reduce_wire(Rank& rk, const AllReduceArgs& args);
void reduce_scatter_wire(Rank& rk, const ReduceScatterArgs& args);
void all_gather_wire(Rank& rk, const AllGatherArgs& args);
void all_to_allv_wire(Rank& rk, const AllToAllvArgs& args,
                      const std::vector<const AllToAllvArgs*>& all);

}  // namespace fusedcoll::emu::ops
