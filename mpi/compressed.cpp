// The compressed-wire collectives on MPI (docs/compression.md): the plans of collectives.cpp
// with encoded bytes in the puts. Every encode and decode happens at the point and element index
// ref/compressed.cpp names, with the scales agreed from every rank's amax, so each rank's output
// is ref/'s bit for bit. Encoding is element-wise (the scale depends on the element's index only),
// so workgroups split runs into pieces freely.
//
// Windows hold wire bytes only. What a rank puts is first encoded into a staging area of its own
// window: it is reused from call to call (no allocation per call), and it stays valid until the
// signal's flush has completed the put.

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "mpi/ops.hpp"

namespace fusedcoll::mpi {
namespace {

using fusedcoll::detail::WirePlan;
using fusedcoll::detail::collective::ExchangePlan;
using fusedcoll::detail::collective::Item;
using fusedcoll::detail::collective::OwnerPlan;
using fusedcoll::detail::collective::Parts;
using fusedcoll::detail::collective::RingPlan;
using fusedcoll::detail::collective::Tiling;
using std::int64_t;

std::size_t wbytes(int64_t elems, const WirePlan& plan) {
  return static_cast<std::size_t>(elems) * plan.elem();
}

/// `f(offset, length)` over [0, count) in pieces of kFoldPiece, spread over the workgroups once
/// the work is large enough to pay for waking them.
template <class F>
void for_pieces(Runtime& rt, int64_t count, F&& f) {
  const int64_t pieces = ceil_div(count, kFoldPiece);
  const int grid = rt.grid_for_bytes(fbytes(count), static_cast<std::size_t>(pieces));
  rt.launch(grid, [&](int w) {
    for (int64_t i = w; i < pieces; i += grid) {
      const int64_t o = i * kFoldPiece;
      f(o, std::min(kFoldPiece, count - o));
    }
  });
}

/// A workgroup's f32 scratch for one piece (`which` of two), kept across calls: pieces are
/// kFoldPiece floats, 128 KiB, where a fresh vector each time would be an mmap and page faults.
float* piece_buffer(int which, int64_t n) {
  thread_local std::vector<float> buf[2];
  auto& b = buf[which];
  if (b.size() < static_cast<std::size_t>(n)) b.resize(static_cast<std::size_t>(n));
  return b.data();
}

/// The amax reduction: max, and NaN wins, so that non-finite data is rejected on every rank.
void nan_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const float*>(in);
  auto* b = static_cast<float*>(inout);
  for (int i = 0; i < *len; ++i)
    if (std::isnan(a[i]) || (!std::isnan(b[i]) && a[i] > b[i])) b[i] = a[i];
}

MPI_Op nan_max_op() {
  static const MPI_Op op = [] {
    MPI_Op o = MPI_OP_NULL;
    FC_CHECK_MPI(MPI_Op_create(&nan_max, /*commute=*/1, &o));
    return o;
  }();
  return op;
}

/// A run of this rank's f32 values whose element indices start at `first`.
struct Run {
  const float* data;
  int64_t first;
  int64_t length;
};

/// Agrees the scales of one call: this rank's amax table of `runs`, one max-AllReduce of the
/// tables, then the plan. Tables are padded to the one length every rank computes from the agreed
/// arguments (`indices`: the largest index range of any rank), so they line up element-wise; the
/// padding is 0, the identity of the max. Part of the agreement: a NaN or infinite amax throws
/// `InvalidArgument` on every rank alike, before any data moves, and the communicator stays
/// usable.
WirePlan agree_plan(Runtime& rt, const CompressionOptions& wire, const std::vector<Run>& runs,
                    int64_t indices, float headroom) {
  std::vector<float> table = fusedcoll::detail::empty_amax(wire);
  {
    const Runtime::Span span(rt, "amax");
    for (const Run& r : runs)
      fusedcoll::detail::accumulate_amax(wire, table, r.data, r.first, r.length);
  }
  if (resolved_scaling(wire) == Scaling::per_block)
    table.resize(static_cast<std::size_t>(ceil_div(indices, wire.block)), 0.0f);
  if (!table.empty()) {
    FC_CHECK_INTERNAL(table.size() <= static_cast<std::size_t>(INT_MAX), "amax table of ",
                      table.size(), " entries");
    std::vector<MPI_Request> req(1, MPI_REQUEST_NULL);
    FC_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, table.data(), static_cast<int>(table.size()),
                                MPI_FLOAT, nan_max_op(), rt.comm(), &req[0]));
    rt.wait_requests(req, "every rank's amax table (the scales of the compressed wire)");
  }
  rt.set_agreement(true);
  WirePlan plan = fusedcoll::detail::make_plan(wire, table, headroom);
  rt.set_agreement(false);
  return plan;
}

