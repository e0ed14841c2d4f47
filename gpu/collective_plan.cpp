// The plans of the GPU backend's collectives (gpu/collective_plan.hpp): every rank's shared plan
// (detail/collective_plan.hpp) translated into steps on the device's buffers and slots. Calls
// arrive validated and agreeing (every rank's arguments at once, as in ref/).

#include "gpu/collective_plan.hpp"

#include <algorithm>

#include "fusedcoll/detail/collective_plan.hpp"
#include "fusedcoll/detail/schedule.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "fusedcoll/error.hpp"

namespace fusedcoll::gpu::coll {
namespace {

using std::int64_t;

using fusedcoll::detail::remote_first;  // the order every backend's plans use

using fusedcoll::detail::collective::BroadcastPlan;
using fusedcoll::detail::collective::ChainPlan;
using fusedcoll::detail::collective::ExchangePlan;
using fusedcoll::detail::collective::Item;
using fusedcoll::detail::collective::OwnerPlan;
using fusedcoll::detail::collective::Parts;
using fusedcoll::detail::collective::RingPlan;
using fusedcoll::detail::collective::Span;
using fusedcoll::detail::collective::Tiling;

/// Builds a plan: the steps of each rank in the order they are added, their sources and
/// targets, buffer sizes, transfers and named slots.
class Builder {
 public:
  Builder(std::string name, int P, DType dtype) {
    p_.name = std::move(name);
    p_.P = P;
    p_.dtype = dtype;
    p_.elem = dtype_size(dtype);
    p_.steps.resize(static_cast<std::size_t>(P));
    for (auto& b : p_.buf_bytes) b.assign(static_cast<std::size_t>(P), 0);
  }
  Plan& plan() { return p_; }

  int slots(const std::string& name, int count) {
    const int base = p_.slot_count;
    p_.slots.push_back({name, base, count});
    p_.slot_count += count;
    return base;
  }

  /// Appends a step of `rank` over `n` elements.
  void step(int rank, int level, int64_t n, int wait_slot, std::vector<Source> srcs,
            std::vector<Target> dsts, bool divide = false) {
    Step s;
    s.level = level;
    s.wait_slot = wait_slot;
    s.n = n;
    s.src_begin = static_cast<int>(p_.sources.size());
    s.src_count = static_cast<int>(srcs.size());
    s.dst_begin = static_cast<int>(p_.targets.size());
    s.dst_count = static_cast<int>(dsts.size());
    s.divide = divide;
    p_.sources.insert(p_.sources.end(), srcs.begin(), srcs.end());
    p_.targets.insert(p_.targets.end(), dsts.begin(), dsts.end());
    p_.steps[static_cast<std::size_t>(rank)].push_back(s);
  }

  /// A step that only waits until `slot` of `rank` received every signal of the call (the
  /// rank's output is complete when it returns): skipped when nothing is sent to it.
  void wait_all(int rank, int level, int slot, std::uint64_t expected) {
    if (expected > 0) step(rank, level, 0, slot, {}, {});
  }

