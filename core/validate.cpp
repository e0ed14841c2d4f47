// Argument validation for every op and collective. These checks are part of the definitions in
// docs/semantics.md: every backend runs them before any data moves, so a bad call fails the same
// way everywhere and names the offending value.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/gemv_allreduce.hpp"
#include "fusedcoll/detail/agreement.hpp"
#include "fusedcoll/detail/validate.hpp"

namespace fusedcoll {
namespace detail {

namespace {
/// Throws unless a view's element count and byte span (first to last element its strides reach)
/// fit in 64 bits, so that the extent and overlap arithmetic on it cannot wrap. The extents
/// and strides are the caller's, and non-negative.
void check_extent(const ConstTensorView& t, const std::string& name) {
  for (int d = 0; d < t.rank(); ++d)
    if (t.size(d) == 0) return;
  std::int64_t elements = 1, last = 0;
  for (int d = 0; d < t.rank(); ++d) {
    const auto what = [&] { return make_string(name, " ", t, ", dimension ", d); };
    elements = checked_mul(elements, t.size(d), what);
    last = checked_add(last, checked_mul(t.size(d) - 1, t.stride(d), what), what);
  }
  checked_bytes(checked_add(last, 1, name), dtype_size(t.dtype()),
                [&] { return make_string(name, " ", t, " spanning ", last + 1, " elements"); });
}
}  // namespace

void check_world(int rank, int world_size) {
  FC_ENFORCE_GE(world_size, 1, "world size must be positive");
  FC_ENFORCE(rank >= 0 && rank < world_size, "rank ", rank, " is outside [0, ", world_size, ")");
}

void check_mode(Mode mode) {
  FC_ENFORCE(mode == Mode::unfused || mode == Mode::scale_up || mode == Mode::scale_out,
             "unknown mode ", static_cast<int>(mode), " (the modes are unfused = 0, scale_up = 1, "
             "scale_out = 2)");
}

void check_matrix(const ConstTensorView& t, const std::string& name, std::int64_t rows,
                  std::int64_t cols) {
  enforce_valid(t.dtype(), name);
  FC_ENFORCE_EQ(t.dtype(), DType::f32, name, " must be f32");
  FC_ENFORCE(t.rank() == 2 && t.size(0) == rows && t.size(1) == cols, name, " has shape ", t,
             ", expected f32[", rows, ", ", cols, "]");
  check_extent(t, name);
  FC_ENFORCE(t.data() != nullptr || t.numel() == 0, name, " is a null pointer with shape ", t);
  FC_ENFORCE(cols <= 1 || t.stride(1) == 1, name, " must have unit inner stride, has ",
             t.stride(1));
  FC_ENFORCE(rows <= 1 || t.stride(0) >= cols, name, " row stride ", t.stride(0),
             " is smaller than its ", cols, " columns (rows would overlap)");
}

void check_output3(const TensorView& t, const std::string& name, std::int64_t d0, std::int64_t d1,
                   std::int64_t d2) {
  enforce_valid(t.dtype(), name);
  FC_ENFORCE_EQ(t.dtype(), DType::f32, name, " must be f32");
  FC_ENFORCE(t.rank() == 3 && t.size(0) == d0 && t.size(1) == d1 && t.size(2) == d2, name,
             " has shape ", t, ", expected f32[", d0, ", ", d1, ", ", d2, "]");
  check_extent(t, name);
  FC_ENFORCE(t.data() != nullptr || t.numel() == 0, name, " is a null pointer with shape ", t);
  FC_ENFORCE(d2 <= 1 || t.stride(2) == 1, name, " must have unit inner stride, has ", t.stride(2));
  FC_ENFORCE(d1 <= 1 || t.stride(1) >= d2, name, " stride(1) ", t.stride(1),
             " is smaller than its ", d2, " columns (elements would overlap)");
  FC_ENFORCE(d0 <= 1 || t.stride(0) >= (d1 - 1) * t.stride(1) + d2, name, " stride(0) ",
             t.stride(0), " overlaps the previous row");
}

namespace {
/// First and one-past-last byte a view can touch.
std::pair<const char*, const char*> extent(const ConstTensorView& t) {
  const auto* base = static_cast<const char*>(t.data());
  if (t.empty() || base == nullptr) return {nullptr, nullptr};
  std::int64_t last = 0;
  for (int d = 0; d < t.rank(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto elem = static_cast<std::int64_t>(dtype_size(t.dtype()));
  return {base, base + (last + 1) * elem};
}
}  // namespace

void check_disjoint(const ConstTensorView& output, const ConstTensorView& input,
                    const std::string& what) {
  const auto [o0, o1] = extent(output);
  const auto [i0, i1] = extent(input);
  FC_ENFORCE(o0 == nullptr || i0 == nullptr || o1 <= i0 || i1 <= o0, what,
             ": the output overlaps an input (", output, " at ", static_cast<const void*>(o0),
             " vs ", input, " at ", static_cast<const void*>(i0), ")");
}

namespace {

/// Reads element `i` of an i32/i64 vector view as int64.
std::int64_t index_at(const ConstTensorView& v, std::int64_t i) {
  if (v.dtype() == DType::i32) return static_cast<const std::int32_t*>(v.data())[i * v.stride(0)];
  return static_cast<const std::int64_t*>(v.data())[i * v.stride(0)];
}

void check_index_vector(const ConstTensorView& v, const std::string& name, DType dtype,
                        std::int64_t length) {
  enforce_valid(v.dtype(), name);
  FC_ENFORCE(v.dtype() == DType::i32 || v.dtype() == DType::i64, name, " must be i32 or i64, is ",
             v.dtype());
  FC_ENFORCE_EQ(v.dtype(), dtype, name, " must have the same dtype as the offsets");
  FC_ENFORCE(v.rank() == 1 && v.size(0) == length, name, " has shape ", v, ", expected [", length,
             "]");
  check_extent(v, name);
  FC_ENFORCE(v.data() != nullptr || length == 0, name, " is a null pointer with ", length,
             " elements");
  FC_ENFORCE(length <= 1 || v.stride(0) == 1, name, " must be contiguous");
}

bool present(const ConstTensorView& v) { return v.rank() != 0 || v.data() != nullptr; }

void check_sizes(const std::vector<std::int64_t>& v, const char* name, int world_size) {
  FC_ENFORCE_EQ(v.size(), static_cast<std::size_t>(world_size), name,
                " needs one entry per rank");
  for (std::size_t i = 0; i < v.size(); ++i)
    FC_ENFORCE_GE(v[i], 0, name, "[", i, "] is negative");
}

}  // namespace
}  // namespace detail

// ----------------------------------------------------------------------------------------------
// EmbeddingAllToAll

void check(const EmbeddingAllToAllArgs& args, int rank, int world_size) {
  using detail::make_string;
  detail::check_world(rank, world_size);
  FC_ENFORCE_GE(args.dim, 0, "embedding dim is negative");
  FC_ENFORCE(args.pooling == PoolingMode::sum || args.pooling == PoolingMode::mean,
             "unknown pooling mode ", static_cast<int>(args.pooling));
  detail::check_sizes(args.batch_sizes, "batch_sizes", world_size);
  const std::int64_t num_tables = static_cast<std::int64_t>(args.owner.size());
  const std::int64_t global_batch = detail::checked_sum(args.batch_sizes, "sum of batch_sizes");
  // The offsets of every table hold B + 1 entries; all ranks' outputs hold B * T * dim floats.
  detail::checked_bytes(detail::checked_add(global_batch, 1, "offsets length B + 1"),
                        sizeof(std::int64_t), "offsets length B + 1");
  detail::checked_bytes(
      detail::checked_mul(detail::checked_mul(global_batch, num_tables, "outputs B * T"), args.dim,
                          "outputs B * T * dim"),
      sizeof(float), "outputs B * T * dim");

  std::vector<std::int64_t> local_ids;
  for (std::int64_t t = 0; t < num_tables; ++t) {
    FC_ENFORCE(args.owner[t] >= 0 && args.owner[t] < world_size, "owner[", t, "] = ",
               args.owner[t], " is not a rank of a world of ", world_size);
    if (args.owner[t] == rank) local_ids.push_back(t);
  }
  FC_ENFORCE_EQ(args.local_tables.size(), local_ids.size(), "rank ", rank, " owns ",
                local_ids.size(), " tables according to `owner` but passed ",
                args.local_tables.size(), " local tables");

  for (std::size_t i = 0; i < local_ids.size(); ++i) {
    const auto& shard = args.local_tables[i];
    const std::string where = make_string("table ", local_ids[i], " (local table ", i, ")");
    const ConstTensorView& w = shard.weights;
    enforce_valid(w.dtype(), where + " weights");
    FC_ENFORCE(w.rank() == 2, where, " weights must be [rows, ", args.dim, "], got ", w);
    const std::int64_t rows = w.size(0);
    detail::check_matrix(w, where + " weights", rows, args.dim);

    enforce_valid(shard.offsets.dtype(), where + " offsets");
    const DType index_dtype = shard.offsets.dtype();
    detail::check_index_vector(shard.offsets, where + " offsets", index_dtype, global_batch + 1);
    const std::int64_t first = detail::index_at(shard.offsets, 0);
    FC_ENFORCE_EQ(first, 0, where, " offsets[0] must be 0");
    std::int64_t prev = 0;
    for (std::int64_t b = 1; b <= global_batch; ++b) {
      const std::int64_t o = detail::index_at(shard.offsets, b);
      FC_ENFORCE_GE(o, 0, where, " offsets[", b, "] = ", o, " is negative");
      FC_ENFORCE_GE(o, prev, where, " offsets[", b, "] = ", o, " < offsets[", b - 1, "] = ", prev,
                    " (offsets must be non-decreasing)");
      prev = o;
    }
    FC_ENFORCE(shard.indices.rank() == 1, where, " indices must be 1-D, got ", shard.indices);
    FC_ENFORCE_EQ(prev, shard.indices.size(0), where, " offsets[B] = offsets[", global_batch,
                  "] must equal the number of indices");
    detail::check_index_vector(shard.indices, where + " indices", index_dtype, prev);
    for (std::int64_t j = 0; j < prev; ++j) {
      const std::int64_t idx = detail::index_at(shard.indices, j);
      FC_ENFORCE(idx >= 0 && idx < rows, where, " indices[", j, "] = ", idx,
                 " is out of range [0, ", rows, ")");
    }
    if (detail::present(shard.per_sample_weights)) {
      const ConstTensorView& psw = shard.per_sample_weights;
      FC_ENFORCE(args.pooling == PoolingMode::sum, where,
                 " per_sample_weights are only allowed with sum pooling, not ",
                 to_string(args.pooling));
      enforce_valid(psw.dtype(), where + " per_sample_weights");
      FC_ENFORCE_EQ(psw.dtype(), DType::f32, where, " per_sample_weights must be f32");
      FC_ENFORCE(psw.rank() == 1 && psw.size(0) == prev, where, " per_sample_weights has shape ",
                 psw, ", expected [", prev, "] (one weight per index)");
      detail::check_extent(psw, where + " per_sample_weights");
      FC_ENFORCE(psw.data() != nullptr || prev == 0, where,
                 " per_sample_weights is a null pointer with ", prev, " elements");
      FC_ENFORCE(prev <= 1 || psw.stride(0) == 1, where, " per_sample_weights must be contiguous");
    }
  }
  detail::check_output3(args.output, make_string("output of rank ", rank),
                        args.batch_sizes[static_cast<std::size_t>(rank)], num_tables, args.dim);
  for (std::size_t i = 0; i < args.local_tables.size(); ++i) {
    const auto& shard = args.local_tables[i];
    const std::string where = make_string("output and table ", local_ids[i]);
    detail::check_disjoint(args.output, shard.weights, where + " weights");
    detail::check_disjoint(args.output, shard.offsets, where + " offsets");
    detail::check_disjoint(args.output, shard.indices, where + " indices");
    if (detail::present(shard.per_sample_weights))
      detail::check_disjoint(args.output, shard.per_sample_weights, where + " per_sample_weights");
  }
}

Status can_implement(const EmbeddingAllToAllArgs& args, int rank, int world_size) noexcept {
  return detail::status_of([&] { check(args, rank, world_size); });
}

void check_consistent(const EmbeddingAllToAllArgs& a, int rank_a, const EmbeddingAllToAllArgs& b,
                      int rank_b) {
  detail::check_agreement(a, rank_a, b, rank_b);
}

std::int64_t bytes_sent(const EmbeddingAllToAllArgs& args, int rank) {
  std::int64_t rows = 0;
  for (std::size_t q = 0; q < args.batch_sizes.size(); ++q)
    if (static_cast<int>(q) != rank) rows += args.batch_sizes[q];
  return rows * static_cast<std::int64_t>(args.local_tables.size()) * args.dim *
         static_cast<std::int64_t>(sizeof(float));
}

// ----------------------------------------------------------------------------------------------
// GemvAllReduce

void check(const GemvAllReduceArgs& args, int rank, int world_size) {
  detail::check_world(rank, world_size);
  FC_ENFORCE(args.m >= 0 && args.m <= kMaxGemvRows, "GEMV rows m = ", args.m,
             " is outside [0, ", kMaxGemvRows, "] (use a GEMM for larger batches)");
  FC_ENFORCE_GE(args.n, 0, "GEMV output features n is negative");
  detail::check_sizes(args.k_splits, "k_splits", world_size);
  // The whole W is n x sum(k_splits); x and y have m <= 16 rows of it.
  const std::int64_t k_total = detail::checked_sum(args.k_splits, "sum of k_splits");
  detail::checked_bytes(detail::checked_mul(args.n, k_total, "GEMV n * sum of k_splits"),
                        sizeof(float), "GEMV n * sum of k_splits");
  detail::checked_bytes(detail::checked_mul(args.m, k_total, "GEMV m * sum of k_splits"),
                        sizeof(float), "GEMV m * sum of k_splits");
  detail::checked_bytes(detail::checked_mul(args.m, args.n, "GEMV m * n"), sizeof(float),
                        "GEMV m * n");
  const std::int64_t k = args.k_splits[static_cast<std::size_t>(rank)];
  detail::check_matrix(args.w, "w", args.n, k);
  detail::check_matrix(args.x, "x", args.m, k);
  detail::check_matrix(args.y, "y", args.m, args.n);
  detail::check_disjoint(args.y, args.w, "y and w");
  detail::check_disjoint(args.y, args.x, "y and x");
}

Status can_implement(const GemvAllReduceArgs& args, int rank, int world_size) noexcept {
  return detail::status_of([&] { check(args, rank, world_size); });
}

void check_consistent(const GemvAllReduceArgs& a, int rank_a, const GemvAllReduceArgs& b,
                      int rank_b) {
  detail::check_agreement(a, rank_a, b, rank_b);
}

std::int64_t bytes_sent(const GemvAllReduceArgs& args, int rank) {
  const int world = static_cast<int>(args.k_splits.size());
  const std::int64_t own = chunk_of(args.n, world, rank).length;
  const std::int64_t elems = args.m * (args.n - own) + (world - 1) * args.m * own;
  return elems * static_cast<std::int64_t>(sizeof(float));
}

// ----------------------------------------------------------------------------------------------
// GemmAllToAll

void check(const GemmAllToAllArgs& args, int rank, int world_size) {
  detail::check_world(rank, world_size);
  FC_ENFORCE_GE(args.k, 0, "GEMM reduction dim k is negative");
  FC_ENFORCE_GE(args.n, 0, "GEMM output features n is negative");
  const std::size_t num_experts = args.host.size();
  FC_ENFORCE_EQ(args.counts.size(), static_cast<std::size_t>(world_size) * num_experts,
                "counts must hold P * E = ", world_size, " * ", num_experts, " entries");
  for (std::size_t i = 0; i < args.counts.size(); ++i)
    FC_ENFORCE_GE(args.counts[i], 0, "counts[source ", i / num_experts, "][expert ",
                  i % num_experts, "] is negative");
  // Every expert's W is k x n; the routed rows of all experts (each expert's A, each rank's
  // output) are at most the sum of all counts, of k and of n floats.
  detail::checked_bytes(detail::checked_mul(args.k, args.n, "GEMM k * n"), sizeof(float),
                        "GEMM k * n");
  const std::int64_t routed = detail::checked_sum(args.counts, "sum of the routing counts");
  detail::checked_bytes(detail::checked_mul(routed, args.k, "GEMM routed rows * k"),
                        sizeof(float), "GEMM routed rows * k");
  detail::checked_bytes(detail::checked_mul(routed, args.n, "GEMM routed rows * n"),
                        sizeof(float), "GEMM routed rows * n");
  std::vector<std::size_t> local_ids;
  for (std::size_t e = 0; e < num_experts; ++e) {
    FC_ENFORCE(args.host[e] >= 0 && args.host[e] < world_size, "host[", e, "] = ", args.host[e],
               " is not a rank of a world of ", world_size);
    if (args.host[e] == rank) local_ids.push_back(e);
  }
  FC_ENFORCE_EQ(args.local_experts.size(), local_ids.size(), "rank ", rank, " hosts ",
                local_ids.size(), " experts according to `host` but passed ",
                args.local_experts.size(), " local experts");
  for (std::size_t i = 0; i < local_ids.size(); ++i) {
    const std::size_t e = local_ids[i];
    std::int64_t rows = 0;
    for (int s = 0; s < world_size; ++s) rows += args.counts[s * num_experts + e];
    const std::string where = detail::make_string("expert ", e, " (local expert ", i, ")");
    const ConstTensorView& a = args.local_experts[i].a;
    FC_ENFORCE(a.rank() != 2 || a.size(0) == rows, where, " A has ", a.size(0),
               " rows but the routing counts send it sum_s c[s][", e, "] = ", rows, " rows");
    detail::check_matrix(a, where + " A", rows, args.k);
    detail::check_matrix(args.local_experts[i].w, where + " W", args.k, args.n);
  }
  detail::check_matrix(args.output, detail::make_string("output of rank ", rank),
                       output_rows(args, rank), args.n);
  for (std::size_t i = 0; i < local_ids.size(); ++i) {
    const std::string where = detail::make_string("output and expert ", local_ids[i]);
    detail::check_disjoint(args.output, args.local_experts[i].a, where + " A");
    detail::check_disjoint(args.output, args.local_experts[i].w, where + " W");
  }
}

Status can_implement(const GemmAllToAllArgs& args, int rank, int world_size) noexcept {
  return detail::status_of([&] { check(args, rank, world_size); });
}

void check_consistent(const GemmAllToAllArgs& a, int rank_a, const GemmAllToAllArgs& b,
                      int rank_b) {
  detail::check_agreement(a, rank_a, b, rank_b);
}

std::int64_t output_rows(const GemmAllToAllArgs& args, int rank) {
  const std::size_t num_experts = args.host.size();
  std::int64_t rows = 0;
  for (std::size_t e = 0; e < num_experts; ++e)
    rows += args.counts[static_cast<std::size_t>(rank) * num_experts + e];
  return rows;
}

std::int64_t bytes_sent(const GemmAllToAllArgs& args, int rank) {
  const std::size_t num_experts = args.host.size();
  const std::size_t world = num_experts ? args.counts.size() / num_experts : 0;
  std::int64_t rows = 0;
  for (std::size_t e = 0; e < num_experts; ++e) {
    if (args.host[e] != rank) continue;
    for (std::size_t s = 0; s < world; ++s)
      if (static_cast<int>(s) != rank) rows += args.counts[s * num_experts + e];
  }
  return rows * args.n * static_cast<std::int64_t>(sizeof(float));
}

// ----------------------------------------------------------------------------------------------
// Collectives

Chunk chunk_of(std::int64_t count, int parts, int c) {
  FC_ENFORCE_GE(parts, 1, "chunk_of needs at least one part");
  FC_ENFORCE(c >= 0 && c < parts, "chunk ", c, " is outside [0, ", parts, ")");
  const std::int64_t base = count / parts;
  const std::int64_t rem = count % parts;
  return {c * base + std::min<std::int64_t>(c, rem), base + (c < rem ? 1 : 0)};
}

AllToAllvArgs make_alltoall(const void* send, void* recv, std::int64_t count, DType dtype,
                            int world_size) {
  FC_ENFORCE_GE(world_size, 1, "world size must be positive");
  FC_ENFORCE_GE(count, 0, "All-to-All count is negative");
  detail::checked_mul(count, world_size, "make_alltoall count * world_size");
  AllToAllvArgs args;
  args.send = send;
  args.recv = recv;
  args.dtype = dtype;
  for (int q = 0; q < world_size; ++q) {
    args.send_counts.push_back(count);
    args.recv_counts.push_back(count);
    args.send_displs.push_back(q * count);
    args.recv_displs.push_back(q * count);
  }
  return args;
}

namespace detail {
namespace {

void check_reducible(DType dtype, ReduceOp op) {
  enforce_valid(dtype, "reduction");
  FC_ENFORCE(op == ReduceOp::sum || op == ReduceOp::avg || op == ReduceOp::min ||
                 op == ReduceOp::max,
             "unknown reduction op ", static_cast<int>(op));
  if (dtype != DType::f32 && dtype != DType::i32 && dtype != DType::i64)
    throw UnsupportedError(make_string("reductions on ", dtype,
                                       " are not supported (f32, i32 and i64 are; compressed "
                                       "wire formats reduce in f32)"));
}

/// A byte range [begin, end) for overlap tests.
struct Range {
  const char* begin;
  const char* end;
};

/// Throws unless the elements [displ, displ + count) of an All-to-All(v) buffer have byte offsets
/// that fit in 64 bits (a displacement near 2^62 would otherwise wrap to the buffer's start).
void check_segment(std::int64_t displ, std::int64_t count, std::size_t elem, const char* side,
                   int q) {
  const auto what = [&] {
    return make_string("All-to-All ", side, "_displs[", q, "] + ", side, "_counts[", q, "] (",
                       displ, " + ", count, ")");
  };
  checked_bytes(checked_add(displ, count, what), elem, what);
}

bool overlaps(Range a, Range b) {
  return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end;
}

Range range_of(const void* p, std::int64_t offset, std::int64_t count, std::size_t elem) {
  const char* base = static_cast<const char*>(p) + offset * static_cast<std::int64_t>(elem);
  return {base, base + count * static_cast<std::int64_t>(elem)};
}

void check_buffer(const void* p, std::int64_t count, const char* name) {
  FC_ENFORCE(p != nullptr || count == 0, name, " is a null pointer with ", count, " elements");
}

/// Wire compression is defined for f32 data only: the codecs convert from and to f32.
void check_wire(const CompressionOptions& wire, DType dtype, const char* op) {
  check(wire);
  if (wire.format != WireFormat::none)
    FC_ENFORCE_EQ(dtype, DType::f32, op, " with wire compression ", to_string(wire.format),
                  " needs f32 data");
}


}  // namespace
}  // namespace detail

void check(const AllReduceArgs& args, int rank, int world_size) {
  detail::check_world(rank, world_size);
  FC_ENFORCE_GE(args.count, 0, "AllReduce count is negative");
  detail::check_reducible(args.dtype, args.op);
  detail::check_wire(args.wire, args.dtype, "AllReduce");
  FC_ENFORCE(args.algo == AllReduceAlgo::direct || args.algo == AllReduceAlgo::ring ||
                 args.algo == AllReduceAlgo::chain,
             "unknown AllReduce algorithm ", static_cast<int>(args.algo));
  detail::checked_bytes(args.count, dtype_size(args.dtype), "AllReduce count");
  detail::check_buffer(args.send, args.count, "AllReduce send buffer");
  detail::check_buffer(args.recv, args.count, "AllReduce recv buffer");
  const std::size_t elem = dtype_size(args.dtype);
  FC_ENFORCE(args.send == args.recv ||
                 !detail::overlaps(detail::range_of(args.send, 0, args.count, elem),
                                   detail::range_of(args.recv, 0, args.count, elem)),
             "AllReduce send and recv buffers overlap without being identical (in place)");
}

void check(const AllToAllvArgs& args, int rank, int world_size) {
  detail::check_world(rank, world_size);
  enforce_valid(args.dtype, "All-to-All");
  detail::check_wire(args.wire, args.dtype, "All-to-All");
  detail::check_sizes(args.send_counts, "send_counts", world_size);
  detail::check_sizes(args.recv_counts, "recv_counts", world_size);
  detail::check_sizes(args.send_displs, "send_displs", world_size);
  detail::check_sizes(args.recv_displs, "recv_displs", world_size);
  FC_ENFORCE_EQ(args.send_counts[rank], args.recv_counts[rank], "rank ", rank, " sends ",
                args.send_counts[rank], " elements to itself but expects ",
                args.recv_counts[rank]);
  const std::size_t elem = dtype_size(args.dtype);
  for (int q = 0; q < world_size; ++q) {
    detail::check_segment(args.send_displs[q], args.send_counts[q], elem, "send", q);
    detail::check_segment(args.recv_displs[q], args.recv_counts[q], elem, "recv", q);
  }
  const std::int64_t total_send = detail::checked_sum(args.send_counts, "sum of send_counts");
  const std::int64_t total_recv = detail::checked_sum(args.recv_counts, "sum of recv_counts");
  detail::check_buffer(args.send, total_send, "All-to-All send buffer");
  detail::check_buffer(args.recv, total_recv, "All-to-All recv buffer");
  for (int q = 0; q < world_size; ++q) {
    const auto rq = detail::range_of(args.recv, args.recv_displs[q], args.recv_counts[q], elem);
    for (int p = 0; p < world_size; ++p) {
      FC_ENFORCE(!detail::overlaps(
                     rq, detail::range_of(args.send, args.send_displs[p], args.send_counts[p], elem)),
                 "All-to-All recv region of rank ", q, " overlaps the send region for rank ", p);
      if (p < q)
        FC_ENFORCE(!detail::overlaps(rq, detail::range_of(args.recv, args.recv_displs[p],
                                                          args.recv_counts[p], elem)),
                   "All-to-All recv regions of ranks ", p, " and ", q, " overlap");
    }
  }
}

namespace detail {
namespace {
std::int64_t offset_of(const std::vector<std::int64_t>& counts, int rank) {
  std::int64_t off = 0;
  for (int q = 0; q < rank; ++q) off += counts[q];
  return off;
}
}  // namespace
}  // namespace detail

void check(const ReduceScatterArgs& args, int rank, int world_size) {
  detail::check_world(rank, world_size);
  detail::check_reducible(args.dtype, args.op);
  detail::check_wire(args.wire, args.dtype, "ReduceScatter");
  detail::check_sizes(args.recv_counts, "recv_counts", world_size);
  const std::size_t elem = dtype_size(args.dtype);
  const std::int64_t total = detail::checked_sum(args.recv_counts, "sum of recv_counts");
  detail::checked_bytes(total, elem, "sum of recv_counts");
  const std::int64_t mine = args.recv_counts[static_cast<std::size_t>(rank)];
  detail::check_buffer(args.send, total, "ReduceScatter send buffer");
  detail::check_buffer(args.recv, mine, "ReduceScatter recv buffer");
  const auto in_place = detail::range_of(args.send, detail::offset_of(args.recv_counts, rank), 0, elem);
  FC_ENFORCE(in_place.begin == static_cast<const char*>(args.recv) ||
                 !detail::overlaps(detail::range_of(args.send, 0, total, elem),
                                   detail::range_of(args.recv, 0, mine, elem)),
             "ReduceScatter recv buffer overlaps the send buffer but is not its own chunk "
             "(in place needs recv == send + offset(rank))");
}

void check(const AllGatherArgs& args, int rank, int world_size) {
  detail::check_world(rank, world_size);
  enforce_valid(args.dtype, "AllGather");
  detail::check_wire(args.wire, args.dtype, "AllGather");
  detail::check_sizes(args.recv_counts, "recv_counts", world_size);
  const std::size_t elem = dtype_size(args.dtype);
  const std::int64_t total = detail::checked_sum(args.recv_counts, "sum of recv_counts");
  detail::checked_bytes(total, elem, "sum of recv_counts");
  const std::int64_t mine = args.recv_counts[static_cast<std::size_t>(rank)];
  detail::check_buffer(args.send, mine, "AllGather send buffer");
  detail::check_buffer(args.recv, total, "AllGather recv buffer");
  const auto in_place = detail::range_of(args.recv, detail::offset_of(args.recv_counts, rank), 0, elem);
  FC_ENFORCE(in_place.begin == static_cast<const char*>(args.send) ||
                 !detail::overlaps(detail::range_of(args.send, 0, mine, elem),
                                   detail::range_of(args.recv, 0, total, elem)),
             "AllGather send buffer overlaps the recv buffer but is not this rank's slot "
             "(in place needs send == recv + offset(rank))");
}

void check(const BroadcastArgs& args, int rank, int world_size) {
  detail::check_world(rank, world_size);
  enforce_valid(args.dtype, "Broadcast");
  FC_ENFORCE_GE(args.count, 0, "Broadcast count is negative");
  FC_ENFORCE(args.root >= 0 && args.root < world_size, "Broadcast root ", args.root,
             " is not a rank of a world of ", world_size);
  const std::size_t elem = dtype_size(args.dtype);
  detail::checked_bytes(args.count, elem, "Broadcast count");
  if (rank == args.root) {
    detail::check_buffer(args.send, args.count, "Broadcast send buffer (root)");
    FC_ENFORCE(args.send == args.recv ||
                   !detail::overlaps(detail::range_of(args.send, 0, args.count, elem),
                                     detail::range_of(args.recv, 0, args.count, elem)),
               "Broadcast send and recv buffers overlap without being identical (in place)");
  }
  detail::check_buffer(args.recv, args.count, "Broadcast recv buffer");
}

Status can_implement(const AllReduceArgs& a, int r, int p) noexcept {
  return detail::status_of([&] { check(a, r, p); });
}
Status can_implement(const AllToAllvArgs& a, int r, int p) noexcept {
  return detail::status_of([&] { check(a, r, p); });
}
Status can_implement(const ReduceScatterArgs& a, int r, int p) noexcept {
  return detail::status_of([&] { check(a, r, p); });
}
Status can_implement(const AllGatherArgs& a, int r, int p) noexcept {
  return detail::status_of([&] { check(a, r, p); });
}
Status can_implement(const BroadcastArgs& a, int r, int p) noexcept {
  return detail::status_of([&] { check(a, r, p); });
}


void check_consistent(const AllReduceArgs& a, int rank_a, const AllReduceArgs& b, int rank_b) {
  detail::check_agreement(a, rank_a, b, rank_b);
}

void check_consistent(const AllToAllvArgs& a, int rank_a, const AllToAllvArgs& b, int rank_b) {
  detail::check_agreement(a, rank_a, b, rank_b);
}

void check_consistent(const ReduceScatterArgs& a, int rank_a, const ReduceScatterArgs& b,
                      int rank_b) {
  detail::check_agreement(a, rank_a, b, rank_b);
}

void check_consistent(const AllGatherArgs& a, int rank_a, const AllGatherArgs& b, int rank_b) {
  detail::check_agreement(a, rank_a, b, rank_b);
}

void check_consistent(const BroadcastArgs& a, int rank_a, const BroadcastArgs& b, int rank_b) {
  detail::check_agreement(a, rank_a, b, rank_b);
}

}  // namespace fusedcoll