/// The owner reduction (`pl`, whole parts): every rank's contribution to part q goes encoded to
/// owner q's inbox, row = sender; the owner decodes every row (its own included: its part is
/// encoded into its staging area too) and folds them in rank order in f32, then divides for a
/// non-predivided `avg`. `done(offset, n, acc)` receives each finished piece of this rank's part.
/// Window: [ the plan's inbox | staging: the whole of y ], from `base`.
template <class Done>
void owner_reduce(Runtime& rt, const std::string& key, std::size_t base, const float* y,
                  const OwnerPlan& pl, ReduceOp op, const CompressionOptions& wire,
                  const WirePlan& plan, Done&& done) {
  const int P = rt.size(), me = rt.rank();
  const auto& off = pl.parts.off;
  const auto& len = pl.parts.len;
  const std::size_t inbox_at = base, stage_at = base + wbytes(pl.inbox_elems(), plan);
  const int in = rt.slots(key, P);
  // The scatter's parts, then this rank's own (encoded to be decoded by itself, as the others').
  std::vector<int> encoded = peers_of(pl.scatter, me);
  if (!pl.reduce.empty()) encoded.push_back(me);
  const int n_enc = static_cast<int>(encoded.size());
  const int grid = rt.grid_for_bytes(fbytes(pl.parts.total), static_cast<std::size_t>(n_enc));
  rt.launch(grid, [&](int w) {
    for (int j = w; j < n_enc; j += grid) {
      const int q = encoded[j];
      char* enc = rt.data() + stage_at + wbytes(off[q], plan);
      {
        const Runtime::Span span(rt, "encode");
        fusedcoll::detail::wire_encode(plan, y + off[q], off[q], len[q], enc);
      }
      if (q == me) continue;
      rt.put(q, inbox_at + wbytes(pl.inbox_at(me), plan), enc, wbytes(len[q], plan));
      rt.signal(q, in + me, 1, Runtime::Sources::kept);  // the staging area is not written again
    }
  });
  wait_from(rt, in, pl.part_peers(), key.c_str());
  const int64_t first = off[me];
  const int divide = fusedcoll::detail::divides_after(op, wire) ? P : 0;
  const Runtime::Span span(rt, "fold");
  for_pieces(rt, len[me], [&](int64_t o, int64_t n) {
    // Per piece: workgroups run this concurrently (a shared list raced above 4 MiB).
    std::vector<fusedcoll::detail::WireSource> rows(static_cast<std::size_t>(P));
    float* acc = piece_buffer(0, n);
    for (int p = 0; p < P; ++p)
      rows[p] = {fusedcoll::detail::WireSource::Kind::wire,
                 p == me ? rt.data() + stage_at + wbytes(first + o, plan)
                         : rt.data() + inbox_at + wbytes(pl.inbox_at(p) + o, plan)};
    // One fused pass (decode, fold, avg) instead of a decode and a reduce per row.
    fusedcoll::detail::wire_reduce(plan, op, rows, first + o, n, divide, nullptr, acc);
    done(o, n, acc);
  });
}