 private:
  Plan p_;
};

/// A reduction's wire (detail/collective_plan.hpp, WireFold) as the steps' accesses: the owner's
/// own contribution is round-tripped when compressed (it is encoded too), what travels is wire.
struct Fold : detail::collective::WireFold {
  Access own;   // the owner's own contribution: raw, or round-tripped
  Access wire;  // what travels between ranks (`elem` bytes an element in scratch)
};

Fold fold_of(const CompressionOptions& wire, ReduceOp op, std::size_t elem) {
  const auto w = detail::collective::WireFold::of(wire, op, elem);
  return {w, w.compressed ? Access::round_trip : Access::raw,
          w.compressed ? Access::wire : Access::raw};
}

void set_reduction_amax(Plan& p, int64_t n, ReduceOp op, const Fold& f) {
  if (!f.compressed) return;
  const Scaling s = resolved_scaling(p.wire);
  p.amax_entries = s == Scaling::none
                       ? 0
                       : (s == Scaling::per_tensor ? 1 : (n + p.wire.block - 1) / p.wire.block);
  p.headroom = detail::reduction_headroom(op, p.P);
  p.amax_predivide = f.predivide;
  for (int r = 0; r < p.P; ++r)
    if (n > 0 && p.amax_entries > 0) p.amax_runs.push_back({r, 0, n, 0});
}

void set_moved_amax(Plan& p, int64_t max_len, std::vector<AmaxRun> runs) {
  if (p.wire.format == WireFormat::none) return;
  const Scaling s = resolved_scaling(p.wire);
  p.amax_entries =
      s == Scaling::none
          ? 0
          : (s == Scaling::per_tensor ? 1 : (max_len + p.wire.block - 1) / p.wire.block);
  p.headroom = 1;
  if (p.amax_entries > 0)
    for (const AmaxRun& r : runs)
      if (r.n > 0) p.amax_runs.push_back(r);
}

/// Every rank's owner plan (detail/collective_plan.hpp), tiled for the GPU.
std::vector<OwnerPlan> owner_plans(const Parts& parts, int P, std::size_t elem, bool gather) {
  std::vector<OwnerPlan> plans;
  for (int r = 0; r < P; ++r) plans.emplace_back(parts, r, P, Tiling::gpu(), elem, gather);
  return plans;
}

/// The owner reduction of AllReduce `direct` and of ReduceScatter (OwnerPlan): part c is folded
/// by rank c in rank order. Level 0 puts the scatter tiles (encoded, when compressed) to their
/// owners' stage; level 1 folds the owner's reduce tiles and hands each finished tile to `finish`.
/// Uncompressed on one device (Reach::device), nothing needs encoding on the way, and every rank's
/// input is on the device before the launch and never written during the call, so the owner's
/// fold reads its peers' send buffers in place (the scatter is skipped: one read of every input,
/// no staging, no wait): on one device that is the memory-bound fold of the baseline. In process
/// mode the inputs are put to their owners as the compressed ones are, raw.
template <class Finish>
void owner_reduce(Builder& b, const std::vector<OwnerPlan>& plans, const Fold& f,
                  Finish&& finish) {
  Plan& p = b.plan();
  const int P = p.P;
  const int64_t eb = static_cast<int64_t>(p.elem), we = static_cast<int64_t>(f.elem);
  if (!f.compressed && p.reach == Reach::device) {
    for (int r = 0; r < P; ++r)
      for (const Item& it : plans[r].reduce) {
        const int64_t at = plans[r].at(it);
        std::vector<Source> srcs;
        for (int q = 0; q < P; ++q) srcs.push_back({{q, Buf::send, at * eb}, Access::raw, false, at});
        b.step(r, 1, plans[r].span(it).length, -1, std::move(srcs), finish(r, at, it.tile),
               f.divide);
      }
    return;
  }
  const int part = b.slots(p.name + ".part", std::max(plans[0].tiles, 1));
  for (int r = 0; r < P; ++r) p.bytes(Buf::stage, r) = P * plans[r].parts.max_len * we;
  for (int r = 0; r < P; ++r)
    for (const Item& it : plans[r].scatter) {
      const int c = it.peer;
      const int64_t at = plans[r].at(it);
      b.step(r, 0, plans[r].span(it).length, -1,
             {{{r, Buf::send, at * eb}, Access::raw, f.predivide, at}},
             {{{c, Buf::stage, (plans[c].inbox_at(r) + plans[r].span(it).begin) * we},
               f.wire,
               at,
               c,
               part + it.tile}});
    }
  for (int r = 0; r < P; ++r)
    for (const Item& it : plans[r].reduce) {
      const Span s = plans[r].span(it);
      const int64_t at = plans[r].at(it);
      std::vector<Source> srcs;
      for (int q = 0; q < P; ++q)
        srcs.push_back(q == r ? Source{{r, Buf::send, at * eb}, f.own, f.predivide, at}
                              : Source{{r, Buf::stage, (plans[r].inbox_at(q) + s.begin) * we},
                                       f.wire,
                                       false,
                                       at});
      b.step(r, 1, s.length, P > 1 ? part + it.tile : -1, std::move(srcs), finish(r, at, it.tile),
             f.divide);
    }
}

/// Where a finished AllReduce tile goes: every rank's recv (remote first), or, compressed, the
/// owner's recv round-tripped and every peer's final buffer encoded.
struct Spread {
  int landed = -1;  // uncompressed
  int fin = -1;     // compressed: [owner][tile]
  int T = 0;
};

std::vector<Target> spread_targets(const Plan& p, const Fold& f, const Spread& sp, int r,
                                   int64_t at, int t) {
  std::vector<Target> dsts;
  const int64_t eb = static_cast<int64_t>(p.elem), we = static_cast<int64_t>(f.elem);
  for (int q : remote_first(r, p.P)) {
    if (q == r)
      dsts.push_back({{r, Buf::recv, at * eb}, f.own, at});
    else if (f.compressed)
      dsts.push_back({{q, Buf::final_wire, at * we}, Access::wire, at, q, sp.fin + r * sp.T + t});
    else
      dsts.push_back({{q, Buf::recv, at * eb}, Access::raw, at, q, sp.landed});
  }
  return dsts;
}

/// The last level of AllReduce `direct` and `ring`: every rank collects the finished tiles of the
/// chunks it does not own (OwnerPlan's collect items): compressed, it decodes them from its final
/// buffer; uncompressed they were stored into its recv, and it waits until all have landed.
void collect_finals(Builder& b, const std::vector<OwnerPlan>& plans, const Fold& f,
                    const Spread& sp, int level) {
  Plan& p = b.plan();
  for (int r = 0; r < p.P; ++r) {
    const OwnerPlan& pl = plans[r];
    if (!f.compressed) {
      b.wait_all(r, level, sp.landed, pl.collect.size());
      continue;
    }
    for (const Item& it : pl.collect) {
      const int64_t at = pl.at(it);
      b.step(r, level, pl.span(it).length, sp.fin + it.peer * sp.T + it.tile,
             {{{r, Buf::final_wire, at * static_cast<int64_t>(f.elem)}, Access::wire, false, at}},
             {{{r, Buf::recv, at * static_cast<int64_t>(p.elem)}, Access::raw, at}});
    }
    p.bytes(Buf::final_wire, r) = pl.parts.total * static_cast<int64_t>(f.elem);
  }
}

/// Compressed chain (ChainPlan, the result spread by the last rank): every tile's running value
/// passes rank 0, 1, ..., P - 1, encoded into the next rank's stage ('chain'[t]); rank P - 1
/// finishes it and spreads it as direct's owner does, then every other rank decodes. All ranks
/// share one device, so the last rank encodes straight into every peer's final buffer (the
/// emulator relays it instead, for its one link per device).
void chain_wire(Builder& b, int64_t n, const Fold& f) {
  Plan& p = b.plan();
  const int P = p.P;
  const int64_t eb = static_cast<int64_t>(p.elem), we = static_cast<int64_t>(f.elem);
  std::vector<ChainPlan> plans;
  for (int r = 0; r < P; ++r)
    plans.emplace_back(n, r, P, Tiling::gpu(), p.elem, ChainPlan::Return::spread);
  const int T = std::max(plans[0].tiles, 1);
  const int chain_slot = b.slots(p.name + ".chain", T);
  const int fin_slot = b.slots(p.name + ".final", T);
  for (int r = 0; r < P; ++r) {
    p.bytes(Buf::stage, r) = n * we;
    p.bytes(Buf::final_wire, r) = n * we;
  }
  for (int r = 0; r < P; ++r) {
    const ChainPlan& pl = plans[r];
    for (int t = 0; t < pl.tiles; ++t) {
      const Span s = pl.span(t);
      std::vector<Source> srcs;
      if (!pl.first()) srcs.push_back({{r, Buf::stage, s.begin * we}, f.wire, false, s.begin});
      srcs.push_back({{r, Buf::send, s.begin * eb}, Access::raw, f.predivide, s.begin});
      const int wait = pl.first() ? -1 : chain_slot + t;
      if (!pl.last()) {
        b.step(r, r, s.length, wait, std::move(srcs),
               {{{pl.next, Buf::stage, s.begin * we}, f.wire, s.begin, pl.next, chain_slot + t}});
        continue;
      }
      std::vector<Target> dsts;
      for (int q : pl.result_to)
        dsts.push_back(
            {{q, Buf::final_wire, s.begin * we}, Access::wire, s.begin, q, fin_slot + t});
      dsts.push_back({{r, Buf::recv, s.begin * eb}, f.own, s.begin});
      b.step(r, r, s.length, wait, std::move(srcs), std::move(dsts), f.divide);
    }
  }
  for (int r = 0; r < P; ++r) {
    const ChainPlan& pl = plans[r];
    if (pl.result_from < 0) continue;
    for (int t = 0; t < pl.tiles; ++t) {
      const Span s = pl.span(t);
      b.step(r, P, s.length, fin_slot + t,
             {{{r, Buf::final_wire, s.begin * we}, Access::wire, false, s.begin}},
             {{{r, Buf::recv, s.begin * eb}, Access::raw, s.begin}});
    }
  }
}

/// Ring (RingPlan): level k of rank r folds the chunk it received at step k - 1 (its own value
/// alone at k = 0: the received value on the left, its own on the right) and sends it on to rank
/// r + 1 at step k, until level P - 1, where its own chunk is finished and spread as direct's
/// owner does (the all-gather half only moves the finished bits). Empty tiles of a shorter chunk
/// are skipped on both ends.
template <class Finish>
void ring_reduce(Builder& b, int64_t n, const Fold& f, Finish&& finish) {
  Plan& p = b.plan();
  const int P = p.P;
  const int64_t eb = static_cast<int64_t>(p.elem), we = static_cast<int64_t>(f.elem);
  std::vector<RingPlan> plans;
  for (int r = 0; r < P; ++r) plans.emplace_back(n, r, P, Tiling::gpu(), p.elem);
  const int T = std::max(plans[0].tiles, 1);
  const int ring_slot = b.slots(p.name + ".ring", (P - 1) * T);
  for (int r = 0; r < P; ++r) p.bytes(Buf::stage, r) = plans[r].regions_elems() * we;
  for (int r = 0; r < P; ++r) {
    const RingPlan& pl = plans[r];
    for (int k = 0; k < P; ++k) {
      const int c = k == 0 ? pl.send_chunk(0) : pl.recv_chunk(k - 1);
      for (int t = 0; t < pl.tiles_of(c); ++t) {
        const Span s = pl.span(c, t);
        const int64_t at = pl.parts.off[c] + s.begin;
        std::vector<Source> srcs;
        if (k > 0)
          srcs.push_back(
              {{r, Buf::stage, (pl.region_at(k - 1) + s.begin) * we}, f.wire, false, at});
        srcs.push_back({{r, Buf::send, at * eb}, Access::raw, f.predivide, at});
        const int wait = k > 0 ? ring_slot + (k - 1) * T + t : -1;
        if (k < pl.steps)
          b.step(r, k, s.length, wait, std::move(srcs),
                 {{{pl.next, Buf::stage, (pl.region_at(k) + s.begin) * we},
                   f.wire,
                   at,
                   pl.next,
                   ring_slot + k * T + t}});
        else
          b.step(r, k, s.length, wait, std::move(srcs), finish(r, at, t), f.divide);
      }
    }
  }
}

/// The receiving level of an exchange (ExchangePlan, both inboxes laid out like recv): compressed,
/// every rank decodes each block's tiles from its stage as they arrive (slots `fin` + [source][tile],
/// stride T); uncompressed they were stored into its recv, and it waits until all have landed.
void receive_blocks(Builder& b, const std::vector<ExchangePlan>& plans, int landed, int fin, int T,
                    int64_t we) {
  Plan& p = b.plan();
  const int64_t eb = static_cast<int64_t>(p.elem);
  for (int q = 0; q < p.P; ++q) {
    const ExchangePlan& ex = plans[q];
    if (!p.compressed()) {
      b.wait_all(q, 1, landed, ex.receives.size());
      continue;
    }
    for (const Item& it : ex.receives) {
      const Span s = ex.recv_span(it);
      const int64_t at = ex.box_at[it.peer] + s.begin;
      b.step(q, 1, s.length, fin + it.peer * T + it.tile,
             {{{q, Buf::stage, at * we}, Access::wire, false, s.begin}},
             {{{q, Buf::recv, at * eb}, Access::raw, s.begin}});
    }
  }
}

}  // namespace

Plan plan_all_reduce(std::span<const AllReduceArgs> all, Reach reach) {
  const AllReduceArgs& a = all[0];
  const int P = static_cast<int>(all.size());
  Builder b(std::string("all_reduce ") + to_string(a.algo), P, a.dtype);
  Plan& p = b.plan();
  p.reach = reach;
  p.reduce = a.op;
  p.wire = a.wire;
  const Fold f = fold_of(a.wire, a.op, p.elem);
  const int64_t n = a.count, eb = static_cast<int64_t>(p.elem);
  for (int r = 0; r < P; ++r) {
    p.bytes(Buf::send, r) = n * eb;
    p.bytes(Buf::recv, r) = n * eb;
    if (n > 0) {
      p.uploads.push_back({{r, Buf::send, 0}, all[r].send, n * eb});
      p.downloads.push_back({{r, Buf::recv, 0}, all[r].recv, n * eb});
    }
  }
  set_reduction_amax(p, n, a.op, f);

  // Uncompressed, chain is direct's order and runs as direct.
  if (a.algo == AllReduceAlgo::chain && P > 1 && f.compressed) {
    chain_wire(b, n, f);
    return std::move(p);
  }
  const std::vector<OwnerPlan> owners = owner_plans(Parts::chunks(n, P), P, p.elem, true);
  Spread sp;
  sp.T = std::max(owners[0].tiles, 1);
  if (f.compressed)
    sp.fin = b.slots(p.name + ".final", P * sp.T);
  else
    sp.landed = b.slots(p.name + ".landed", 1);
  auto finish = [&](int r, int64_t at, int t) { return spread_targets(p, f, sp, r, at, t); };
  if (a.algo == AllReduceAlgo::ring && P > 1) {
    ring_reduce(b, n, f, finish);
    collect_finals(b, owners, f, sp, P);
  } else {
    owner_reduce(b, owners, f, finish);
    collect_finals(b, owners, f, sp, 2);
  }
  return std::move(p);
}

Plan plan_reduce_scatter(std::span<const ReduceScatterArgs> all, Reach reach) {
  const ReduceScatterArgs& a = all[0];
  const int P = static_cast<int>(all.size());
  Builder b("reduce_scatter", P, a.dtype);
  Plan& p = b.plan();
  p.reach = reach;
  p.reduce = a.op;
  p.wire = a.wire;
  const Fold f = fold_of(a.wire, a.op, p.elem);
  const int64_t eb = static_cast<int64_t>(p.elem);
  const Parts parts = Parts::counts(a.recv_counts);
  const int64_t total = parts.total;
  for (int r = 0; r < P; ++r) {
    const int64_t len = parts.len[r];
    p.bytes(Buf::send, r) = total * eb;
    p.bytes(Buf::recv, r) = len * eb;
    if (total > 0) p.uploads.push_back({{r, Buf::send, 0}, all[r].send, total * eb});
    if (len > 0) p.downloads.push_back({{r, Buf::recv, 0}, all[r].recv, len * eb});
  }
  set_reduction_amax(p, total, a.op, f);
  // The owner's result stays with it: nothing crosses the wire after the fold, no final encode.
  owner_reduce(b, owner_plans(parts, P, p.elem, false), f, [&](int r, int64_t at, int) {
    return std::vector<Target>{{{r, Buf::recv, (at - parts.off[r]) * eb}, Access::raw, at}};
  });
  return std::move(p);
}

Plan plan_all_gather(std::span<const AllGatherArgs> all) {
  const AllGatherArgs& a = all[0];
  const int P = static_cast<int>(all.size());
  Builder b("all_gather", P, a.dtype);
  Plan& p = b.plan();
  p.wire = a.wire;
  const bool compressed = a.wire.format != WireFormat::none;
  const int64_t eb = static_cast<int64_t>(p.elem);
  const int64_t we = compressed ? static_cast<int64_t>(wire_size(a.wire.format)) : eb;
  // Every rank's exchange (ExchangePlan), one tile size for the whole kernel.
  std::vector<ExchangePlan> plans;
  for (int r = 0; r < P; ++r) {
    plans.push_back(ExchangePlan::all_gather(all[r], r, P));
    plans.back().tile(Tiling::gpu(), p.elem, /*uniform=*/true);
  }
  const int64_t total = plans[0].inbox;
  const int T = std::max(plans[0].tiles(), 1);
  std::vector<AmaxRun> runs;
  for (int r = 0; r < P; ++r) {
    const int64_t len = a.recv_counts[r];
    p.bytes(Buf::send, r) = len * eb;
    p.bytes(Buf::recv, r) = total * eb;
    if (compressed) p.bytes(Buf::stage, r) = total * we;
    if (len > 0) p.uploads.push_back({{r, Buf::send, 0}, all[r].send, len * eb});
    if (total > 0) p.downloads.push_back({{r, Buf::recv, 0}, all[r].recv, total * eb});
    runs.push_back({r, 0, len, 0});
  }
  set_moved_amax(p, plans[0].longest(), runs);
  const int landed = compressed ? -1 : b.slots("all_gather.landed", 1);
  const int fin = compressed ? b.slots("all_gather.arrived", P * T) : -1;
  // A rank's block goes to every rank at once: one step per tile, a target per destination.
  for (int r = 0; r < P; ++r) {
    const ExchangePlan& ex = plans[r];
    for (int t = 0; t < ex.send_tiles(r); ++t) {
      const Span s = ex.send_span({r, t});
      const int64_t at = ex.recv_at[r] + s.begin;
      std::vector<Target> dsts;
      for (int q : ex.order) {
        if (!compressed)
          dsts.push_back(
              {{q, Buf::recv, at * eb}, Access::raw, 0, q == r ? -1 : q, q == r ? -1 : landed});
        else if (q == r)
          dsts.push_back({{r, Buf::recv, at * eb}, Access::round_trip, s.begin});
        else
          dsts.push_back({{q, Buf::stage, at * we}, Access::wire, s.begin, q, fin + r * T + t});
      }
      b.step(r, 0, s.length, -1, {{{r, Buf::send, s.begin * eb}, Access::raw, false, s.begin}},
             std::move(dsts));
    }
  }
  receive_blocks(b, plans, landed, fin, T, we);
  return std::move(p);
}

Plan plan_all_to_allv(std::span<const AllToAllvArgs> all) {
  const int P = static_cast<int>(all.size());
  const AllToAllvArgs& a = all[0];
  Builder b("all_to_allv", P, a.dtype);
  Plan& p = b.plan();
  p.wire = a.wire;
  const bool compressed = a.wire.format != WireFormat::none;
  const int64_t eb = static_cast<int64_t>(p.elem);
  const int64_t we = compressed ? static_cast<int64_t>(wire_size(a.wire.format)) : eb;
  // Every rank's exchange (ExchangePlan), one tile size for the whole kernel. Device buffers are
  // packed: rank r's send by destination (sofs), rank q's recv by source (the plan's inbox).
  std::vector<ExchangePlan> plans;
  for (int r = 0; r < P; ++r) {
    plans.push_back(ExchangePlan::all_to_allv(
        all[r], r, P, [&](int q) -> const std::vector<int64_t>& { return all[q].recv_counts; }));
    plans.back().tile(Tiling::gpu(), p.elem, /*uniform=*/true);
  }
  std::vector<std::vector<int64_t>> sofs(P, std::vector<int64_t>(P));
  for (int r = 0; r < P; ++r) {
    int64_t s = 0, d = 0;
    for (int q = 0; q < P; ++q) {
      sofs[r][q] = s;
      s += all[r].send_counts[q];
      d += all[r].recv_counts[q];
    }
    p.bytes(Buf::send, r) = s * eb;
    p.bytes(Buf::recv, r) = d * eb;
    if (compressed) p.bytes(Buf::stage, r) = d * we;
  }
  std::vector<AmaxRun> runs;
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < P; ++q) {
      const int64_t sc = all[r].send_counts[q], rc = all[r].recv_counts[q];
      const auto* sb = static_cast<const unsigned char*>(all[r].send);
      auto* rb = static_cast<unsigned char*>(all[r].recv);
      if (sc > 0)
        p.uploads.push_back(
            {{r, Buf::send, sofs[r][q] * eb}, sb + all[r].send_displs[q] * eb, sc * eb});
      if (rc > 0)
        p.downloads.push_back(
            {{r, Buf::recv, plans[r].box_at[q] * eb}, rb + all[r].recv_displs[q] * eb, rc * eb});
      runs.push_back({r, sofs[r][q] * eb, sc, 0});
    }
  set_moved_amax(p, plans[0].longest(), runs);
  const int T = std::max(plans[0].tiles(), 1);
  const int landed = compressed ? -1 : b.slots("all_to_allv.landed", 1);
  const int fin = compressed ? b.slots("all_to_allv.arrived", P * T) : -1;
  for (int r = 0; r < P; ++r) {
    const ExchangePlan& ex = plans[r];
    for (const Item& it : ex.sends) {
      const int q = it.peer;
      const Span s = ex.send_span(it);
      const int64_t at = ex.put_at[q] + s.begin;
      Target d;
      if (q == r)
        d = {{r, Buf::recv, at * eb}, compressed ? Access::round_trip : Access::raw, s.begin};
      else if (compressed)
        d = {{q, Buf::stage, at * we}, Access::wire, s.begin, q, fin + r * T + it.tile};
      else
        d = {{q, Buf::recv, at * eb}, Access::raw, s.begin, q, landed};
      b.step(r, 0, s.length, -1,
             {{{r, Buf::send, (sofs[r][q] + s.begin) * eb}, Access::raw, false, s.begin}}, {d});
    }
  }
  receive_blocks(b, plans, landed, fin, T, we);
  return std::move(p);
}

