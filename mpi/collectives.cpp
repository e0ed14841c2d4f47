// fusedcoll's collectives on MPI one-sided communication, in the orders docs/semantics.md pins
// (so every rank's result is ref/'s, bit for bit). Every collective puts into the peers' windows
// and signals; receivers copy out of their window once every expected signal has arrived. The
// entry rendezvous (`enter`) guarantees that no rank puts into a region a peer is still reading
// from the previous call.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/env.hpp"
#include "mpi/ops.hpp"

namespace fusedcoll::mpi {
namespace {

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

/// The all-gather phase of AllReduce: this rank's finished chunk already sits at its offset in the
/// gather area (at `gather_at`); give it to everyone, collect everyone's, copy it into `recv`. A
/// peer whose `recv` is a SymmetricBuffer (`land`) gets the chunk put straight into place, and
/// then copies only its own chunk. In place that is safe: a peer's send chunk c has been read
/// (put to its owner, or folded in the ring) before owner c can finish chunk c.
void gather_chunks(Runtime& rt, std::size_t gather_at, const AllReduceArgs& a,
                   const std::vector<Landing>& land) {
  const int P = rt.size(), me = rt.rank();
  const std::size_t es = dtype_size(a.dtype);
  const Chunk mine = chunk_of(a.count, P, me);
  const std::size_t at_mine = nbytes(mine.offset, es), bytes = nbytes(mine.length, es);
  const int out = rt.slots("all_reduce.out", P);
  const char* fin = rt.data() + gather_at + at_mine;
  put_each(rt, bytes * static_cast<std::size_t>(P - 1), out, [&](int q) {
    if (land[q].id < 0) {
      rt.put(q, gather_at + at_mine, fin, bytes);
      return;
    }
    rt.put_buffer(land[q].id, q, static_cast<std::size_t>(land[q].offset) + at_mine, fin, bytes);
    rt.flush_buffer(land[q].id, q);
  });
  wait_all_peers(rt, out, "all_reduce.out");
  const Runtime::Span span(rt, "copy out");
  if (land[me].id >= 0)
    copy_bytes(at(a.recv, mine.offset, es), fin, bytes);
  else
    copy_bytes(a.recv, rt.data() + gather_at, nbytes(a.count, es));
}

void all_reduce_direct(Runtime& rt, const AllReduceArgs& a, const std::vector<Landing>& land) {
  const int P = rt.size(), me = rt.rank();
  const std::size_t es = dtype_size(a.dtype);
  const std::int64_t maxc = chunk_of(a.count, P, 0).length;
  const std::size_t inbox_at = 0, gather_at = nbytes(maxc * P, es);
  rt.reserve(gather_at + nbytes(a.count, es));
  const int in = rt.slots("all_reduce.in", P);
  // Reduce-scatter: chunk c of our send buffer goes to owner c's inbox, slot [me].
  put_each(rt, nbytes(a.count, es), in, [&](int c) {
    const Chunk ch = chunk_of(a.count, P, c);
    rt.put(c, inbox_at + nbytes(maxc * me, es), at(a.send, ch.offset, es), nbytes(ch.length, es));
  });
  wait_all_peers(rt, in, "all_reduce.in");
  const Chunk mine = chunk_of(a.count, P, me);
  {
    const Runtime::Span span(rt, "fold");
    fold_rank_order(rt, rt.data() + gather_at + nbytes(mine.offset, es), mine.length, a.dtype,
                    a.op, [&](int p) -> const void* {
                      return p == me ? at(a.send, mine.offset, es)
                                     : rt.data() + inbox_at + nbytes(maxc * p, es);
                    });
  }
  gather_chunks(rt, gather_at, a, land);
}

void all_reduce_ring(Runtime& rt, const AllReduceArgs& a, const std::vector<Landing>& land) {
  const int P = rt.size(), me = rt.rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  const std::size_t es = dtype_size(a.dtype);
  const std::int64_t maxc = chunk_of(a.count, P, 0).length;
  // One mailbox per step, so a fast predecessor never overwrites a chunk not yet folded; the
  // last step's mailbox is this rank's own chunk in the gather area, where its fold finishes it.
  // Every step folds in place (`combine`) and the running value leaves from its mailbox.
  // [ mailboxes of steps 0 .. P - 3: (P - 2) x maxc | gather: count ]
  const std::size_t gather_at = nbytes(maxc * (P - 2), es);
  rt.reserve(gather_at + nbytes(a.count, es));
  const int step = rt.slots("all_reduce.ring", P - 1);
  // Where step s's running value (chunk c) lands, in any rank's window.
  auto mailbox = [&](int s, const Chunk& c) {
    return s + 2 < P ? nbytes(maxc * s, es) : gather_at + nbytes(c.offset, es);
  };
  // Step 0 sends our own chunk (me - 1); step s > 0 sends the running value folded at s - 1.
  {
    const Chunk ch = chunk_of(a.count, P, (me + P - 1) % P);
    rt.put(next, mailbox(0, ch), at(a.send, ch.offset, es), nbytes(ch.length, es));
    rt.signal(next, step + 0);
  }
  for (int s = 0; s + 1 < P; ++s) {
    const int c = ((me - 2 - s) % P + 2 * P) % P;
    const Chunk ch = chunk_of(a.count, P, c);
    rt.wait(step + s, rt.expect(step + s, 1),
            detail::make_string("all_reduce.ring step ", s, " from rank ", prev));
    char* const acc = rt.data() + mailbox(s, ch);
    // The received running value is the left operand (semantics.md, ring).
    {
      const Runtime::Span span(rt, "fold");
      combine(rt, acc, at(a.send, ch.offset, es), ch.length, a, s + 2 == P);
    }
    if (s + 2 < P) {
      rt.put(next, mailbox(s + 1, ch), acc, nbytes(ch.length, es));
      rt.signal(next, step + s + 1);
    }
  }
  gather_chunks(rt, gather_at, a, land);
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

Topology topology(const Runtime& rt) {
  Topology t;
  const auto& host = rt.host_of();
  const int P = rt.size();
  for (int r = 0; r < P; ++r) {
    const int h = host[static_cast<std::size_t>(r)];
    if (static_cast<int>(t.ranks.size()) <= h) t.ranks.resize(static_cast<std::size_t>(h) + 1);
    t.ranks[h].push_back(r);
    if (r == 0 || host[r - 1] != h) {
      t.seg_first.push_back(r);
      t.seg_last.push_back(r);
      t.seg_host.push_back(h);
    }
    t.seg_last.back() = r;
    t.seg_of.push_back(static_cast<int>(t.seg_first.size()) - 1);
  }
  for (const auto& on : t.ranks) t.max_local = std::max(t.max_local, static_cast<int>(on.size()));
  return t;
}

/// The chain of host segments (docs/mpi.md, "Across hosts"). The buffer is cut into pieces; piece
/// j's running value starts at segment 0 and crosses the segments in rank order, each folding in
/// its ranks' values in rank order (`f.carry`), so every element is folded in rank order. In
/// segment k, piece j is carried by rank first + j mod (segment size), to which the segment's
/// other ranks put their values of j. The last segment's carrier (the producer) puts the finished
/// piece to every rank on its host and to one relay rank on every other host, which forwards it
/// to its host's ranks. So each finished piece crosses into a host once, and a running value
/// crosses each segment boundary once: with two hosts in blocks, ~N wire bytes per link direction
/// each way, where the flat schedule sends ~2N. Pieces pipeline: a rank carries piece t, then
/// finishes (receives, relays, delivers) piece t - kLag, so the chain never waits for the way back.
void run_chain(Runtime& rt, const Topology& t, std::int64_t count, const ChainFold& f,
               const std::string& key) {
  const int me = rt.rank();
  const std::size_t ve = f.value_size, we = f.wire_size;
  const int S = static_cast<int>(t.seg_first.size());
  const int k = t.seg_of[me], first = t.seg_first[k], L = t.seg_last[k] - first + 1;
  const int my_host = t.seg_host[k], prod_host = t.seg_host[S - 1];
  // Pieces of at most 1 MiB, and at least kMinPieces of at least 256 KiB each where the buffer
  // allows: the way back starts only when the first piece is finished, so a buffer of a few
  // pieces pays the pipeline's fill (4 MiB in 4 pieces took 1.47x MPI_Allreduce at 1 Gbit/s).
  // Sized by the larger of the value and wire widths: compressed pieces cut by wire bytes held
  // 4 MiB of f32 each in fp8, and the longer fill made 64 MiB at 1 Gbit/s 175 ms, not 154-164.
  constexpr std::int64_t kPieceBytes = std::int64_t{1} << 20, kMinPieceBytes = 256 << 10;
  constexpr std::int64_t kMinPieces = 16;
  constexpr int kLag = 4;
  const auto total = static_cast<std::int64_t>(nbytes(count, std::max(we, ve)));
  const int K = static_cast<int>(std::min<std::int64_t>(
      count, std::max({std::int64_t{t.max_local}, ceil_div(total, kPieceBytes),
                       std::min(kMinPieces, ceil_div(total, kMinPieceBytes))})));
  // Window: [ running values in: count | finished: count | segment mates' values: rows ]
  const std::size_t acc_at = 0, fin_at = nbytes(count, we), row_at = 2 * fin_at;
  rt.reserve(row_at + nbytes(count * std::max(t.max_local - 1, 1), ve));
  const int local = rt.slots(key + ".local", rt.size());
  const int run = rt.slots(key + ".acc", rt.size());
  const int done = rt.slots(key + ".out", rt.size());
  auto carrier = [&](int seg, int j) {
    return t.seg_first[seg] + j % (t.seg_last[seg] - t.seg_first[seg] + 1);
  };
  auto relay = [&](int host, int j) {
    const auto& on = t.ranks[host];
    return on[static_cast<std::size_t>(j) % on.size()];
  };
  // Row of mate m's values in carrier c's window (its own value never travels).
  auto row = [&](int m, int c) {
    return static_cast<std::int64_t>(m < c ? m - first : m - first - 1);
  };
  auto piece = [&](int j) { return chunk_of(count, K, j); };
  auto fin = [&](const Chunk& p) { return rt.data() + fin_at + nbytes(p.offset, we); };
  auto put_finished = [&](int q, const Chunk& p) {
    rt.put(q, fin_at + nbytes(p.offset, we), fin(p), nbytes(p.length, we));
    rt.signal(q, done + me);
  };
  auto give_value = [&](int j) {
    const int c = carrier(k, j);
    if (c == me) return;
    const Chunk p = piece(j);
    rt.put(c, row_at + nbytes(row(me, c) * count + p.offset, ve), at(f.own, p.offset, ve),
           nbytes(p.length, ve));
    rt.signal(c, local + me);
  };
  auto carry = [&](int j) {
    if (carrier(k, j) != me) return;
    const Chunk p = piece(j);
    if (k > 0)
      rt.wait(run + carrier(k - 1, j), rt.expect(run + carrier(k - 1, j), 1),
              detail::make_string(key, " piece ", j, " acc[", carrier(k - 1, j), "]"));
    for (int m = first; m < first + L; ++m)
      if (m != me)
        rt.wait(local + m, rt.expect(local + m, 1),
                detail::make_string(key, " piece ", j, " local[", m, "]"));
    const std::function<const char*(int)> value = [&](int m) -> const char* {
      return m == me ? at(f.own, p.offset, ve)
                     : rt.data() + row_at + nbytes(row(m, me) * count + p.offset, ve);
    };
    // The running value goes out of, and the finished piece sits in, this rank's finished area
    // at the piece's place: the finished piece arrives there only after the running value has
    // been sent on (and the signal's flush has completed that put).
    const char* in = k > 0 ? rt.data() + acc_at + nbytes(p.offset, we) : nullptr;
    f.carry(p, in, value, first, first + L, k + 1 == S, fin(p));
    if (k + 1 < S) {
      const int next = carrier(k + 1, j);
      rt.put(next, acc_at + nbytes(p.offset, we), fin(p), nbytes(p.length, we));
      rt.signal(next, run + me);
      return;
    }
    for (int q : t.ranks[my_host])
      if (q != me) put_finished(q, p);
    for (int h = 0; h < static_cast<int>(t.ranks.size()); ++h)
      if (h != my_host) put_finished(relay(h, j), p);
  };
  auto finish = [&](int j) {
    const int producer = carrier(S - 1, j);
    if (producer == me) return;
    const Chunk p = piece(j);
    const bool relaying = my_host != prod_host && relay(my_host, j) == me;
    const int from = my_host == prod_host || relaying ? producer : relay(my_host, j);
    rt.wait(done + from, rt.expect(done + from, 1),
            detail::make_string(key, " piece ", j, " out[", from, "]"));
    if (relaying)
      for (int q : t.ranks[my_host])
        if (q != me) put_finished(q, p);
    f.deliver(p, fin(p));
  };
  // In place, recv[j] is written only once piece j is finished, i.e. after every rank's value of
  // j has been folded (and so received).
  give_value(0);
  for (int j = 0; j < K + kLag; ++j) {
    if (j + 1 < K) give_value(j + 1);
    if (j < K) carry(j);
    if (j >= kLag) finish(j - kLag);
  }
}

bool chain_all_reduce(const Runtime& rt, const Topology& t) {
  const auto mode = env().mpi_hierarchy;
  if (mode != Env::MpiHierarchy::automatic) return mode == Env::MpiHierarchy::on;
  const int P = rt.size(), H = static_cast<int>(t.ranks.size());
  const int S = static_cast<int>(t.seg_first.size());
  if (H < 2) return false;
  // Pieces of N bytes leaving each host, in units of N / P. Chain: a running value per segment
  // boundary it starts, and the producer's host sends the result to every other host. Flat
  // (direct): L (P - L) / P of N into owners elsewhere, and as much back in the all-gather.
  long chain = 0, flat = 0;
  for (int h = 0; h < H; ++h) {
    long out = 0;
    for (int s = 0; s + 1 < S; ++s) out += t.seg_host[s] == h;
    if (t.seg_host[S - 1] == h) out += H - 1;
    const long L = static_cast<long>(t.ranks[h].size());
    chain = std::max(chain, out * P);
    flat = std::max(flat, 2 * L * (P - L));
  }
  return chain < flat;
}

bool relay_results(const Runtime& rt, const Topology& t) {
  const auto mode = env().mpi_hierarchy;
  if (mode != Env::MpiHierarchy::automatic) return mode == Env::MpiHierarchy::on;
  (void)rt;
  return t.ranks.size() > 1 && t.max_local > 1;
}

void put_to_all(Runtime& rt, std::size_t offset, const void* src, std::size_t bytes, int slot) {
  put_each(rt, bytes * static_cast<std::size_t>(rt.size() - 1), slot,
           [&](int q) { rt.put(q, offset, src, bytes); });
}

void wait_all_peers(Runtime& rt, int slot, const char* what) {
  for (int p : remote_first(rt.rank(), rt.size()))
    if (p != rt.rank())
      rt.wait(slot + p, rt.expect(slot + p, 1), detail::make_string(what, "[", p, "]"));
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
  const std::vector<std::int64_t> off = offsets_of(args.recv_counts);
  const std::int64_t maxc = *std::max_element(args.recv_counts.begin(), args.recv_counts.end());
  rt.reserve(nbytes(maxc * P, es));
  const int in = rt.slots("reduce_scatter.in", P);
  // Chunk q of our send buffer goes to rank q's inbox, slot [me].
  put_each(rt, nbytes(off[P], es), in, [&](int q) {
    rt.put(q, nbytes(maxc * me, es), at(args.send, off[q], es), nbytes(args.recv_counts[q], es));
  });
  wait_all_peers(rt, in, "reduce_scatter.in");
  // In place, recv is our own chunk of send, still an operand: fold into a temporary.
  std::vector<char> acc(nbytes(args.recv_counts[me], es));
  fold_rank_order(rt, acc.data(), args.recv_counts[me], args.dtype, args.op,
                  [&](int p) -> const void* {
                    return p == me ? at(args.send, off[me], es) : rt.data() + nbytes(maxc * p, es);
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
  const std::vector<std::int64_t> off = offsets_of(args.recv_counts);
  rt.reserve(nbytes(off[P], es));
  const int slot = rt.slots("all_gather", P);
  if (P > 1) put_to_all(rt, nbytes(off[me], es), args.send, nbytes(args.recv_counts[me], es), slot);
  wait_all_peers(rt, slot, "all_gather");
  for (int p = 0; p < P; ++p) {
    if (p == me) {
      if (args.send != at(args.recv, off[me], es))
        copy_bytes(at(args.recv, off[me], es), args.send, nbytes(args.recv_counts[me], es));
    } else {
      copy_bytes(at(args.recv, off[p], es), rt.data() + nbytes(off[p], es),
                 nbytes(args.recv_counts[p], es));
    }
  }
}

void broadcast(Runtime& rt, const BroadcastArgs& args) {
  enter(rt, "broadcast", args);
  const int P = rt.size(), me = rt.rank();
  const std::size_t bytes = nbytes(args.count, dtype_size(args.dtype));
  rt.reserve(bytes);
  const int slot = rt.slots("broadcast", P);
  if (me == args.root) {
    if (P > 1) put_to_all(rt, 0, args.send, bytes, slot);
    if (args.send != args.recv) copy_bytes(args.recv, args.send, bytes);
    return;
  }
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
  // A rank whose receive buffer is a SymmetricBuffer gets its segments put straight into place
  // (one copy, as MPI_Alltoall makes); the others' arrive in their window and are copied out.
  // Rank q's receive area holds the segments of all sources in rank order.
  std::int64_t most = 0;
  for (int q = 0; q < P; ++q)
    if (land[q].id < 0) most = std::max(most, offsets_of(all[q].recv_counts)[P]);
  rt.reserve(nbytes(most, es));
  const std::vector<std::int64_t> mine = offsets_of(args.recv_counts);
  const int slot = rt.slots("all_to_allv", P);
  const std::vector<int> order = remote_first(me, P);
  std::int64_t sent = 0;
  for (int q = 0; q < P; ++q) sent += args.send_counts[q];
  put_each(rt, nbytes(sent, es), slot, [&](int q) {
    const void* src = at(args.send, args.send_displs[q], es);
    const std::size_t bytes = nbytes(args.send_counts[q], es);
    if (land[q].id >= 0) {
      rt.put_buffer(land[q].id, q,
                    static_cast<std::size_t>(land[q].offset) + nbytes(land[q].layout[me], es), src,
                    bytes);
      rt.flush_buffer(land[q].id, q);
    } else {
      rt.put(q, nbytes(offsets_of(all[q].recv_counts)[me], es), src, bytes);
    }
  });
  copy_bytes(at(args.recv, args.recv_displs[me], es), at(args.send, args.send_displs[me], es),
             nbytes(args.send_counts[me], es));
  // Each segment is copied out as soon as it has landed, in the order the peers send to us.
  for (int j = P - 2; j >= 0; --j) {
    const int p = order[j];
    rt.wait(slot + p, rt.expect(slot + p, 1), detail::make_string("all_to_allv[", p, "]"));
    if (land[me].id < 0)
      copy_bytes(at(args.recv, args.recv_displs[p], es), rt.data() + nbytes(mine[p], es),
                 nbytes(args.recv_counts[p], es));
  }
}

}  // namespace fusedcoll::mpi