/// AllReduce's last phase (the owner plan's gather): each owner's finished chunk, encoded once at
/// its place in the gather area (`gather_at`, `count` wire elements), goes to every rank; every
/// rank, the owner included, decodes every chunk into `recv`.
void gather_encoded(Runtime& rt, std::size_t gather_at, const OwnerPlan& pl, const WirePlan& plan,
                    float* recv) {
  const int P = rt.size(), me = rt.rank();
  const auto& parts = pl.parts;
  const int out = rt.slots("all_reduce.wire.out", P);
  char* gathered = rt.data() + gather_at;
  const Topology t = topology(rt);
  if (relay_results(rt, t)) {
    // Each chunk enters every other host once: its owner puts it to the ranks on its own host and
    // to one relay rank per other host, which forwards it to its host's ranks (docs/mpi.md,
    // "Across hosts"). Forwarded chunks have slots of their own (`fwd` + relay), in owner order.
    const int fwd = rt.slots("all_reduce.wire.relay", P);
    const auto& host = rt.host_of();
    const int mine_h = host[me];
    auto put_chunk = [&](int q, int c, int slot) {
      rt.put(q, gather_at + wbytes(parts.off[c], plan), gathered + wbytes(parts.off[c], plan),
             wbytes(parts.len[c], plan));
      rt.signal(q, slot + me, 1, Runtime::Sources::kept);  // gathered chunks stay as they are
    };
    for (int h = 0; h < t.hosts(); ++h)
      if (h != mine_h) put_chunk(t.relay(h, me), me, out);
    for (int q : t.ranks[mine_h])
      if (q != me) put_chunk(q, me, out);
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      const bool direct = host[p] == mine_h || t.relay(mine_h, p) == me;
      const int from = direct ? p : t.relay(mine_h, p);
      const int slot = direct ? out : fwd;
      rt.wait(slot + from, rt.expect(slot + from, 1),
              detail::make_string("all_reduce.wire chunk ", p, direct ? " out[" : " relay[",
                                  from, "]"));
      if (direct && host[p] != mine_h)
        for (int q : t.ranks[mine_h])
          if (q != me) put_chunk(q, p, fwd);
      const Runtime::Span span(rt, "decode");
      for_pieces(rt, parts.len[p], [&](int64_t o, int64_t n) {
        fusedcoll::detail::wire_decode(plan, gathered + wbytes(parts.off[p] + o, plan),
                                       parts.off[p] + o, n, recv + parts.off[p] + o);
      });
    }
    return;
  }
  put_to(rt, pl.part_peers(), gather_at + wbytes(parts.off[me], plan),
         gathered + wbytes(parts.off[me], plan), wbytes(parts.len[me], plan), out,
         Runtime::Sources::kept);
  for (const Item& it : pl.collect) {
    const int p = it.peer;
    rt.wait(out + p, rt.expect(out + p, 1), detail::make_string("all_reduce.wire.out[", p, "]"));
    const Runtime::Span span(rt, "decode");
    for_pieces(rt, parts.len[p], [&](int64_t o, int64_t n) {
      fusedcoll::detail::wire_decode(plan, gathered + wbytes(parts.off[p] + o, plan),
                                     parts.off[p] + o, n, recv + parts.off[p] + o);
    });
  }
}

/// Encodes the finished piece `acc` of the chunk at `offset` into the gather area and decodes it
/// into `recv`: the owner gets its own chunk through the wire like everyone else.
void finish_piece(Runtime& rt, std::size_t gather_at, const WirePlan& plan, int64_t at,
                  int64_t n, const float* acc, float* recv) {
  char* fin = rt.data() + gather_at + wbytes(at, plan);
  fusedcoll::detail::wire_reduce(plan, ReduceOp::sum,
                                 {{fusedcoll::detail::WireSource::Kind::plain, acc}}, at, n, 0, fin,
                                 recv + at);
}

void all_reduce_direct_wire(Runtime& rt, const AllReduceArgs& a, const float* y,
                            const WirePlan& plan) {
  const int me = rt.rank();
  const OwnerPlan pl(Parts::chunks(a.count, rt.size()), me, rt.size(), Tiling::segments(),
                     sizeof(float), /*gather=*/true);
  // [ gather: count | the plan's inbox | staging: count ]
  rt.reserve(wbytes(a.count + pl.inbox_elems() + a.count, plan));
  auto* recv = static_cast<float*>(a.recv);
  owner_reduce(rt, "all_reduce.direct.wire.in", wbytes(a.count, plan), y, pl, a.op, a.wire, plan,
               [&](int64_t o, int64_t n, const float* acc) {
                 finish_piece(rt, 0, plan, pl.parts.off[me] + o, n, acc, recv);
               });
  gather_encoded(rt, 0, pl, plan, recv);
}

