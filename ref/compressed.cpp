// The oracle of the compressed collectives (docs/compression.md, "Wire semantics"; pinned in
// docs/semantics.md, "Compressed collectives"). Sequential and literal: every encode and decode
// the definition names happens here once, at the element indices it names, with the scales agreed
// from every rank's amax. Calls arrive validated (ref/collectives.cpp).

#include <cstring>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "ref/compressed.hpp"

namespace fusedcoll::ref::compressed {
namespace {

using fusedcoll::detail::WirePlan;
using Floats = std::vector<float>;
using std::int64_t;

/// The agreed plan of a reduction over the index space [0, n): every rank's contribution folded
/// into one amax table (the max-AllReduce), then the scales.
WirePlan reduction_plan(const CompressionOptions& wire, const std::vector<Floats>& y, int64_t n,
                        ReduceOp op) {
  std::vector<float> table = fusedcoll::detail::empty_amax(wire);
  for (const Floats& v : y) fusedcoll::detail::accumulate_amax(wire, table, v.data(), 0, n);
  return fusedcoll::detail::make_plan(
      wire, table, fusedcoll::detail::reduction_headroom(op, static_cast<int>(y.size())));
}

/// decode(encode(x[first .. first + len))) into a new vector: what a receiver gets of a sent run.
Floats arrived(const WirePlan& plan, const float* x, int64_t first, int64_t len) {
  Floats out(x, x + len);
  std::vector<std::byte> tmp;
  fusedcoll::detail::wire_round_trip(plan, out.data(), first, len, tmp);
  return out;
}

/// Owner reduction of [offset, offset + len): every contribution arrives encoded (the owner's own
/// too), and is folded in rank order in f32; then the `avg` division unless predivided.
Floats owner_fold(const WirePlan& plan, const std::vector<Floats>& y, int64_t offset, int64_t len,
                  ReduceOp op, const CompressionOptions& wire) {
  const int P = static_cast<int>(y.size());
  Floats acc = arrived(plan, y[0].data() + offset, offset, len);
  for (int p = 1; p < P; ++p) {
    const Floats v = arrived(plan, y[p].data() + offset, offset, len);
    fusedcoll::detail::reduce_into(acc.data(), v.data(), len, DType::f32, op);
  }
  if (fusedcoll::detail::divides_after(op, wire))
    fusedcoll::detail::finish_average(acc.data(), len, DType::f32, P);
  return acc;
}

/// Fold of [offset, offset + len) in which the running value travels: it leaves rank `first`
/// encoded, and every later rank (mod P) decodes it, adds its own f32 value (received value on
/// the left) and re-encodes it, until rank first - 1 finishes it. The ring starts chunk c at
/// rank c + 1; the chain starts every element at rank 0.
Floats running_fold(const WirePlan& plan, const std::vector<Floats>& y, int first, int64_t offset,
                    int64_t len, ReduceOp op, const CompressionOptions& wire) {
  const int P = static_cast<int>(y.size());
  Floats acc(y[first].begin() + offset, y[first].begin() + offset + len);
  for (int i = 1; i < P; ++i) {
    const int r = (first + i) % P;
    acc = arrived(plan, acc.data(), offset, len);
    fusedcoll::detail::reduce_into(acc.data(), y[r].data() + offset, len, DType::f32, op);
  }
  if (fusedcoll::detail::divides_after(op, wire))
    fusedcoll::detail::finish_average(acc.data(), len, DType::f32, P);
  return acc;
}

void store(void* dst, const Floats& v, int64_t at) {
  if (!v.empty()) std::memcpy(static_cast<float*>(dst) + at, v.data(), v.size() * sizeof(float));
}

/// The amax table of moved data: blocks restart at every segment (index = position in the
/// segment), and every rank's segments are folded into one table.
struct Segment {
  const float* data;
  int64_t len;
};
WirePlan moved_plan(const CompressionOptions& wire, const std::vector<Segment>& segments) {
  std::vector<float> table = fusedcoll::detail::empty_amax(wire);
  for (const Segment& s : segments)
    fusedcoll::detail::accumulate_amax(wire, table, s.data, 0, s.len);
  return fusedcoll::detail::make_plan(wire, table, 1.0f);
}

}  // namespace

void all_reduce(std::span<const AllReduceArgs> ranks) {
  const int P = static_cast<int>(ranks.size());
  const AllReduceArgs& spec = ranks[0];
  std::vector<Floats> y;
  for (const auto& r : ranks)
    y.push_back(fusedcoll::detail::contribution(r.send, spec.count, spec.op, spec.wire, P));
  const WirePlan plan = reduction_plan(spec.wire, y, spec.count, spec.op);

  Floats result(static_cast<std::size_t>(spec.count));
  for (int c = 0; c < P; ++c) {
    const Chunk ch = chunk_of(spec.count, P, c);
    if (ch.length == 0) continue;
    // P = 1: every order is [0], and the one contribution is not encoded before the final trip
    // in the running folds; direct's owner fold round-trips it, so P = 1 stays direct's.
    Floats acc;
    if (spec.algo == AllReduceAlgo::ring && P > 1)
      acc = running_fold(plan, y, (c + 1) % P, ch.offset, ch.length, spec.op, spec.wire);
    else if (spec.algo == AllReduceAlgo::chain && P > 1)
      acc = running_fold(plan, y, 0, ch.offset, ch.length, spec.op, spec.wire);
    else
      acc = owner_fold(plan, y, ch.offset, ch.length, spec.op, spec.wire);
    // The finished chunk travels encoded once; every rank, its owner included, decodes it.
    const Floats fin = arrived(plan, acc.data(), ch.offset, ch.length);
    std::memcpy(result.data() + ch.offset, fin.data(), fin.size() * sizeof(float));
  }
  for (const auto& r : ranks) store(r.recv, result, 0);
}

void reduce_scatter(std::span<const ReduceScatterArgs> ranks) {
  const int P = static_cast<int>(ranks.size());
  const ReduceScatterArgs& spec = ranks[0];
  int64_t total = 0;
  for (int64_t n : spec.recv_counts) total += n;
  std::vector<Floats> y;
  for (const auto& r : ranks)
    y.push_back(fusedcoll::detail::contribution(r.send, total, spec.op, spec.wire, P));
  const WirePlan plan = reduction_plan(spec.wire, y, total, spec.op);

  std::vector<Floats> out(P);
  int64_t offset = 0;
  for (int q = 0; q < P; ++q) {
    const int64_t len = spec.recv_counts[q];
    if (len > 0) out[q] = owner_fold(plan, y, offset, len, spec.op, spec.wire);
    offset += len;
  }
  for (int q = 0; q < P; ++q) store(ranks[q].recv, out[q], 0);
}

void all_gather(std::span<const AllGatherArgs> ranks) {
  const int P = static_cast<int>(ranks.size());
  const AllGatherArgs& spec = ranks[0];
  std::vector<Floats> part(P);
  std::vector<Segment> segments;
  for (int r = 0; r < P; ++r) {
    const auto* s = static_cast<const float*>(ranks[r].send);
    const int64_t n = spec.recv_counts[r];
    part[r] = n > 0 ? Floats(s, s + n) : Floats{};
    segments.push_back({part[r].data(), n});
  }
  const WirePlan plan = moved_plan(spec.wire, segments);
  Floats gathered;
  for (int r = 0; r < P; ++r) {
    const Floats v = arrived(plan, part[r].data(), 0, std::ssize(part[r]));
    gathered.insert(gathered.end(), v.begin(), v.end());
  }
  for (const auto& r : ranks) store(r.recv, gathered, 0);
}

void all_to_allv(std::span<const AllToAllvArgs> ranks) {
  const int P = static_cast<int>(ranks.size());
  // sent[r][q]: what rank r sends to rank q, as f32.
  std::vector<std::vector<Floats>> sent(P);
  std::vector<Segment> segments;
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < P; ++q) {
      const auto* s = static_cast<const float*>(ranks[r].send) + ranks[r].send_displs[q];
      const int64_t n = ranks[r].send_counts[q];
      sent[r].push_back(n > 0 ? Floats(s, s + n) : Floats{});
    }
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < P; ++q) segments.push_back({sent[r][q].data(), std::ssize(sent[r][q])});
  const WirePlan plan = moved_plan(ranks[0].wire, segments);
  for (int q = 0; q < P; ++q)
    for (int r = 0; r < P; ++r)
      store(ranks[q].recv, arrived(plan, sent[r][q].data(), 0, std::ssize(sent[r][q])),
            ranks[q].recv_displs[r]);
}

}  // namespace fusedcoll::ref::compressed
