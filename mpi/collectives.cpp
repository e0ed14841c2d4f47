// fusedcoll's collectives on MPI one-sided communication, in the orders docs/semantics.md pins
// (so every rank's result is ref/'s, bit for bit). Each runs the shared plan of its collective
// (detail/collective_plan.hpp: owner parts, ring steps, chain of host segments, exchanges, peer
// orders) with every segment one tile (Tiling::segments): a segment is one put into a peer's
// window and one signal on the slot of its source, and what arrives is folded or copied out in
// pieces spread over the workgroups. The entry rendezvous (`enter`) guarantees that no rank puts
// into a region a peer is still reading from the previous call.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/env.hpp"
#include "mpi/ops.hpp"

namespace fusedcoll::mpi {
namespace {

using detail::collective::BroadcastPlan;
using detail::collective::ExchangePlan;
using detail::collective::OwnerPlan;
using detail::collective::Parts;
using detail::collective::RingPlan;
using detail::collective::SegmentChain;
using detail::collective::Tiling;

const char* at(const void* p, std::int64_t elems, std::size_t es) {
  return static_cast<const char*>(p) + static_cast<std::size_t>(elems) * es;
}
char* at(void* p, std::int64_t elems, std::size_t es) {
  return static_cast<char*>(p) + static_cast<std::size_t>(elems) * es;
}
std::size_t nbytes(std::int64_t elems, std::size_t es) {
  return static_cast<std::size_t>(elems) * es;
}

/// `acc = acc op right` element-wise, in place (the received running value of a ring step is
/// `acc`, the left operand), then the average's division when `last`. In place, as the emulator's
/// ring folds: an out-of-place `dst = left op right` (a copy, then reduce_into) made the 2-rank
/// fold at 64 MiB 5.4-5.8 ms against the one reduce pass's 2.7 (docs/results/virtual-time.md).
void combine(Runtime& rt, void* acc, const void* right, std::int64_t count, const AllReduceArgs& a,
             bool last) {
  const std::size_t es = dtype_size(a.dtype);
  const std::int64_t pieces = ceil_div(count, kFoldPiece);
  const int grid = rt.grid_for_bytes(2 * nbytes(count, es), static_cast<std::size_t>(pieces));
  rt.launch(grid, [&](int w) {
    for (std::int64_t i = w; i < pieces; i += grid) {
      const std::int64_t o = i * kFoldPiece, n = std::min(kFoldPiece, count - o);
      detail::reduce_into(at(acc, o, es), at(right, o, es), n, a.dtype, a.op);
      if (last && a.op == ReduceOp::avg)
        detail::finish_average(at(acc, o, es), n, a.dtype, rt.size());
    }
  });
}

/// The all-gather phase of AllReduce (the owner plan's gather): this rank's finished chunk
/// already sits at its offset in the gather area (at `gather_at`); give it to everyone, collect
/// everyone's, copy it into `recv`. A peer whose `recv` is a SymmetricBuffer (`land`) gets the
/// chunk put straight into place, and then copies only its own chunk. In place that is safe: a
/// peer's send chunk c has been read (put to its owner, or folded in the ring) before owner c can
/// finish chunk c.
void gather_chunks(Runtime& rt, std::size_t gather_at, const AllReduceArgs& a,
                   const std::vector<Landing>& land, const OwnerPlan& pl) {
  const int me = rt.rank();
  const std::size_t es = dtype_size(a.dtype);
  const std::size_t at_mine = nbytes(pl.parts.off[me], es), bytes = nbytes(pl.parts.len[me], es);
  const int out = rt.slots("all_reduce.out", rt.size());
  const char* fin = rt.data() + gather_at + at_mine;
  const std::vector<int> to = pl.part_peers();
  put_each(rt, bytes * to.size(), out, to, [&](int q) {
    if (land[q].id < 0) {
      rt.put(q, gather_at + at_mine, fin, bytes);
      return;
    }
    rt.put_buffer(land[q].id, q, static_cast<std::size_t>(land[q].offset) + at_mine, fin, bytes);
    rt.flush_buffer(land[q].id, q);
  }, Runtime::Sources::kept);  // the finished chunk stays as it is until the call ends
  wait_from(rt, out, peers_of(pl.collect, me), "all_reduce.out");
  const Runtime::Span span(rt, "copy out");
  if (land[me].id >= 0)
    copy_bytes(at(a.recv, pl.parts.off[me], es), fin, bytes);
  else
    copy_bytes(a.recv, rt.data() + gather_at, nbytes(a.count, es));
}

/// The owner plan of an AllReduce on this backend: whole chunks, one put each.
OwnerPlan all_reduce_owners(const Runtime& rt, std::int64_t count, std::size_t es) {
  return OwnerPlan(Parts::chunks(count, rt.size()), rt.rank(), rt.size(), Tiling::segments(), es,
                   /*gather=*/true);
}

void all_reduce_direct(Runtime& rt, const AllReduceArgs& a, const std::vector<Landing>& land) {
  const int me = rt.rank();
  const std::size_t es = dtype_size(a.dtype);
  const OwnerPlan pl = all_reduce_owners(rt, a.count, es);
  // [ the plan's inbox | gather: count ]
  const std::size_t inbox_at = 0, gather_at = nbytes(pl.inbox_elems(), es);
  rt.reserve(gather_at + nbytes(a.count, es));
  const int in = rt.slots("all_reduce.in", rt.size());
  // Reduce-scatter: chunk c of our send buffer goes to owner c's inbox, row me.
  // `send` stays as it is until owner c has the chunk: in place, recv (the same memory) is only
  // written once the owners' gathered chunks arrive, each after its owner took this rank's.
  put_each(rt, nbytes(a.count, es), in, peers_of(pl.scatter, me), [&](int c) {
    rt.put(c, inbox_at + nbytes(pl.inbox_at(me), es), at(a.send, pl.parts.off[c], es),
           nbytes(pl.parts.len[c], es));
  }, Runtime::Sources::kept);
  wait_from(rt, in, pl.part_peers(), "all_reduce.in");
  {
    const Runtime::Span span(rt, "fold");
    fold_rank_order(rt, rt.data() + gather_at + nbytes(pl.parts.off[me], es), pl.parts.len[me],
                    a.dtype, a.op, [&](int p) -> const void* {
                      return p == me ? at(a.send, pl.parts.off[me], es)
                                     : rt.data() + inbox_at + nbytes(pl.inbox_at(p), es);
                    });
  }
  gather_chunks(rt, gather_at, a, land, pl);
}

void all_reduce_ring(Runtime& rt, const AllReduceArgs& a, const std::vector<Landing>& land) {
  const int P = rt.size(), me = rt.rank();
  const std::size_t es = dtype_size(a.dtype);
  const RingPlan ring(a.count, me, P, Tiling::segments(), es);
  const Parts& parts = ring.parts;
  // One mailbox per step (the plan's regions), so a fast predecessor never overwrites a chunk not
  // yet folded; the last step's mailbox is this rank's own chunk in the gather area, where its
  // fold finishes it. Every step folds in place (`combine`) and the running value leaves from
  // its mailbox.
  // [ mailboxes of steps 0 .. P - 3 | gather: count ]
  const std::size_t gather_at = nbytes(ring.region_at(P - 2), es);
  rt.reserve(gather_at + nbytes(a.count, es));
  const int step = rt.slots("all_reduce.ring", P - 1);
  // Where step s's running value (chunk c) lands, in any rank's window.
  auto mailbox = [&](int s, int c) {
    return s + 1 < ring.steps ? nbytes(ring.region_at(s), es)
                              : gather_at + nbytes(parts.off[c], es);
  };
  // Step 0 sends our own value of send_chunk(0); step s > 0 the running value folded at s - 1.
  {
    const int c = ring.send_chunk(0);
    rt.put(ring.next, mailbox(0, c), at(a.send, parts.off[c], es), nbytes(parts.len[c], es));
    rt.signal(ring.next, step + 0);
  }
  for (int s = 0; s < ring.steps; ++s) {
    const int c = ring.recv_chunk(s);
    rt.wait(step + s, rt.expect(step + s, 1),
            detail::make_string("all_reduce.ring step ", s, " from rank ", ring.prev));
    char* const acc = rt.data() + mailbox(s, c);
    // The received running value is the left operand (semantics.md, ring).
    {
      const Runtime::Span span(rt, "fold");
      combine(rt, acc, at(a.send, parts.off[c], es), parts.len[c], a, s + 1 == ring.steps);
    }
    if (s + 1 < ring.steps) {
      rt.put(ring.next, mailbox(s + 1, c), acc, nbytes(parts.len[c], es));
      rt.signal(ring.next, step + s + 1);
    }
  }
  gather_chunks(rt, gather_at, a, land, all_reduce_owners(rt, a.count, es));
}

/// The plain fold of the chain: acc = v_0; acc = acc op v_1; ...; acc = acc op v_{P-1}, exactly
/// as `direct` folds every element.
void all_reduce_chain(Runtime& rt, const AllReduceArgs& a, const Topology& t) {
  const std::size_t es = dtype_size(a.dtype);
  ChainFold f;
  f.value_size = f.wire_size = es;
  f.own = a.send;
  f.carry = [&](const Chunk& p, const char* in, const std::function<const char*(int)>& value,
                int first, int end, bool last, char* out) {
    const std::int64_t n = p.length;
    copy_bytes(out, in != nullptr ? in : value(first), nbytes(n, es));
    for (int m = in != nullptr ? first : first + 1; m < end; ++m)
      detail::reduce_into(out, value(m), n, a.dtype, a.op);
    if (!last) return;
    if (a.op == ReduceOp::avg) detail::finish_average(out, n, a.dtype, rt.size());
    copy_bytes(at(a.recv, p.offset, es), out, nbytes(n, es));
  };
  f.deliver = [&](const Chunk& p, const char* fin) {
    copy_bytes(at(a.recv, p.offset, es), fin, nbytes(p.length, es));
  };
  run_chain(rt, t, a.count, f, "all_reduce.chain");
}

}  // namespace

Topology topology(const Runtime& rt) { return Topology(rt.host_of()); }

/// The chain of host segments (detail/collective_plan.hpp, SegmentChain) on this backend's window
/// and slots: `f.carry` folds a piece at its carrier, `f.deliver` hands a finished piece to a rank.
void run_chain(Runtime& rt, const Topology& t, std::int64_t count, const ChainFold& f,
               const std::string& key) {
  const int me = rt.rank();
  const std::size_t ve = f.value_size, we = f.wire_size;
  const SegmentChain ch(t, me, count, ve, we);
  // Window: [ running values in: count | finished: count | segment mates' values: rows ]
  const std::size_t acc_at = 0, fin_at = nbytes(count, we), row_at = 2 * fin_at;
  rt.reserve(row_at + nbytes(count * ch.rows(), ve));
  const int local = rt.slots(key + ".local", rt.size());
  const int run = rt.slots(key + ".acc", rt.size());
  const int done = rt.slots(key + ".out", rt.size());
  auto fin = [&](const Chunk& p) { return rt.data() + fin_at + nbytes(p.offset, we); };
  auto put_finished = [&](int q, const Chunk& p) {
    rt.put(q, fin_at + nbytes(p.offset, we), fin(p), nbytes(p.length, we));
    rt.signal(q, done + me);
  };
  auto give_value = [&](int j) {
    const int c = ch.carrier(ch.seg, j);
    const Chunk p = ch.piece(j);
    rt.put(c, row_at + nbytes(ch.row(me, c) * count + p.offset, ve), at(f.own, p.offset, ve),
           nbytes(p.length, ve));
    rt.signal(c, local + me);
  };
  auto carry = [&](int j) {
    const Chunk p = ch.piece(j);
    if (ch.seg > 0) {
      const int from = ch.carrier(ch.seg - 1, j);
      rt.wait(run + from, rt.expect(run + from, 1),
              detail::make_string(key, " piece ", j, " acc[", from, "]"));
    }
    for (int m = ch.first; m < ch.first + ch.L; ++m)
      if (m != me)
        rt.wait(local + m, rt.expect(local + m, 1),
                detail::make_string(key, " piece ", j, " local[", m, "]"));
    const std::function<const char*(int)> value = [&](int m) -> const char* {
      return m == me ? at(f.own, p.offset, ve)
                     : rt.data() + row_at + nbytes(ch.row(m, me) * count + p.offset, ve);
    };
    // The running value goes out of, and the finished piece sits in, this rank's finished area
    // at the piece's place: the finished piece arrives there only after the running value has
    // been sent on (and the signal's flush has completed that put).
    const char* in = ch.seg > 0 ? rt.data() + acc_at + nbytes(p.offset, we) : nullptr;
    f.carry(p, in, value, ch.first, ch.first + ch.L, ch.last_segment(), fin(p));
    if (!ch.last_segment()) {
      const int next = ch.carrier(ch.seg + 1, j);
      rt.put(next, acc_at + nbytes(p.offset, we), fin(p), nbytes(p.length, we));
      rt.signal(next, run + me);
      return;
    }
    for (int q : t.ranks[ch.host])
      if (q != me) put_finished(q, p);
    for (int h = 0; h < t.hosts(); ++h)
      if (h != ch.host) put_finished(t.relay(h, j), p);
  };
  auto finish = [&](int j) {
    const Chunk p = ch.piece(j);
    const bool relaying = ch.host != ch.producer_host && t.relay(ch.host, j) == me;
    const int from = ch.host == ch.producer_host || relaying ? ch.producer(j) : t.relay(ch.host, j);
    rt.wait(done + from, rt.expect(done + from, 1),
            detail::make_string(key, " piece ", j, " out[", from, "]"));
    if (relaying)
      for (int q : t.ranks[ch.host])
        if (q != me) put_finished(q, p);
    f.deliver(p, fin(p));
  };
  // In place, recv[j] is written only once piece j is finished, i.e. after every rank's value of
  // j has been folded (and so received).
  for (const SegmentChain::Step& s : ch.steps()) {
    if (s.op == SegmentChain::Op::give) give_value(s.piece);
    if (s.op == SegmentChain::Op::carry) carry(s.piece);
    if (s.op == SegmentChain::Op::finish) finish(s.piece);
  }
}

bool chain_all_reduce(const Runtime& rt, const Topology& t) {
  (void)rt;
  const auto mode = env().mpi_hierarchy;
  if (mode != Env::MpiHierarchy::automatic) return mode == Env::MpiHierarchy::on;
  return t.chain_moves_less();
}

bool relay_results(const Runtime& rt, const Topology& t) {
  const auto mode = env().mpi_hierarchy;
  if (mode != Env::MpiHierarchy::automatic) return mode == Env::MpiHierarchy::on;
  (void)rt;
  return t.hosts() > 1 && t.max_local > 1;
}

void put_to(Runtime& rt, const std::vector<int>& peers, std::size_t offset, const void* src,
            std::size_t bytes, int slot, Runtime::Sources sources) {
  put_each(
      rt, bytes * peers.size(), slot, peers, [&](int q) { rt.put(q, offset, src, bytes); },
      sources);
}

void wait_from(Runtime& rt, int slot, const std::vector<int>& peers, const char* what) {
  for (int p : peers)
    rt.wait(slot + p, rt.expect(slot + p, 1), detail::make_string(what, "[", p, "]"));
}

std::vector<int> peers_of(const std::vector<detail::collective::Item>& items, int me) {
  std::vector<int> peers;
  for (const auto& it : items)
    if (it.peer != me && (peers.empty() || peers.back() != it.peer)) peers.push_back(it.peer);
  return peers;
}

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> off(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

void fold_rank_order(Runtime& rt, void* acc, std::int64_t count, DType dtype, ReduceOp op,
                     const std::function<const void*(int)>& v) {
  const std::size_t es = dtype_size(dtype);
  const int P = rt.size();
  const std::int64_t pieces = ceil_div(count, kFoldPiece);
  const int grid = rt.grid_for_bytes(nbytes(count, es) * static_cast<std::size_t>(P),
                                     static_cast<std::size_t>(pieces));
  rt.launch(grid, [&](int w) {
    for (std::int64_t i = w; i < pieces; i += grid) {
      const std::int64_t o = i * kFoldPiece, n = std::min(kFoldPiece, count - o);
      copy_bytes(at(acc, o, es), at(v(0), o, es), nbytes(n, es));
      for (int p = 1; p < P; ++p)
        detail::reduce_into(at(acc, o, es), at(v(p), o, es), n, dtype, op);
      if (op == ReduceOp::avg) detail::finish_average(at(acc, o, es), n, dtype, P);
    }
  });
}

void all_reduce(Runtime& rt, const AllReduceArgs& args) {
  const std::string name = std::string("all_reduce ") + to_string(args.algo);
  // A receive buffer in a SymmetricBuffer gets the finished chunks put straight into place.
  std::vector<Landing> land;
  enter(rt, name, args, &land, [&] {
    return args.wire.format == WireFormat::none
               ? Region{args.recv, nbytes(args.count, dtype_size(args.dtype)), {}, true}
               : Region{};
  });
  if (args.wire.format != WireFormat::none) {
    all_reduce_wire(rt, args);
    return;
  }
  const std::size_t es = dtype_size(args.dtype);
  if (args.count == 0) return;
  if (rt.size() == 1) {
    if (args.recv != args.send) copy_bytes(args.recv, args.send, nbytes(args.count, es));
    if (args.op == ReduceOp::avg) detail::finish_average(args.recv, args.count, args.dtype, 1);
    return;
  }
  if (args.algo == AllReduceAlgo::ring) {
    all_reduce_ring(rt, args, land);
    return;
  }
  const Topology t = topology(rt);
  if (chain_all_reduce(rt, t))
    all_reduce_chain(rt, args, t);
  else
    all_reduce_direct(rt, args, land);
}

void reduce_scatter(Runtime& rt, const ReduceScatterArgs& args) {
  enter(rt, "reduce_scatter", args);
  if (args.wire.format != WireFormat::none) {
    reduce_scatter_wire(rt, args);
    return;
  }
  const int P = rt.size(), me = rt.rank();
  const std::size_t es = dtype_size(args.dtype);
  const OwnerPlan pl(Parts::counts(args.recv_counts), me, P, Tiling::segments(), es,
                     /*gather=*/false);
  const auto& off = pl.parts.off;
  rt.reserve(nbytes(pl.inbox_elems(), es));
  const int in = rt.slots("reduce_scatter.in", P);
  // Part q of our send buffer goes to rank q's inbox, row me.
  put_each(rt, nbytes(pl.parts.total, es), in, peers_of(pl.scatter, me), [&](int q) {
    rt.put(q, nbytes(pl.inbox_at(me), es), at(args.send, off[q], es),
           nbytes(args.recv_counts[q], es));
  });
  wait_from(rt, in, pl.part_peers(), "reduce_scatter.in");
  // In place, recv is our own chunk of send, still an operand: fold into a temporary.
  std::vector<char> acc(nbytes(args.recv_counts[me], es));
  fold_rank_order(rt, acc.data(), args.recv_counts[me], args.dtype, args.op,
                  [&](int p) -> const void* {
                    return p == me ? at(args.send, off[me], es)
                                   : rt.data() + nbytes(pl.inbox_at(p), es);
                  });
  copy_bytes(args.recv, acc.data(), acc.size());
}

void all_gather(Runtime& rt, const AllGatherArgs& args) {
  enter(rt, "all_gather", args);
  if (args.wire.format != WireFormat::none) {
    all_gather_wire(rt, args);
    return;
  }
  const int P = rt.size(), me = rt.rank();
  const std::size_t es = dtype_size(args.dtype);
  ExchangePlan ex = ExchangePlan::all_gather(args, me, P);
  ex.tile(Tiling::segments(), es);
  const auto& off = ex.recv_at;
  rt.reserve(nbytes(ex.inbox, es));
  const int slot = rt.slots("all_gather", P);
  put_to(rt, peers_of(ex.sends, me), nbytes(ex.put_at[me], es), args.send,
         nbytes(ex.send_len[me], es), slot);
  wait_from(rt, slot, peers_of(ex.receives, me), "all_gather");
  for (int p = 0; p < P; ++p) {
    if (p == me) {
      if (args.send != at(args.recv, off[me], es))
        copy_bytes(at(args.recv, off[me], es), args.send, nbytes(args.recv_counts[me], es));
    } else {
      copy_bytes(at(args.recv, off[p], es), rt.data() + nbytes(ex.box_at[p], es),
                 nbytes(args.recv_counts[p], es));
    }
  }
}

void broadcast(Runtime& rt, const BroadcastArgs& args) {
  enter(rt, "broadcast", args);
  const int P = rt.size(), me = rt.rank();
  const std::size_t bytes = nbytes(args.count, dtype_size(args.dtype));
  const BroadcastPlan pl(args.count, args.root, me, P, Tiling::segments(),
                         dtype_size(args.dtype));
  rt.reserve(bytes);
  const int slot = rt.slots("broadcast", P);
  if (me == args.root) {
    put_to(rt, peers_of(pl.items, me), 0, args.send, bytes, slot);
    if (args.send != args.recv) copy_bytes(args.recv, args.send, bytes);
    return;
  }
  if (pl.items.empty()) return;
  rt.wait(slot + args.root, rt.expect(slot + args.root, 1),
          detail::make_string("broadcast from root ", args.root));
  copy_bytes(args.recv, rt.data(), bytes);
}

namespace {

/// The Region of an All-to-All's receive buffer (layout: the receive displacements); compressed
/// segments need decoding into `recv` anyway.
Region recv_region(const AllToAllvArgs& a) {
  if (a.wire.format != WireFormat::none) return {};
  std::int64_t extent = 0;
  for (std::size_t p = 0; p < a.recv_counts.size(); ++p)
    if (a.recv_counts[p] > 0) extent = std::max(extent, a.recv_displs[p] + a.recv_counts[p]);
  return {a.recv, nbytes(extent, dtype_size(a.dtype)), a.recv_displs, true};
}

}  // namespace

void all_to_allv(Runtime& rt, const AllToAllvArgs& args) {
  std::vector<Landing> land;
  const auto all = enter(rt, "all_to_allv", args, &land, [&] { return recv_region(args); });
  if (args.wire.format != WireFormat::none) {
    all_to_allv_wire(rt, args, all);
    return;
  }
  const int P = rt.size(), me = rt.rank();
  const std::size_t es = dtype_size(args.dtype);
  ExchangePlan ex = ExchangePlan::all_to_allv(
      args, me, P, [&](int q) -> const std::vector<std::int64_t>& { return all[q].recv_counts; });
  ex.tile(Tiling::segments(), es);
  // A rank whose receive buffer is a SymmetricBuffer gets its segments put straight into place
  // (one copy, as MPI_Alltoall makes); the others' arrive in their window and are copied out.
  // Rank q's receive area holds the segments of all sources in rank order (the plan's inbox).
  std::int64_t most = 0;
  for (int q = 0; q < P; ++q)
    if (land[q].id < 0) most = std::max(most, offsets_of(all[q].recv_counts)[P]);
  rt.reserve(nbytes(most, es));
  const int slot = rt.slots("all_to_allv", P);
  std::int64_t sent = 0;
  for (int q = 0; q < P; ++q) sent += args.send_counts[q];
  put_each(rt, nbytes(sent, es), slot, peers_of(ex.sends, me), [&](int q) {
    const void* src = at(args.send, ex.send_at[q], es);
    const std::size_t bytes = nbytes(ex.send_len[q], es);
    if (land[q].id >= 0) {
      rt.put_buffer(land[q].id, q,
                    static_cast<std::size_t>(land[q].offset) + nbytes(land[q].layout[me], es), src,
                    bytes);
      rt.flush_buffer(land[q].id, q);
    } else {
      rt.put(q, nbytes(ex.put_at[q], es), src, bytes);
    }
  });
  copy_bytes(at(args.recv, ex.recv_at[me], es), at(args.send, ex.send_at[me], es),
             nbytes(ex.send_len[me], es));
  // Each segment is copied out as soon as it has landed, in the order the peers send to us (the
  // receives' order reversed: rank me - 1 sends to us first).
  const std::vector<int> from = peers_of(ex.receives, me);
  for (auto p = from.rbegin(); p != from.rend(); ++p) {
    rt.wait(slot + *p, rt.expect(slot + *p, 1), detail::make_string("all_to_allv[", *p, "]"));
    if (land[me].id < 0)
      copy_bytes(at(args.recv, ex.recv_at[*p], es), rt.data() + nbytes(ex.box_at[*p], es),
                 nbytes(ex.recv_len[*p], es));
  }
}

}  // namespace fusedcoll::mpi