/// The ring fold of ref/compressed.cpp: chunk c's running value leaves rank c + 1 encoded; each
/// later rank decodes it, adds its own f32 value (received value on the left) and re-encodes it,
/// until rank c finishes it. Then the direct all-gather of the encoded finished chunks.
void all_reduce_ring_wire(Runtime& rt, const AllReduceArgs& a, const float* y,
                          const WirePlan& plan) {
  const int P = rt.size(), me = rt.rank();
  const RingPlan ring(a.count, me, P, Tiling::segments(), sizeof(float));
  const Parts& parts = ring.parts;
  // [ gather: count | one mailbox per step: the plan's regions | staging: the longest chunk ]
  const std::size_t gather_at = 0, step_at = wbytes(a.count, plan),
                    stage_at = step_at + wbytes(ring.regions_elems(), plan);
  rt.reserve(stage_at + wbytes(parts.max_len, plan));
  const int step = rt.slots("all_reduce.ring.wire", P - 1);
  auto* recv = static_cast<float*>(a.recv);
  char* stage = rt.data() + stage_at;
  {
    const int c = ring.send_chunk(0);
    const Runtime::Span span(rt, "encode");
    for_pieces(rt, parts.len[c], [&](int64_t o, int64_t n) {
      fusedcoll::detail::wire_encode(plan, y + parts.off[c] + o, parts.off[c] + o, n,
                                     stage + wbytes(o, plan));
    });
    rt.put(ring.next, step_at, stage, wbytes(parts.len[c], plan));
    rt.signal(ring.next, step + 0);
  }
  for (int s = 0; s < ring.steps; ++s) {
    const int c = ring.recv_chunk(s);
    const bool last = s + 1 == ring.steps;
    rt.wait(step + s, rt.expect(step + s, 1),
            detail::make_string("all_reduce.ring.wire step ", s, " from rank ", ring.prev));
    const char* got = rt.data() + step_at + wbytes(ring.region_at(s), plan);
    const Runtime::Span span(rt, "fold");
    for_pieces(rt, parts.len[c], [&](int64_t o, int64_t n) {
      const int64_t at = parts.off[c] + o;
      float* acc = piece_buffer(0, n);
      // Decode, add the own value and (last step) divide in one pass; re-encode for the next rank
      // or finish the chunk.
      const int divide = last && fusedcoll::detail::divides_after(a.op, a.wire) ? P : 0;
      fusedcoll::detail::wire_reduce(plan, a.op,
                                     {{fusedcoll::detail::WireSource::Kind::wire, got + wbytes(o, plan)},
                                      {fusedcoll::detail::WireSource::Kind::plain, y + at}},
                                     at, n, divide, last ? nullptr : stage + wbytes(o, plan),
                                     last ? acc : nullptr);
      if (last) finish_piece(rt, gather_at, plan, at, n, acc, recv);
    });
    if (!last) {
      rt.put(ring.next, step_at + wbytes(ring.region_at(s + 1), plan), stage,
             wbytes(parts.len[c], plan));
      rt.signal(ring.next, step + s + 1);
    }
  }
  gather_encoded(rt, gather_at,
                 OwnerPlan(parts, me, P, Tiling::segments(), sizeof(float), /*gather=*/true), plan,
                 recv);
}