Plan plan_broadcast(std::span<const BroadcastArgs> all) {
  const BroadcastArgs& a = all[0];
  const int P = static_cast<int>(all.size()), root = a.root;
  Builder b("broadcast", P, a.dtype);
  Plan& p = b.plan();
  const int64_t n = a.count, eb = static_cast<int64_t>(p.elem);
  p.bytes(Buf::send, root) = n * eb;
  if (n > 0) p.uploads.push_back({{root, Buf::send, 0}, all[root].send, n * eb});
  for (int r = 0; r < P; ++r) {
    p.bytes(Buf::recv, r) = n * eb;
    if (n > 0) p.downloads.push_back({{r, Buf::recv, 0}, all[r].recv, n * eb});
  }
  const int landed = b.slots("broadcast.landed", 1);
  // The root's tiles go to every rank at once: one step per tile, a target per destination.
  const BroadcastPlan sender(n, root, root, P, Tiling::gpu(), p.elem);
  for (int t = 0; t < sender.tiles; ++t) {
    const Span s = sender.span(t);
    std::vector<Target> dsts;
    for (int q : sender.order)
      dsts.push_back({{q, Buf::recv, s.begin * eb},
                      Access::raw,
                      0,
                      q == root ? -1 : q,
                      q == root ? -1 : landed});
    b.step(root, 0, s.length, -1, {{{root, Buf::send, s.begin * eb}, Access::raw, false, 0}},
           std::move(dsts));
  }
  for (int q = 0; q < P; ++q)
    if (q != root)
      b.wait_all(q, 1, landed, BroadcastPlan(n, root, q, P, Tiling::gpu(), p.elem).items.size());
  return std::move(p);
}

