// The plans of the GPU backend's collectives (gpu/collective_plan.hpp). Calls arrive validated
// and agreeing (every rank's arguments at once, as in ref/).

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

using fusedcoll::detail::collective::num_tiles;
using fusedcoll::detail::collective::Span;
using fusedcoll::detail::collective::tile_of;

int64_t tile_elems(int64_t len, std::size_t elem) {
  return fusedcoll::detail::collective::Tiling::gpu().elems(len, elem);
}

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

/// The reduction's compression settings, shared by AllReduce and ReduceScatter: what the owner's
/// own contribution goes through, whether contributions are predivided, whether the fold ends
/// with the avg division.
struct Fold {
  bool compressed;
  bool predivide;
  bool divide;
  Access own;      // the owner's own contribution: raw, or round-tripped (it is encoded too)
  Access wire;     // what travels between ranks
  std::size_t we;  // bytes per element in scratch
};

Fold fold_of(const CompressionOptions& wire, ReduceOp op, std::size_t elem) {
  Fold f;
  f.compressed = wire.format != WireFormat::none;
  f.predivide = f.compressed && op == ReduceOp::avg && wire.predivide;
  f.divide = f.compressed ? detail::divides_after(op, wire) : op == ReduceOp::avg;
  f.own = f.compressed ? Access::round_trip : Access::raw;
  f.wire = f.compressed ? Access::wire : Access::raw;
  f.we = f.compressed ? wire_size(wire.format) : elem;
  return f;
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

/// The reduce-scatter of AllReduce `direct` and of ReduceScatter: chunk c (offset off[c], length
/// len[c]) is folded by rank c in rank order. Compressed: level 0 puts the encoded tiles of every
/// other chunk to its owner's stage; level 1 folds the owner's tiles and hands each finished
/// element to `finish`. Uncompressed, nothing needs encoding on the way, and every rank's input is
/// on the device before the launch and never written during the call, so the owner's fold reads
/// its peers' send buffers in place (one read of every input, no staging, no wait): on one device
/// that is the memory-bound fold of the baseline.
template <class Finish>
void owner_reduce(Builder& b, const std::vector<int64_t>& off, const std::vector<int64_t>& len,
                  const Fold& f, Finish&& finish) {
  Plan& p = b.plan();
  const int P = p.P;
  const int64_t maxlen = *std::max_element(len.begin(), len.end());
  const int64_t te = tile_elems(maxlen, p.elem);
  if (!f.compressed) {
    const int64_t eb = static_cast<int64_t>(p.elem);
    for (int r = 0; r < P; ++r)
      for (int t = 0; t < num_tiles(len[r], te); ++t) {
        const Span s = tile_of(len[r], te, t);
        const int64_t at = off[r] + s.begin;
        std::vector<Source> srcs;
        for (int q = 0; q < P; ++q) srcs.push_back({{q, Buf::send, at * eb}, Access::raw, false, at});
        b.step(r, 1, s.length, -1, std::move(srcs), finish(r, at, s.begin), f.divide);
      }
    return;
  }
  const int T = num_tiles(maxlen, te);
  const int part = b.slots(p.name + ".part", std::max(T, 1));
  for (int r = 0; r < P; ++r) p.bytes(Buf::stage, r) = P * maxlen * static_cast<int64_t>(f.we);
  for (int r = 0; r < P; ++r)
    for (int c : remote_first(r, P)) {
      if (c == r) continue;
      for (int t = 0; t < num_tiles(len[c], te); ++t) {
        const Span s = tile_of(len[c], te, t);
        const int64_t at = off[c] + s.begin;
        b.step(r, 0, s.length, -1,
               {{{r, Buf::send, at * static_cast<int64_t>(p.elem)}, Access::raw, f.predivide, at}},
               {{{c, Buf::stage, (r * maxlen + s.begin) * static_cast<int64_t>(f.we)},
                 f.wire,
                 at,
                 c,
                 part + t}});
      }
    }
  for (int r = 0; r < P; ++r)
    for (int t = 0; t < num_tiles(len[r], te); ++t) {
      const Span s = tile_of(len[r], te, t);
      const int64_t at = off[r] + s.begin;
      std::vector<Source> srcs;
      for (int q = 0; q < P; ++q)
        srcs.push_back(
            q == r
                ? Source{{r, Buf::send, at * static_cast<int64_t>(p.elem)}, f.own, f.predivide, at}
                : Source{{r, Buf::stage, (q * maxlen + s.begin) * static_cast<int64_t>(f.we)},
                         f.wire,
                         false,
                         at});
      b.step(r, 1, s.length, P > 1 ? part + t : -1, std::move(srcs), finish(r, at, s.begin),
             f.divide);
    }
}

/// Where a finished AllReduce chunk goes: every rank's recv (remote first), or, compressed, the
/// owner's recv round-tripped and every peer's final buffer encoded.
struct Spread {
  int landed = -1;  // uncompressed
  int fin = -1;     // compressed: [owner][tile]
  int T = 0;
  int64_t te = 1;
};

std::vector<Target> spread_targets(const Plan& p, const Fold& f, const Spread& sp, int r,
                                   int64_t at, int t) {
  std::vector<Target> dsts;
  const int64_t eb = static_cast<int64_t>(p.elem), we = static_cast<int64_t>(f.we);
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

/// Decode steps of a compressed AllReduce: every rank decodes the finished tiles of the chunks it
/// does not own from its final buffer.
void decode_finals(Builder& b, const std::vector<int64_t>& off, const std::vector<int64_t>& len,
                   const Fold& f, const Spread& sp, int level) {
  Plan& p = b.plan();
  for (int r = 0; r < p.P; ++r)
    for (int c : remote_first(r, p.P)) {
      if (c == r) continue;
      for (int t = 0; t < num_tiles(len[c], sp.te); ++t) {
        const Span s = tile_of(len[c], sp.te, t);
        const int64_t at = off[c] + s.begin;
        b.step(r, level, s.length, sp.fin + c * sp.T + t,
               {{{r, Buf::final_wire, at * static_cast<int64_t>(f.we)}, Access::wire, false, at}},
               {{{r, Buf::recv, at * static_cast<int64_t>(p.elem)}, Access::raw, at}});
      }
    }
}

/// The tiles of every chunk but `r`'s: what a rank receives from the owners.
std::uint64_t tiles_from_others(const std::vector<int64_t>& len, int64_t te, int r) {
  std::uint64_t n = 0;
  for (std::size_t c = 0; c < len.size(); ++c)
    if (static_cast<int>(c) != r) n += static_cast<std::uint64_t>(num_tiles(len[c], te));
  return n;
}

}  // namespace

Plan plan_all_reduce(std::span<const AllReduceArgs> all) {
  const AllReduceArgs& a = all[0];
  const int P = static_cast<int>(all.size());
  const bool ring = a.algo == AllReduceAlgo::ring && P > 1;
  Builder b(std::string("all_reduce ") + to_string(a.algo), P, a.dtype);
  Plan& p = b.plan();
  p.reduce = a.op;
  p.wire = a.wire;
  const Fold f = fold_of(a.wire, a.op, p.elem);
  const int64_t n = a.count, eb = static_cast<int64_t>(p.elem);
  std::vector<int64_t> off(P), len(P);
  for (int c = 0; c < P; ++c) {
    const Chunk ch = chunk_of(n, P, c);
    off[c] = ch.offset;
    len[c] = ch.length;
  }
  for (int r = 0; r < P; ++r) {
    p.bytes(Buf::send, r) = n * eb;
    p.bytes(Buf::recv, r) = n * eb;
    if (n > 0) {
      p.uploads.push_back({{r, Buf::send, 0}, all[r].send, n * eb});
      p.downloads.push_back({{r, Buf::recv, 0}, all[r].recv, n * eb});
    }
  }
  set_reduction_amax(p, n, a.op, f);

  const int64_t maxlen = len[0];  // chunk 0 is the longest
  Spread sp;
  sp.te = tile_elems(maxlen, p.elem);
  sp.T = std::max(num_tiles(maxlen, sp.te), 1);
  auto finish = [&](int r, int64_t at, int64_t tile_begin) {
    return spread_targets(p, f, sp, r, at, static_cast<int>(tile_begin / sp.te));
  };

  // Compressed chain (uncompressed, chain is direct's order and runs as direct): every tile's
  // running value passes rank 0, 1, ..., P - 1, encoded into the next rank's stage ('chain'[t]);
  // rank P - 1 finishes it and spreads it as direct's owner does, then every other rank decodes.
  // All ranks share one device, so the last rank encodes straight into every peer's final buffer
  // (the emulator relays it instead, for its one link per device).
  if (a.algo == AllReduceAlgo::chain && P > 1 && f.compressed) {
    const int last = P - 1;
    const int64_t te = tile_elems(n, p.elem), we = static_cast<int64_t>(f.we);
    const int T = std::max(num_tiles(n, te), 1);
    const int chain_slot = b.slots(p.name + ".chain", T);
    const int fin_slot = b.slots(p.name + ".final", T);
    for (int r = 0; r < P; ++r) {
      p.bytes(Buf::stage, r) = n * we;
      p.bytes(Buf::final_wire, r) = n * we;
    }
    for (int r = 0; r < P; ++r)
      for (int t = 0; t < num_tiles(n, te); ++t) {
        const Span s = tile_of(n, te, t);
        std::vector<Source> srcs;
        if (r > 0) srcs.push_back({{r, Buf::stage, s.begin * we}, f.wire, false, s.begin});
        srcs.push_back({{r, Buf::send, s.begin * eb}, Access::raw, f.predivide, s.begin});
        const int wait = r > 0 ? chain_slot + t : -1;
        if (r < last) {
          b.step(r, r, s.length, wait, std::move(srcs),
                 {{{r + 1, Buf::stage, s.begin * we}, f.wire, s.begin, r + 1, chain_slot + t}});
          continue;
        }
        std::vector<Target> dsts;
        for (int q : remote_first(r, P))
          dsts.push_back(q == r ? Target{{r, Buf::recv, s.begin * eb}, f.own, s.begin}
                                : Target{{q, Buf::final_wire, s.begin * we}, Access::wire,
                                         s.begin, q, fin_slot + t});
        b.step(r, r, s.length, wait, std::move(srcs), std::move(dsts), f.divide);
      }
    for (int r = 0; r < last; ++r)
      for (int t = 0; t < num_tiles(n, te); ++t) {
        const Span s = tile_of(n, te, t);
        b.step(r, P, s.length, fin_slot + t,
               {{{r, Buf::final_wire, s.begin * we}, Access::wire, false, s.begin}},
               {{{r, Buf::recv, s.begin * eb}, Access::raw, s.begin}});
      }
    return std::move(p);
  }

  if (!ring) {
    if (f.compressed)
      sp.fin = b.slots(p.name + ".final", P * sp.T);
    else
      sp.landed = b.slots(p.name + ".landed", 1);
    owner_reduce(b, off, len, f, finish);
    if (f.compressed)
      decode_finals(b, off, len, f, sp, 2);
    else
      for (int r = 0; r < P; ++r) b.wait_all(r, 2, sp.landed, tiles_from_others(len, sp.te, r));
    for (int r = 0; r < P; ++r)
      if (f.compressed) p.bytes(Buf::final_wire, r) = n * static_cast<int64_t>(f.we);
    return std::move(p);
  }

  // Ring: level k of rank r works on chunk (r - 1 - k) mod P: the value received from rank r - 1
  // (for k > 0) on the left, its own on the right, sent on to rank r + 1 until k = P - 1, where
  // chunk r is finished.
  if (f.compressed)
    sp.fin = b.slots(p.name + ".final", P * sp.T);
  else
    sp.landed = b.slots(p.name + ".landed", 1);
  const int ring_slot = b.slots(p.name + ".ring", (P - 1) * sp.T);
  for (int r = 0; r < P; ++r)
    p.bytes(Buf::stage, r) = (P - 1) * maxlen * static_cast<int64_t>(f.we);
  for (int r = 0; r < P; ++r) {
    const int next = (r + 1) % P;
    for (int k = 0; k < P; ++k) {
      const int c = ((r - 1 - k) % P + P) % P;
      for (int t = 0; t < num_tiles(len[c], sp.te); ++t) {
        const Span s = tile_of(len[c], sp.te, t);
        const int64_t at = off[c] + s.begin;
        std::vector<Source> srcs;
        if (k > 0)
          srcs.push_back(
              {{r, Buf::stage, ((k - 1) * maxlen + s.begin) * static_cast<int64_t>(f.we)},
               f.wire,
               false,
               at});
        srcs.push_back({{r, Buf::send, at * eb}, Access::raw, f.predivide, at});
        const int wait = k > 0 ? ring_slot + (k - 1) * sp.T + t : -1;
        if (k < P - 1)
          b.step(r, k, s.length, wait, std::move(srcs),
                 {{{next, Buf::stage, (k * maxlen + s.begin) * static_cast<int64_t>(f.we)},
                   f.wire,
                   at,
                   next,
                   ring_slot + k * sp.T + t}});
        else
          b.step(r, k, s.length, wait, std::move(srcs), finish(r, at, s.begin), f.divide);
      }
    }
  }
  if (f.compressed)
    decode_finals(b, off, len, f, sp, P);
  else
    for (int r = 0; r < P; ++r) b.wait_all(r, P, sp.landed, tiles_from_others(len, sp.te, r));
  for (int r = 0; r < P; ++r)
    if (f.compressed) p.bytes(Buf::final_wire, r) = n * static_cast<int64_t>(f.we);
  return std::move(p);
}

Plan plan_reduce_scatter(std::span<const ReduceScatterArgs> all) {
  const ReduceScatterArgs& a = all[0];
  const int P = static_cast<int>(all.size());
  Builder b("reduce_scatter", P, a.dtype);
  Plan& p = b.plan();
  p.reduce = a.op;
  p.wire = a.wire;
  const Fold f = fold_of(a.wire, a.op, p.elem);
  const int64_t eb = static_cast<int64_t>(p.elem);
  std::vector<int64_t> off(P), len(a.recv_counts.begin(), a.recv_counts.end());
  int64_t total = 0;
  for (int q = 0; q < P; ++q) {
    off[q] = total;
    total += len[q];
  }
  for (int r = 0; r < P; ++r) {
    p.bytes(Buf::send, r) = total * eb;
    p.bytes(Buf::recv, r) = len[r] * eb;
    if (total > 0) p.uploads.push_back({{r, Buf::send, 0}, all[r].send, total * eb});
    if (len[r] > 0) p.downloads.push_back({{r, Buf::recv, 0}, all[r].recv, len[r] * eb});
  }
  set_reduction_amax(p, total, a.op, f);
  // The owner's result stays with it: nothing crosses the wire after the fold, no final encode.
  owner_reduce(b, off, len, f, [&](int r, int64_t at, int64_t) {
    return std::vector<Target>{{{r, Buf::recv, (at - off[r]) * eb}, Access::raw, at}};
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
  std::vector<int64_t> off(P), len(a.recv_counts.begin(), a.recv_counts.end());
  int64_t total = 0;
  for (int q = 0; q < P; ++q) {
    off[q] = total;
    total += len[q];
  }
  const int64_t maxlen = *std::max_element(len.begin(), len.end());
  const int64_t te = tile_elems(maxlen, p.elem);
  const int T = std::max(num_tiles(maxlen, te), 1);
  std::vector<AmaxRun> runs;
  for (int r = 0; r < P; ++r) {
    p.bytes(Buf::send, r) = len[r] * eb;
    p.bytes(Buf::recv, r) = total * eb;
    if (compressed) p.bytes(Buf::stage, r) = total * we;
    if (len[r] > 0) p.uploads.push_back({{r, Buf::send, 0}, all[r].send, len[r] * eb});
    if (total > 0) p.downloads.push_back({{r, Buf::recv, 0}, all[r].recv, total * eb});
    runs.push_back({r, 0, len[r], 0});
  }
  set_moved_amax(p, maxlen, runs);
  const int landed = compressed ? -1 : b.slots("all_gather.landed", 1);
  const int fin = compressed ? b.slots("all_gather.arrived", P * T) : -1;
  for (int r = 0; r < P; ++r)
    for (int t = 0; t < num_tiles(len[r], te); ++t) {
      const Span s = tile_of(len[r], te, t);
      std::vector<Target> dsts;
      for (int q : remote_first(r, P)) {
        const int64_t at = off[r] + s.begin;
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
  for (int q = 0; q < P; ++q) {
    if (!compressed) {
      b.wait_all(q, 1, landed, tiles_from_others(len, te, q));
      continue;
    }
    for (int r : remote_first(q, P)) {
      if (r == q) continue;
      for (int t = 0; t < num_tiles(len[r], te); ++t) {
        const Span s = tile_of(len[r], te, t);
        const int64_t at = off[r] + s.begin;
        b.step(q, 1, s.length, fin + r * T + t,
               {{{q, Buf::stage, at * we}, Access::wire, false, s.begin}},
               {{{q, Buf::recv, at * eb}, Access::raw, s.begin}});
      }
    }
  }
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
  // Device buffers are packed: rank r's send by destination, rank q's recv by source.
  std::vector<std::vector<int64_t>> sofs(P, std::vector<int64_t>(P)),
      rofs(P, std::vector<int64_t>(P));
  int64_t maxlen = 0;
  for (int r = 0; r < P; ++r) {
    int64_t s = 0, d = 0;
    for (int q = 0; q < P; ++q) {
      sofs[r][q] = s;
      s += all[r].send_counts[q];
      rofs[r][q] = d;
      d += all[r].recv_counts[q];
      maxlen = std::max(maxlen, all[r].send_counts[q]);
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
            {{r, Buf::recv, rofs[r][q] * eb}, rb + all[r].recv_displs[q] * eb, rc * eb});
      runs.push_back({r, sofs[r][q] * eb, sc, 0});
    }
  set_moved_amax(p, maxlen, runs);
  const int64_t te = tile_elems(maxlen, p.elem);
  const int T = std::max(num_tiles(maxlen, te), 1);
  const int landed = compressed ? -1 : b.slots("all_to_allv.landed", 1);
  const int fin = compressed ? b.slots("all_to_allv.arrived", P * T) : -1;
  std::vector<std::uint64_t> incoming(P, 0);
  for (int r = 0; r < P; ++r)
    for (int q : remote_first(r, P)) {
      const int64_t n = all[r].send_counts[q];
      for (int t = 0; t < num_tiles(n, te); ++t) {
        const Span s = tile_of(n, te, t);
        const int64_t at = rofs[q][r] + s.begin;
        Target d;
        if (q == r)
          d = {{r, Buf::recv, at * eb}, compressed ? Access::round_trip : Access::raw, s.begin};
        else if (compressed)
          d = {{q, Buf::stage, at * we}, Access::wire, s.begin, q, fin + r * T + t};
        else
          d = {{q, Buf::recv, at * eb}, Access::raw, s.begin, q, landed};
        if (q != r) ++incoming[q];
        b.step(r, 0, s.length, -1,
               {{{r, Buf::send, (sofs[r][q] + s.begin) * eb}, Access::raw, false, s.begin}}, {d});
      }
    }
  for (int q = 0; q < P; ++q) {
    if (!compressed) {
      b.wait_all(q, 1, landed, incoming[q]);
      continue;
    }
    for (int r : remote_first(q, P)) {
      if (r == q) continue;
      const int64_t n = all[q].recv_counts[r];
      for (int t = 0; t < num_tiles(n, te); ++t) {
        const Span s = tile_of(n, te, t);
        const int64_t at = rofs[q][r] + s.begin;
        b.step(q, 1, s.length, fin + r * T + t,
               {{{q, Buf::stage, at * we}, Access::wire, false, s.begin}},
               {{{q, Buf::recv, at * eb}, Access::raw, s.begin}});
      }
    }
  }
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
  const int64_t te = tile_elems(n, p.elem);
  const int T = num_tiles(n, te);
  const int landed = b.slots("broadcast.landed", 1);
  for (int t = 0; t < T; ++t) {
    const Span s = tile_of(n, te, t);
    std::vector<Target> dsts;
    for (int q : remote_first(root, P))
      dsts.push_back({{q, Buf::recv, s.begin * eb},
                      Access::raw,
                      0,
                      q == root ? -1 : q,
                      q == root ? -1 : landed});
    b.step(root, 0, s.length, -1, {{{root, Buf::send, s.begin * eb}, Access::raw, false, 0}},
           std::move(dsts));
  }
  for (int q = 0; q < P; ++q)
    if (q != root) b.wait_all(q, 1, landed, static_cast<std::uint64_t>(T));
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