/// The chain fold of ref/compressed.cpp on the chain of host segments (collectives.cpp,
/// `run_chain`): every element's running value starts as y_0, and each later rank r makes it
/// rt(acc) ⊕ y_r, rt = decode(encode(.)) with the agreed scales (received value on the left, own
/// value in f32). Inside a segment rt is a local rounding, so the mates' f32 values travel to the
/// carrier and the wire is only crossed where the running value leaves a segment: encoded, E(acc),
/// so that the next segment's first step starts with the decode. The last segment's carrier
/// divides for `avg` and sends the finished E(acc) to every host once; every rank decodes it.
void all_reduce_chain_wire(Runtime& rt, const AllReduceArgs& a, const float* y,
                           const WirePlan& plan) {
  using Src = fusedcoll::detail::WireSource;
  const int divide = fusedcoll::detail::divides_after(a.op, a.wire) ? rt.size() : 0;
  auto* recv = static_cast<float*>(a.recv);
  ChainFold f;
  f.value_size = sizeof(float);
  f.wire_size = plan.elem();
  f.own = y;
  f.carry = [&](const Chunk& p, const char* in, const std::function<const char*(int)>& value,
                int first, int end, bool last, char* out) {
    auto val = [&](int m, int64_t o) {
      return reinterpret_cast<const float*>(value(m)) + o;
    };
    const Runtime::Span span(rt, "fold");
    for_pieces(rt, p.length, [&](int64_t o, int64_t n) {
      const int64_t at = p.offset + o;
      char* enc = out + wbytes(o, plan);
      // rt of the running value before this rank's step: the decoded arrival, or rt(y_0).
      Src acc = in != nullptr ? Src{Src::Kind::wire, in + wbytes(o, plan)}
                              : Src{Src::Kind::round_trip, val(first, o)};
      const int from = in != nullptr ? first : first + 1;
      if (from == end) {  // segment 0 of one rank: y_0 leaves encoded
        fusedcoll::detail::wire_encode(plan, val(first, o), at, n, enc);
        return;
      }
      for (int m = from; m < end; ++m) {
        const bool final_step = m + 1 == end;
        // Partial results alternate between two buffers: a source never overlaps the output.
        float* part = final_step ? (last ? recv + at : nullptr) : piece_buffer((m - from) % 2, n);
        fusedcoll::detail::wire_reduce(plan, a.op, {acc, {Src::Kind::plain, val(m, o)}}, at, n,
                                       final_step && last ? divide : 0,
                                       final_step ? enc : nullptr, part);
        acc = {Src::Kind::round_trip, part};
      }
    });
  };
  f.deliver = [&](const Chunk& p, const char* fin) {
    const Runtime::Span span(rt, "decode");
    for_pieces(rt, p.length, [&](int64_t o, int64_t n) {
      fusedcoll::detail::wire_decode(plan, fin + wbytes(o, plan), p.offset + o, n,
                                     recv + p.offset + o);
    });
  };
  run_chain(rt, topology(rt), a.count, f, "all_reduce.chain.wire");
}

}  // namespace

void all_reduce_wire(Runtime& rt, const AllReduceArgs& args) {
  const int P = rt.size();
  std::vector<float> storage;
  const float* y = [&] {
    const Runtime::Span span(rt, "contribution");
    return fusedcoll::detail::contribution_view(args.send, args.send == args.recv, args.count,
                                                args.op, args.wire, P, storage);
  }();
  const WirePlan plan = agree_plan(rt, args.wire, {{y, 0, args.count}}, args.count,
                                   fusedcoll::detail::reduction_headroom(args.op, P));
  if (args.count == 0) return;
  if (args.algo == AllReduceAlgo::ring && P > 1)
    all_reduce_ring_wire(rt, args, y, plan);
  else if (args.algo == AllReduceAlgo::chain && P > 1)
    all_reduce_chain_wire(rt, args, y, plan);
  else
    all_reduce_direct_wire(rt, args, y, plan);
}

void reduce_scatter_wire(Runtime& rt, const ReduceScatterArgs& args) {
  const int P = rt.size(), me = rt.rank();
  const OwnerPlan pl(Parts::counts(args.recv_counts), me, P, Tiling::segments(), sizeof(float),
                     /*gather=*/false);
  const int64_t total = pl.parts.total;
  // In place for ReduceScatter means recv inside send: compare by overlap, not equality.
  const auto* send = static_cast<const float*>(args.send);
  auto* recv = static_cast<float*>(args.recv);
  const bool overlaps = recv < send + total && send < recv + args.recv_counts[me];
  std::vector<float> storage;
  const float* y = fusedcoll::detail::contribution_view(args.send, overlaps, total, args.op,
                                                        args.wire, P, storage);
  const WirePlan plan = agree_plan(rt, args.wire, {{y, 0, total}}, total,
                                   fusedcoll::detail::reduction_headroom(args.op, P));
  if (total == 0) return;
  rt.reserve(wbytes(pl.inbox_elems() + total, plan));
  owner_reduce(rt, "reduce_scatter.wire.in", 0, y, pl, args.op, args.wire, plan,
               [&](int64_t o, int64_t n, const float* acc) {
                 copy_bytes(recv + o, acc, fbytes(n));
               });
}

