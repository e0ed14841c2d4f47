#pragma once
// What the emulator's plain collectives (collectives.cpp) and their compressed-wire versions
// (compressed.cpp) share: the collectives' plans (detail/collective_plan.hpp: tiling, owner
// reduction, ring, chain, exchange, broadcast), tiled for this rank's device and mapped onto its
// scratch buffers and signal slots, with the cumulative target of every slot a kernel waits on.

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

using fusedcoll::detail::collective::RingPlan;

/// A ring AllReduce's plan (detail/collective_plan.hpp, RingPlan) on this rank's scratch and
/// slots: `rs` holds one region of `region_elem`-byte elements per reduce-scatter step, `ag` the
/// whole buffer's layout; the slots rs[step][tile] and ag[step][tile] each get one put and signal
/// per call for every tile < plan.tiles, whose cumulative targets are `rs_target` / `ag_target`
/// [step * plan.tiles + tile]. The plain and the compressed-wire rings share it.
struct RingSchedule {
  RingPlan plan;
  int mt = 1;  // the slots' stride: tiles per chunk at most
  SymBuffer rs{}, ag{};
  int rs_slot = 0, ag_slot = 0;
  std::vector<std::uint64_t> rs_target{}, ag_target{};

  /// The slots of (step, tile) and the value each reaches in this call.
  int rs_at(int step, int tile) const { return rs_slot + step * mt + tile; }
  int ag_at(int step, int tile) const { return ag_slot + step * mt + tile; }
  std::uint64_t rs_until(int step, int tile) const { return rs_target[step * plan.tiles + tile]; }
  std::uint64_t ag_until(int step, int tile) const { return ag_target[step * plan.tiles + tile]; }
};

/// Reserves the scratch and the slots under `key` (collective: every rank, before anything may
/// return early); with `count` = 0 no targets are set. Tiles are cut in `tile_elem`-byte elements.
inline RingSchedule ring_schedule(Rank& rk, const std::string& key, int64_t count,
                                  std::size_t tile_elem, std::size_t region_elem) {
  const Tiling tl = tiling_of(rk);
  RingSchedule s{RingPlan(count, rk.rank(), rk.size(), tl, tile_elem)};
  const RingPlan& pl = s.plan;
  s.mt = tl.max_tiles;
  s.rs = rk.scratch(key + ".rs", bytes_of(pl.regions_elems(), region_elem));
  s.ag = rk.scratch(key + ".ag", bytes_of(count, region_elem));
  s.rs_slot = rk.slots(key + ".rs", pl.steps * s.mt);
  s.ag_slot = rk.slots(key + ".ag", pl.steps * s.mt);
  if (count == 0) return s;
  s.rs_target.resize(std::size_t(pl.steps) * pl.tiles);
  s.ag_target.resize(std::size_t(pl.steps) * pl.tiles);
  for (int st = 0; st < pl.steps; ++st)
    for (int t = 0; t < pl.tiles; ++t) {
      s.rs_target[st * pl.tiles + t] = rk.expect(s.rs_slot + st * s.mt + t, 1);
      s.ag_target[st * pl.tiles + t] = rk.expect(s.ag_slot + st * s.mt + t, 1);
    }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Exchange (detail/collective_plan.hpp, ExchangePlan): All-to-All(v) and AllGather.

using fusedcoll::detail::collective::BroadcastPlan;
using fusedcoll::detail::collective::ChainPlan;
using fusedcoll::detail::collective::ExchangePlan;

/// All-to-All(v)'s plan, tiled for this rank's device. Reads the peers' calls (`all`), so it must
/// be built before `leave_args`.
inline ExchangePlan all_to_allv_plan(const Rank& rk, const AllToAllvArgs& args,
                                     const std::vector<const AllToAllvArgs*>& all) {
  ExchangePlan ex = ExchangePlan::all_to_allv(
      args, rk.rank(), rk.size(),
      [&](int q) -> const std::vector<int64_t>& { return all[q]->recv_counts; });
  ex.tile(tiling_of(rk), dtype_size(args.dtype));
  return ex;
}

/// AllGather's plan, tiled for this rank's device.
inline ExchangePlan all_gather_plan(const Rank& rk, const AllGatherArgs& args) {
  ExchangePlan ex = ExchangePlan::all_gather(args, rk.rank(), rk.size());
  ex.tile(tiling_of(rk), dtype_size(args.dtype));
  return ex;
}

/// An exchange's plan on this rank's scratch (`inbox` elements of `box_elem` bytes) and slots
/// [source][tile], with the cumulative target of every slot it waits on.
struct ExchangeSchedule {
  SymBuffer box{};
  int mt = 1;    // the slots' stride: tiles per block at most
  int slot = 0;  // [source * mt + tile]
  std::vector<std::uint64_t> target{};
};

/// Reserves the scratch and the slots under `key` (collective, the same on every rank); then,
/// unless nothing moves, sets the targets.
inline ExchangeSchedule exchange_schedule(Rank& rk, const std::string& key, const ExchangePlan& ex,
                                          std::size_t box_elem) {
  const int P = rk.size();
  ExchangeSchedule s;
  s.mt = ex.tiling.max_tiles;
  s.box = rk.scratch(key, bytes_of(ex.inbox, box_elem));
  s.slot = rk.slots(key, P * s.mt);
  if (ex.inbox == 0) return s;
  s.target.assign(std::size_t(P) * s.mt, 0);
  for (const Item& it : ex.receives)
    s.target[it.peer * s.mt + it.tile] = rk.expect(s.slot + it.peer * s.mt + it.tile, 1);
  return s;
}

// ---------------------------------------------------------------------------------------------
// The compressed-wire collectives (compressed.cpp), called after `enter` when `wire.format` is
// not none.

void all_reduce_wire(Rank& rk, const AllReduceArgs& args);
void reduce_scatter_wire(Rank& rk, const ReduceScatterArgs& args);
void all_gather_wire(Rank& rk, const AllGatherArgs& args);
void all_to_allv_wire(Rank& rk, const AllToAllvArgs& args, const ExchangePlan& ex);

}  // namespace fusedcoll::emu::ops
