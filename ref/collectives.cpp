// The oracle of the standalone collectives. Each one snapshots every rank's input first (inputs
// may alias outputs: in-place calls, or ranks sharing memory inside one process), then writes the
// defined result straight from the formulas of docs/semantics.md.

#include <cstring>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/ref.hpp"
#include "ref/compressed.hpp"
#include "fusedcoll/detail/validate.hpp"

namespace fusedcoll::ref {
namespace {

using Bytes = std::vector<unsigned char>;

Bytes snapshot(const void* p, std::int64_t count, std::size_t elem) {
  const auto* b = static_cast<const unsigned char*>(p);
  return count > 0 ? Bytes(b, b + count * elem) : Bytes{};
}

void write(void* dst, const unsigned char* src, std::int64_t count, std::size_t elem) {
  if (count > 0) std::memcpy(dst, src, count * elem);
}

unsigned char* at(Bytes& b, std::int64_t offset, std::size_t elem) {
  return b.data() + offset * elem;
}

/// acc := v_order[0] op v_order[1] op ... over elements [offset, offset + length) of the inputs,
/// left to right; then the `avg` division.
Bytes fold(const std::vector<Bytes>& inputs, const std::vector<int>& order, std::int64_t offset,
           std::int64_t length, DType dtype, ReduceOp op, int world) {
  const std::size_t elem = dtype_size(dtype);
  Bytes acc(inputs[order[0]].begin() + offset * elem,
            inputs[order[0]].begin() + (offset + length) * elem);
  for (std::size_t i = 1; i < order.size(); ++i)
    detail::reduce_into(acc.data(), inputs[order[i]].data() + offset * elem, length, dtype, op);
  if (op == ReduceOp::avg) detail::finish_average(acc.data(), length, dtype, world);
  return acc;
}

std::vector<int> rank_order(int world) {
  std::vector<int> order(world);
  for (int r = 0; r < world; ++r) order[r] = r;
  return order;
}

}  // namespace

void all_reduce(std::span<const AllReduceArgs> ranks) {
  detail::check_world_calls(ranks);
  if (ranks[0].wire.format != WireFormat::none) return compressed::all_reduce(ranks);
  const int world = static_cast<int>(ranks.size());
  const auto& spec = ranks[0];
  const std::size_t elem = dtype_size(spec.dtype);
  std::vector<Bytes> in;
  for (const auto& r : ranks) in.push_back(snapshot(r.send, spec.count, elem));

  Bytes result(spec.count * elem);
  for (int c = 0; c < world; ++c) {
    const Chunk chunk = chunk_of(spec.count, world, c);
    if (chunk.length == 0) continue;
    std::vector<int> order = rank_order(world);
    if (spec.algo == AllReduceAlgo::ring)  // starts after the owner, ends at the owner
      for (int i = 0; i < world; ++i) order[i] = (c + 1 + i) % world;
    const Bytes part = fold(in, order, chunk.offset, chunk.length, spec.dtype, spec.op, world);
    std::memcpy(at(result, chunk.offset, elem), part.data(), part.size());
  }
  for (const auto& r : ranks) write(r.recv, result.data(), spec.count, elem);
}

void all_to_allv(std::span<const AllToAllvArgs> ranks) {
  detail::check_world_calls(ranks);
  if (ranks[0].wire.format != WireFormat::none) return compressed::all_to_allv(ranks);
  const int world = static_cast<int>(ranks.size());
  const std::size_t elem = dtype_size(ranks[0].dtype);
  // sent[r][q]: what rank r sends to rank q.
  std::vector<std::vector<Bytes>> sent(world);
  for (int r = 0; r < world; ++r)
    for (int q = 0; q < world; ++q)
      sent[r].push_back(snapshot(
          static_cast<const unsigned char*>(ranks[r].send) + ranks[r].send_displs[q] * elem,
          ranks[r].send_counts[q], elem));
  for (int q = 0; q < world; ++q)
    for (int r = 0; r < world; ++r)
      write(static_cast<unsigned char*>(ranks[q].recv) + ranks[q].recv_displs[r] * elem,
            sent[r][q].data(), ranks[q].recv_counts[r], elem);
}

void reduce_scatter(std::span<const ReduceScatterArgs> ranks) {
  detail::check_world_calls(ranks);
  if (ranks[0].wire.format != WireFormat::none) return compressed::reduce_scatter(ranks);
  const int world = static_cast<int>(ranks.size());
  const auto& spec = ranks[0];
  const std::size_t elem = dtype_size(spec.dtype);
  std::int64_t total = 0;
  for (auto c : spec.recv_counts) total += c;
  std::vector<Bytes> in;
  for (const auto& r : ranks) in.push_back(snapshot(r.send, total, elem));

  std::int64_t offset = 0;
  std::vector<Bytes> out(world);
  for (int q = 0; q < world; ++q) {
    const std::int64_t length = spec.recv_counts[q];
    if (length > 0)
      out[q] = fold(in, rank_order(world), offset, length, spec.dtype, spec.op, world);
    offset += length;
  }
  for (int q = 0; q < world; ++q) write(ranks[q].recv, out[q].data(), spec.recv_counts[q], elem);
}

void all_gather(std::span<const AllGatherArgs> ranks) {
  detail::check_world_calls(ranks);
  if (ranks[0].wire.format != WireFormat::none) return compressed::all_gather(ranks);
  const int world = static_cast<int>(ranks.size());
  const auto& spec = ranks[0];
  const std::size_t elem = dtype_size(spec.dtype);
  Bytes gathered;
  for (int r = 0; r < world; ++r) {
    const Bytes part = snapshot(ranks[r].send, spec.recv_counts[r], elem);
    gathered.insert(gathered.end(), part.begin(), part.end());
  }
  const std::int64_t total = static_cast<std::int64_t>(gathered.size() / elem);
  for (const auto& r : ranks) write(r.recv, gathered.data(), total, elem);
}

void broadcast(std::span<const BroadcastArgs> ranks) {
  detail::check_world_calls(ranks);
  const auto& spec = ranks[0];
  const std::size_t elem = dtype_size(spec.dtype);
  const Bytes data = snapshot(ranks[spec.root].send, spec.count, elem);
  for (const auto& r : ranks) write(r.recv, data.data(), spec.count, elem);
}

}  // namespace fusedcoll::ref
