// The global fields of every call, as exchanged at entry (docs/semantics.md, "Cross-rank
// agreement"). Enums travel as their frozen numeric values.

#include "mpi/ops.hpp"

namespace fusedcoll::mpi {

void throw_code(ErrorCode code, const std::string& message) {
  std::rethrow_exception(make_error(code, message));
}

namespace {
void encode(Record& r, const CompressionOptions& w) {
  r.i64(static_cast<std::int64_t>(w.format));
  r.i64(static_cast<std::int64_t>(w.overflow));
  r.i64(static_cast<std::int64_t>(w.scaling));
  r.i64(w.block);
  r.i64(w.pow2_scale ? 1 : 0);
  r.i64(w.predivide ? 1 : 0);
}
void decode(Reader& r, CompressionOptions& w) {
  w.format = static_cast<WireFormat>(r.i64());
  w.overflow = static_cast<Overflow>(r.i64());
  w.scaling = static_cast<Scaling>(r.i64());
  w.block = r.i64();
  w.pow2_scale = r.i64() != 0;
  w.predivide = r.i64() != 0;
}
}  // namespace

void encode(Record& r, const EmbeddingAllToAllArgs& a) {
  r.i64(a.dim);
  r.list(a.owner);
  r.list(a.batch_sizes);
  r.i64(static_cast<std::int64_t>(a.pooling));
}
void decode(Reader& r, EmbeddingAllToAllArgs& a) {
  a.dim = r.i64();
  a.owner = r.list<int>();
  a.batch_sizes = r.list<std::int64_t>();
  a.pooling = static_cast<PoolingMode>(r.i64());
}

void encode(Record& r, const GemvAllReduceArgs& a) {
  r.i64(a.m);
  r.i64(a.n);
  r.list(a.k_splits);
}
void decode(Reader& r, GemvAllReduceArgs& a) {
  a.m = r.i64();
  a.n = r.i64();
  a.k_splits = r.list<std::int64_t>();
}

void encode(Record& r, const GemmAllToAllArgs& a) {
  r.i64(a.k);
  r.i64(a.n);
  r.list(a.host);
  r.list(a.counts);
}
void decode(Reader& r, GemmAllToAllArgs& a) {
  a.k = r.i64();
  a.n = r.i64();
  a.host = r.list<int>();
  a.counts = r.list<std::int64_t>();
}

void encode(Record& r, const AllReduceArgs& a) {
  r.i64(a.count);
  r.i64(static_cast<std::int64_t>(a.dtype));
  r.i64(static_cast<std::int64_t>(a.op));
  r.i64(static_cast<std::int64_t>(a.algo));
  encode(r, a.wire);
}
void decode(Reader& r, AllReduceArgs& a) {
  a.count = r.i64();
  a.dtype = static_cast<DType>(r.i64());
  a.op = static_cast<ReduceOp>(r.i64());
  a.algo = static_cast<AllReduceAlgo>(r.i64());
  decode(r, a.wire);
}

// Counts are not global for All-to-All(v), but every rank needs its peers' to check the pairwise
// agreement and to know where its segment lands in each peer's receive area.
void encode(Record& r, const AllToAllvArgs& a) {
  r.i64(static_cast<std::int64_t>(a.dtype));
  r.list(a.send_counts);
  r.list(a.recv_counts);
  encode(r, a.wire);
}
void decode(Reader& r, AllToAllvArgs& a) {
  a.dtype = static_cast<DType>(r.i64());
  a.send_counts = r.list<std::int64_t>();
  a.recv_counts = r.list<std::int64_t>();
  decode(r, a.wire);
}

void encode(Record& r, const ReduceScatterArgs& a) {
  r.list(a.recv_counts);
  r.i64(static_cast<std::int64_t>(a.dtype));
  r.i64(static_cast<std::int64_t>(a.op));
  encode(r, a.wire);
}
void decode(Reader& r, ReduceScatterArgs& a) {
  a.recv_counts = r.list<std::int64_t>();
  a.dtype = static_cast<DType>(r.i64());
  a.op = static_cast<ReduceOp>(r.i64());
  decode(r, a.wire);
}

void encode(Record& r, const AllGatherArgs& a) {
  r.list(a.recv_counts);
  r.i64(static_cast<std::int64_t>(a.dtype));
  encode(r, a.wire);
}
void decode(Reader& r, AllGatherArgs& a) {
  a.recv_counts = r.list<std::int64_t>();
  a.dtype = static_cast<DType>(r.i64());
  decode(r, a.wire);
}

void encode(Record& r, const BroadcastArgs& a) {
  r.i64(a.count);
  r.i64(static_cast<std::int64_t>(a.dtype));
  r.i64(a.root);
}
void decode(Reader& r, BroadcastArgs& a) {
  a.count = r.i64();
  a.dtype = static_cast<DType>(r.i64());
  a.root = static_cast<int>(r.i64());
}

}  // namespace fusedcoll::mpi