void all_gather_wire(Runtime& rt, const AllGatherArgs& args) {
  const int P = rt.size(), me = rt.rank();
  ExchangePlan ex = ExchangePlan::all_gather(args, me, P);
  ex.tile(Tiling::segments(), sizeof(float));
  const auto& off = ex.recv_at;  // the window is laid out like recv
  const int64_t n_me = args.recv_counts[me];
  const auto* send = static_cast<const float*>(args.send);
  auto* recv = static_cast<float*>(args.recv);
  // Block indices restart at 0 in every rank's contribution.
  const WirePlan plan = agree_plan(rt, args.wire, {{send, 0, n_me}}, ex.longest(), 1.0f);
  if (ex.inbox == 0) return;
  rt.reserve(wbytes(ex.inbox, plan));
  const int slot = rt.slots("all_gather.wire", P);
  char* box = rt.data();
  // Encoded before anything is decoded into recv, which an in-place send lies inside.
  for_pieces(rt, n_me, [&](int64_t o, int64_t n) {
    fusedcoll::detail::wire_encode(plan, send + o, o, n, box + wbytes(off[me] + o, plan));
  });
  put_to(rt, peers_of(ex.sends, me), wbytes(ex.put_at[me], plan), box + wbytes(off[me], plan),
         wbytes(n_me, plan), slot);
  auto decode = [&](int p) {
    for_pieces(rt, args.recv_counts[p], [&](int64_t o, int64_t n) {
      fusedcoll::detail::wire_decode(plan, box + wbytes(ex.box_at[p] + o, plan), o, n,
                                     recv + off[p] + o);
    });
  };
  for (int p : peers_of(ex.receives, me)) {
    rt.wait(slot + p, rt.expect(slot + p, 1), detail::make_string("all_gather.wire[", p, "]"));
    decode(p);
  }
  decode(me);
}

void all_to_allv_wire(Runtime& rt, const AllToAllvArgs& args,
                      const std::vector<AllToAllvArgs>& all) {
  const int P = rt.size(), me = rt.rank();
  const auto* send = static_cast<const float*>(args.send);
  auto* recv = static_cast<float*>(args.recv);
  ExchangePlan ex = ExchangePlan::all_to_allv(
      args, me, P, [&](int q) -> const std::vector<int64_t>& { return all[q].recv_counts; });
  ex.tile(Tiling::segments(), sizeof(float));
  // Window: [ the plan's inbox | staging: the largest send total ].
  int64_t staging = 0;
  for (int q = 0; q < P; ++q) staging = std::max(staging, offsets_of(all[q].send_counts)[P]);
  std::vector<Run> runs;
  for (int q = 0; q < P; ++q)
    runs.push_back({send + args.send_displs[q], 0, args.send_counts[q]});
  // Block indices restart at 0 in every segment.
  const WirePlan plan = agree_plan(rt, args.wire, runs, ex.longest(), 1.0f);
  if (ex.inbox == 0) return;
  rt.reserve(wbytes(ex.inbox + staging, plan));
  const int slot = rt.slots("all_to_allv.wire", P);
  const std::vector<int64_t> sent_at = offsets_of(args.send_counts);
  char* stage = rt.data() + wbytes(ex.inbox, plan);
  const int n_sends = static_cast<int>(ex.sends.size());
  const int grid = rt.grid_for_bytes(fbytes(sent_at[P]), static_cast<std::size_t>(n_sends));
  rt.launch(grid, [&](int w) {
    for (int j = w; j < n_sends; j += grid) {
      const int q = ex.sends[j].peer;
      const int64_t n = ex.send_len[q];
      char* enc = stage + wbytes(sent_at[q], plan);
      fusedcoll::detail::wire_encode(plan, send + ex.send_at[q], 0, n, enc);
      if (q == me) {
        fusedcoll::detail::wire_decode(plan, enc, 0, n, recv + ex.recv_at[me]);
        continue;
      }
      rt.put(q, wbytes(ex.put_at[q], plan), enc, wbytes(n, plan));
      rt.signal(q, slot + me);
    }
  });
  // Each segment is decoded as soon as it has landed, in the order the peers send to us (the
  // receives' order reversed: rank me - 1 sends to us first).
  const std::vector<int> from = peers_of(ex.receives, me);
  for (auto p = from.rbegin(); p != from.rend(); ++p) {
    rt.wait(slot + *p, rt.expect(slot + *p, 1), detail::make_string("all_to_allv.wire[", *p, "]"));
    for_pieces(rt, ex.recv_len[*p], [&](int64_t o, int64_t n) {
      fusedcoll::detail::wire_decode(plan, rt.data() + wbytes(ex.box_at[*p] + o, plan), o, n,
                                     recv + ex.recv_at[*p] + o);
    });
  }
}

}  // namespace fusedcoll::mpi