std::vector<std::vector<std::uint64_t>> signal_counts(const Plan& plan) {
  std::vector<std::vector<std::uint64_t>> n(static_cast<std::size_t>(plan.P),
                                            std::vector<std::uint64_t>(plan.slot_count, 0));
  for (const auto& rank_steps : plan.steps)
    for (const Step& s : rank_steps)
      for (int d = s.dst_begin; d < s.dst_begin + s.dst_count; ++d) {
        const Target& t = plan.targets[static_cast<std::size_t>(d)];
        if (t.signal_slot >= 0) ++n[t.signal_rank][t.signal_slot];
      }
  return n;
}

bool is_move(const Plan& plan, const Step& s) {
  if (s.src_count != 1 || s.divide) return false;
  const Source& src = plan.sources[static_cast<std::size_t>(s.src_begin)];
  if (src.access != Access::raw || src.predivide) return false;
  for (int d = s.dst_begin; d < s.dst_begin + s.dst_count; ++d)
    if (plan.targets[static_cast<std::size_t>(d)].access != Access::raw) return false;
  return true;
}

Resolved resolve(const Plan& plan, const std::vector<std::array<unsigned char*, kNumBufs>>& base,
                 int slot0, const std::function<std::uint64_t(int, int)>& target) {
  Resolved out;
  auto addr = [&](const Place& at) {
    return base[static_cast<std::size_t>(at.rank)][static_cast<int>(at.buf)] + at.offset;
  };
  for (const Source& s : plan.sources)
    out.sources.push_back({addr(s.at), static_cast<std::uint8_t>(s.access), s.predivide, s.index0});
  for (const Target& t : plan.targets)
    out.targets.push_back({addr(t.at), static_cast<std::uint8_t>(t.access), t.index0, t.signal_rank,
                           t.signal_slot >= 0 ? slot0 + t.signal_slot : -1});
  out.step_begin.push_back(0);
  for (int r = 0; r < plan.P; ++r) {
    const auto& mine = plan.steps[static_cast<std::size_t>(r)];
    for (const Step& s : mine) {
      XStep x{};
      x.wait_slot = s.wait_slot >= 0 ? slot0 + s.wait_slot : -1;
      x.wait_target = s.wait_slot >= 0 ? target(r, s.wait_slot) : 0;
      x.n = s.n;
      x.src_begin = s.src_begin;
      x.src_count = s.src_count;
      x.dst_begin = s.dst_begin;
      x.dst_count = s.dst_count;
      x.divide = s.divide;
      x.move = is_move(plan, s);
      out.steps.push_back(x);
    }
    out.step_begin.push_back(static_cast<int>(out.steps.size()));
  }
  return out;
}

}  // namespace fusedcoll::gpu::coll
