// The collectives' plan (detail/collective_plan.hpp): the schedules every backend and the
// simulator run, built from the agreed arguments alone.

#include "fusedcoll/detail/collective_plan.hpp"

#include <utility>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/compression.hpp"
#include "fusedcoll/detail/wire.hpp"

namespace fusedcoll::detail::collective {

Parts Parts::chunks(std::int64_t count, int P) {
  Parts p;
  for (int q = 0; q < P; ++q) {
    const Chunk c = chunk_of(count, P, q);
    p.off.push_back(c.offset);
    p.len.push_back(c.length);
    p.max_len = std::max(p.max_len, c.length);
  }
  p.total = count;
  return p;
}

Parts Parts::counts(const std::vector<std::int64_t>& counts) {
  Parts p;
  for (std::int64_t n : counts) {
    p.off.push_back(p.total);
    p.len.push_back(n);
    p.max_len = std::max(p.max_len, n);
    p.total += n;
  }
  return p;
}

WireFold WireFold::of(const CompressionOptions& wire, ReduceOp op, std::size_t dtype_elem) {
  WireFold f;
  f.compressed = wire.format != WireFormat::none;
  f.predivide = f.compressed && op == ReduceOp::avg && wire.predivide;
  f.divide = f.compressed ? divides_after(op, wire) : op == ReduceOp::avg;
  f.elem = f.compressed ? wire_size(wire.format) : dtype_elem;
  return f;
}

OwnerPlan::OwnerPlan(Parts parts_in, int me_in, int P_in, const Tiling& tiling,
                     std::size_t tile_elem, bool gather_in)
    : parts(std::move(parts_in)),
      P(P_in),
      me(me_in),
      gather(gather_in),
      order(remote_first(me_in, P_in)) {
  if (parts.max_len == 0) return;  // nothing moves; every rank agrees
  te = tiling.elems(parts.max_len, tile_elem);
  tiles = num_tiles(parts.max_len, te);
  for (int q : order)
    for (int t = 0; t < num_tiles(parts.len[q], te); ++t) {
      if (q != me) scatter.push_back({q, t});
      if (q != me && gather) collect.push_back({q, t});
    }
  for (int t = 0; t < num_tiles(parts.len[me], te); ++t) reduce.push_back({me, t});
}

std::vector<int> OwnerPlan::part_peers() const {
  std::vector<int> peers;
  if (!reduce.empty())
    for (int q : order)
      if (q != me) peers.push_back(q);
  return peers;
}

RingPlan::RingPlan(std::int64_t count, int me_in, int P_in, const Tiling& tiling,
                   std::size_t tile_elem)
    : parts(Parts::chunks(count, P_in)),
      P(P_in),
      me(me_in),
      next((me_in + 1) % P_in),
      prev(mod(me_in - 1, P_in)),
      steps(P_in - 1) {
  te = tiling.elems(parts.max_len, tile_elem);
  tiles = num_tiles(parts.max_len, te);
}

ChainPlan::ChainPlan(std::int64_t count_in, int me_in, int P_in, const Tiling& tiling,
                     std::size_t tile_elem, Return ret)
    : count(count_in),
      P(P_in),
      me(me_in),
      prev(me_in > 0 ? me_in - 1 : -1),
      next(me_in + 1 < P_in ? me_in + 1 : -1),
      te(tiling.elems(count_in, tile_elem)),
      tiles(num_tiles(count_in, te)) {
  if (ret == Return::relay) {
    if (!last()) result_from = next;
    if (!first()) result_to.push_back(prev);
    return;
  }
  if (!last()) {
    result_from = P - 1;
    return;
  }
  for (int q : remote_first(me, P))
    if (q != me) result_to.push_back(q);
}

Topology::Topology(const std::vector<int>& host_of) {
  const int P = static_cast<int>(host_of.size());
  for (int r = 0; r < P; ++r) {
    const int h = host_of[static_cast<std::size_t>(r)];
    if (static_cast<int>(ranks.size()) <= h) ranks.resize(static_cast<std::size_t>(h) + 1);
    ranks[h].push_back(r);
    if (r == 0 || host_of[r - 1] != h) {
      seg_first.push_back(r);
      seg_last.push_back(r);
      seg_host.push_back(h);
    }
    seg_last.back() = r;
    seg_of.push_back(static_cast<int>(seg_first.size()) - 1);
  }
  for (const auto& on : ranks) max_local = std::max(max_local, static_cast<int>(on.size()));
}

bool Topology::chain_moves_less() const {
  const int P = static_cast<int>(seg_of.size()), H = hosts(), S = segments();
  if (H < 2) return false;
  long chain = 0, flat = 0;
  for (int h = 0; h < H; ++h) {
    long out = 0;
    for (int s = 0; s + 1 < S; ++s) out += seg_host[s] == h;
    if (seg_host[S - 1] == h) out += H - 1;
    const long L = static_cast<long>(ranks[h].size());
    chain = std::max(chain, out * P);
    flat = std::max(flat, 2 * L * (P - L));
  }
  return chain < flat;
}

SegmentChain::SegmentChain(const Topology& t, int me_in, std::int64_t count_in,
                           std::size_t value_size, std::size_t wire_size)
    : topo(&t),
      me(me_in),
      count(count_in),
      seg(t.seg_of[me_in]),
      first(t.seg_first[seg]),
      L(t.seg_last[seg] - first + 1),
      host(t.seg_host[seg]),
      producer_host(t.seg_host[t.segments() - 1]) {
  const auto total = count * static_cast<std::int64_t>(std::max(value_size, wire_size));
  pieces = static_cast<int>(std::min<std::int64_t>(
      count, std::max({std::int64_t{t.max_local}, ceil_div(total, kPieceBytes),
                       std::min(kMinPieces, ceil_div(total, kMinPieceBytes))})));
}

std::vector<SegmentChain::Step> SegmentChain::steps() const {
  std::vector<Step> out;
  auto give = [&](int j) {
    if (carrier(seg, j) != me) out.push_back({Op::give, j});
  };
  if (pieces > 0) give(0);
  for (int j = 0; j < pieces + kLag; ++j) {
    if (j + 1 < pieces) give(j + 1);
    if (j < pieces && carrier(seg, j) == me) out.push_back({Op::carry, j});
    if (j >= kLag && producer(j - kLag) != me) out.push_back({Op::finish, j - kLag});
  }
  return out;
}

ExchangePlan ExchangePlan::all_gather(const AllGatherArgs& mine, int me, int P) {
  ExchangePlan ex;
  ex.P = P;
  ex.me = me;
  ex.order = remote_first(me, P);
  std::vector<std::int64_t> off(static_cast<std::size_t>(P) + 1, 0);
  for (int p = 0; p < P; ++p) {
    off[p + 1] = off[p] + mine.recv_counts[p];
    ex.longest_ = std::max(ex.longest_, mine.recv_counts[p]);
  }
  ex.inbox = off[P];
  ex.send_len.assign(static_cast<std::size_t>(P), mine.recv_counts[me]);
  ex.send_at.assign(static_cast<std::size_t>(P), 0);
  ex.put_at.assign(static_cast<std::size_t>(P), off[me]);
  ex.recv_len = mine.recv_counts;
  ex.recv_at.assign(off.begin(), off.end() - 1);
  ex.box_at = ex.recv_at;
  return ex;
}

void ExchangePlan::tile(const Tiling& t, std::size_t elem, bool uniform) {
  tiling = t;
  tile_elem = elem;
  uniform_te = uniform ? tiling.elems(longest_, elem) : 0;
  sends.clear();
  receives.clear();
  for (int q : order)
    for (int k = 0; k < num_tiles(send_len[q], te(send_len[q])); ++k) sends.push_back({q, k});
  for (int p : order) {
    if (p == me) continue;
    for (int k = 0; k < num_tiles(recv_len[p], te(recv_len[p])); ++k) receives.push_back({p, k});
  }
}

BroadcastPlan::BroadcastPlan(std::int64_t count_in, int root_in, int me, int P,
                             const Tiling& tiling, std::size_t elem)
    : count(count_in),
      root(root_in),
      te(tiling.elems(count_in, elem)),
      tiles(num_tiles(count_in, te)),
      order(remote_first(root_in, P)) {
  if (me == root) {
    for (int q : order)
      for (int t = 0; t < tiles; ++t) items.push_back({q, t});
  } else {
    for (int t = 0; t < tiles; ++t) items.push_back({root, t});
  }
}

}  // namespace fusedcoll::detail::collective
