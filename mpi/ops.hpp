#pragma once
// The MPI backend's operators and the prologue they share (`enter`): a rank's call is checked,
// its global fields are serialised and exchanged with every rank, and every rank runs the same
// `check_consistent` on every pair, so that a bad or mismatched call is reported on every rank
// before any data moves (docs/semantics.md, "Cross-rank agreement").
//
// Which fields are global is said once, in detail/agreement.hpp; it drives both the encoding
// here (agree.cpp) and `check_consistent`.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/detail/collective_plan.hpp"
#include "fusedcoll/detail/schedule.hpp"
#include "mpi/runtime.hpp"
#include "fusedcoll/detail/validate.hpp"

namespace fusedcoll::mpi {

/// A flat record of the fields every rank must agree on.
class Record {
 public:
  void i64(std::int64_t v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    i64(static_cast<std::int64_t>(s.size()));
    bytes_ += s;
  }
  template <class T>
  void list(const std::vector<T>& v) {
    i64(static_cast<std::int64_t>(v.size()));
    for (const T& x : v) i64(static_cast<std::int64_t>(x));
  }
  const std::string& bytes() const noexcept { return bytes_; }

 private:
  std::string bytes_;
};

/// Reads a `Record` back; a truncated record is an internal error (ranks run the same code).
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  std::int64_t i64() {
    std::int64_t v = 0;
    FC_CHECK_INTERNAL(pos_ + sizeof v <= bytes_.size(), "truncated argument record");
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = static_cast<std::size_t>(i64());
    FC_CHECK_INTERNAL(pos_ + n <= bytes_.size(), "truncated argument record");
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <class T>
  std::vector<T> list() {
    const auto n = static_cast<std::size_t>(i64());
    FC_CHECK_INTERNAL(n <= bytes_.size(), "corrupt argument record");
    std::vector<T> v(n);
    for (auto& x : v) x = static_cast<T>(i64());
    return v;
  }

 private:
  const std::string& bytes_;
  std::size_t pos_ = 0;
};

/// Appends the global fields of `a` (detail/agreement.hpp) to `r` (agree.cpp, instantiated for
/// every Args).
template <class Args>
void encode(Record& r, const Args& a);
/// Reads what `encode` wrote into `a`; fills only the global fields.
template <class Args>
void decode(Reader& r, Args& a);

/// Memory a rank receives into, as it offers it to its peers for zero-copy puts: the bytes
/// [p, p + bytes) (none when `bytes` is 0) and the `layout` the peers need to address it (receive
/// displacements, strides).
struct Region {
  const void* p = nullptr;
  std::size_t bytes = 0;
  std::vector<std::int64_t> layout;
  /// Where the transport lands anywhere (p2p), peers may put into it even when it is ordinary
  /// memory (Runtime::bind_call_buffer): for receive buffers that the call writes only where
  /// peers' data lands.
  bool any_memory = false;
};

/// Where a rank's Region lies: inside one of its SymmetricBuffers (`id`, byte `offset`), with
/// the Region's `layout`; `id` -1 for ordinary memory, which peers cannot put into.
struct Landing {
  int id = -1;
  std::int64_t offset = 0;
  std::vector<std::int64_t> layout;
};

/// The Region of a (valid, f32) operator output: its span, and every stride but the last.
inline Region output_region(const TensorView& o) {
  Region r{o.data(), 0, {}};
  std::int64_t last = 0;
  for (int d = 0; d < o.rank(); ++d) {
    if (o.size(d) == 0) return {};
    last += (o.size(d) - 1) * o.stride(d);
    if (d + 1 < o.rank()) r.layout.push_back(o.stride(d));
  }
  r.bytes = static_cast<std::size_t>(last + 1) * sizeof(float);
  return r;
}

/// Throws the `Error` subclass of `code` with `message`, the same kind on every rank.
[[noreturn]] void throw_code(ErrorCode code, const std::string& message);

namespace internal {
template <class Args>
std::vector<Args> enter(Runtime& rt, const std::string& op, const Mode* mode, const Args& args,
                        std::vector<Landing>* land, const std::function<Region()>& region);
}  // namespace internal

/// The prologue of every call. Returns every rank's global fields (index = rank); local views in
/// them are empty. With `land`, it also returns where every rank receives: `region()` is this
/// rank's Region, asked only once its call has passed `check`, and each rank looks it up among
/// its SymmetricBuffers (rank-local information, not checked for agreement).
template <class Args>
std::vector<Args> enter(Runtime& rt, const std::string& op, const Args& args,
                        std::vector<Landing>* land = nullptr,
                        const std::function<Region()>& region = {}) {
  return internal::enter(rt, op, nullptr, args, land, region);
}

/// `enter` for a fused operator in `mode`. The call's name holds the mode, so ranks calling
/// different modes fail as a call mismatch; an unknown mode is checked with the rest of the call,
/// so that it too is reported on every rank and leaves the communicator usable.
template <class Args>
std::vector<Args> enter(Runtime& rt, const char* op, Mode mode, const Args& args,
                        std::vector<Landing>* land = nullptr,
                        const std::function<Region()>& region = {}) {
  const std::string name = detail::make_string(
      op, " ", mode == Mode::unfused || mode == Mode::scale_up || mode == Mode::scale_out
                   ? to_string(mode)
                   : detail::make_string("mode ", static_cast<int>(mode)));
  return internal::enter(rt, name, &mode, args, land, region);
}

template <class Args>
std::vector<Args> internal::enter(Runtime& rt, const std::string& op, const Mode* mode,
                                  const Args& args, std::vector<Landing>* land,
                                  const std::function<Region()>& region) {
  rt.begin_call();
  rt.trace_call(op);
  rt.set_agreement(true);
  rt.set_activity("in " + op + " (exchanging arguments)");
  const int me = rt.rank(), P = rt.size();
  const Status own = detail::status_of([&] {
    enforce_env();
    if (mode) detail::check_mode(*mode);
    check(args, me, P);
  });
  Record rec;
  rec.str(op);
  rec.i64(static_cast<std::int64_t>(own.code));
  rec.str(own.message);
  if (own.ok()) {
    encode(rec, args);
    const Region mine = region ? region() : Region{};
    Runtime::Landing l = mine.bytes > 0 ? rt.find_buffer(mine.p, mine.bytes)
                                        : Runtime::Landing{};
    if (l.id < 0 && mine.bytes > 0 && mine.any_memory && rt.transport().lands_anywhere()) {
      // Before the exchange: no peer puts into it before it is bound.
      rt.bind_call_buffer(const_cast<void*>(mine.p), mine.bytes);
      l = {Runtime::kCallBuffer, 0};
    }
    rec.i64(l.id);
    if (l.id >= 0) {
      rec.i64(static_cast<std::int64_t>(l.offset));
      rec.list(mine.layout);
    }
  }
  const std::vector<std::string> records = [&] {
    const Runtime::Span span(rt, "exchange arguments");
    return rt.exchange(rec.bytes());
  }();

  std::vector<Args> all(static_cast<std::size_t>(P));
  std::vector<std::string> names(static_cast<std::size_t>(P));
  std::vector<Status> status(static_cast<std::size_t>(P));
  std::vector<Reader> readers;
  readers.reserve(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    readers.emplace_back(records[r]);
    names[r] = readers[r].str();
    status[r].code = static_cast<ErrorCode>(readers[r].i64());
    status[r].message = readers[r].str();
  }
  // Every rank walks the records in the same order, so every rank reports the same problem.
  for (int r = 1; r < P; ++r)
    if (names[r] != names[0])
      throw InvalidArgument(
          detail::make_string("fusedcoll mpi: collective call mismatch: rank 0 called '", names[0],
                              "' but rank ", r, " called '", names[r], "'"));
  for (int r = 0; r < P; ++r)
    if (!status[r].ok()) {
      if (r == me) throw_code(own.code, own.message);
      throw_code(status[r].code, detail::make_string("fusedcoll mpi: rank ", r, "'s call to ", op,
                                                     " is invalid: ", status[r].message));
    }
  if (land) land->assign(static_cast<std::size_t>(P), Landing{});
  for (int r = 0; r < P; ++r) {
    decode(readers[r], all[r]);
    Landing l;
    l.id = static_cast<int>(readers[r].i64());
    if (l.id >= 0) {
      l.offset = readers[r].i64();
      l.layout = readers[r].list<std::int64_t>();
    }
    if (land) (*land)[static_cast<std::size_t>(r)] = std::move(l);
  }
  detail::check_all_agree(P, [&](int r) -> const Args& { return all[r]; });
  rt.set_agreement(false);
  rt.set_activity("in " + op);
  return all;
}

using fusedcoll::detail::ceil_div;
using fusedcoll::detail::remote_first;

/// Bytes of `n` floats.
inline std::size_t fbytes(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); }

/// memcpy that tolerates empty copies with null pointers (UBSan rejects memcpy(nullptr, _, 0)),
/// and sidesteps a 4K-aliasing slowdown of glibc's memcpy: when the destination lies 1 to 15 bytes
/// above the source modulo 4096 (a page-aligned window region and a malloc'ed buffer sit 8 bytes
/// apart that way), copying 512 KiB took 150 us instead of 10 us on this machine's Zen 4 (a
/// standalone loop over the skews; 16 and more were fast). Such copies go through an L1-resident
/// bounce buffer half a page away from both: 23 us. Other skews copy directly.
inline void copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n == 0) return;
  constexpr std::size_t kPage = 4096, kChunk = 2048;
  const std::size_t skew =
      (reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) & (kPage - 1);
  if (n < 16 * kChunk || skew == 0 || skew >= 16) {
    std::memcpy(dst, src, n);
    return;
  }
  alignas(kPage) static thread_local unsigned char bounce[2 * kPage + kChunk];
  const std::size_t at = (reinterpret_cast<std::uintptr_t>(src) + kChunk) & (kPage - 1);
  unsigned char* b = bounce + at;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (std::size_t done = 0; done < n; done += kChunk) {
    const std::size_t len = std::min(kChunk, n - done);
    std::memcpy(b, s + done, len);
    std::memcpy(d + done, b, len);
  }
}

/// Elements folded per workgroup: the fold is element-wise, so pieces split it freely.
constexpr std::int64_t kFoldPiece = 1 << 15;

/// `put(q)` issues this rank's puts to each of `peers` (in the plan's communication-aware
/// order); then `slot + me` is signalled on q. Peers are spread over the workgroups when `bytes`
/// (the total) is worth waking them for; a single workgroup signals every peer after its last put
/// with one pair of MPI_Win_flush_all calls instead of two flushes per peer (each a trip through
/// Open MPI's progress loop, which yields the core when ranks outnumber cores). `sources`: kept
/// where the puts' sources stay untouched until the call ends (the signal then need not wait for
/// the peer to take the data: Runtime::signal).
template <class Put>
void put_each(Runtime& rt, std::size_t bytes, int slot, const std::vector<int>& peers, Put&& put,
              Runtime::Sources sources = Runtime::Sources::reused) {
  const int me = rt.rank(), n = static_cast<int>(peers.size());
  if (n == 0) return;
  const int grid = rt.grid_for_bytes(bytes, static_cast<std::size_t>(n));
  if (grid == 1) {
    for (int q : peers) put(q);
    rt.signal_all(peers, slot + me, 1, sources);
    return;
  }
  rt.launch(grid, [&](int w) {
    for (int j = w; j < n; j += grid) {
      put(peers[j]);
      rt.signal(peers[j], slot + me, 1, sources);
    }
  });
}

/// Puts `bytes` at `src` into region offset `offset` of each of `peers` and signals `slot + me`
/// there (put_each, with its `sources`).
void put_to(Runtime& rt, const std::vector<int>& peers, std::size_t offset, const void* src,
            std::size_t bytes, int slot, Runtime::Sources sources = Runtime::Sources::reused);

/// Waits for one signal on `slot + p` from each of `peers`.
void wait_from(Runtime& rt, int slot, const std::vector<int>& peers, const char* what);

/// The peers of a whole-segment plan's items (Tiling::segments: one item per peer), in the plan's
/// order, this rank left out.
std::vector<int> peers_of(const std::vector<detail::collective::Item>& items, int me);

/// Offsets of `counts` laid end to end (`counts.size() + 1` entries).
std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts);

/// `acc = v(0); acc = acc op v(p)` for p = 1..P-1, then the average's division: the `direct`
/// order, `count` elements, in pieces spread over the workgroups.
void fold_rank_order(Runtime& rt, void* acc, std::int64_t count, DType dtype, ReduceOp op,
                     const std::function<const void*(int)>& v);

/// The host structure of the communicator (detail/collective_plan.hpp), from
/// `Runtime::host_of`: the same on every rank.
using detail::collective::Topology;
Topology topology(const Runtime& rt);

/// Whether the direct AllReduce runs as a chain of host segments: FUSEDCOLL_MPI_HIERARCHY, or by
/// default when the chain moves less over the busiest host link than the flat schedule.
bool chain_all_reduce(const Runtime& rt, const Topology& t);

/// Whether finished results go once to each other host (one relay rank there forwards them to its
/// host's ranks) instead of to every rank: FUSEDCOLL_MPI_HIERARCHY, or by default when ranks span
/// hosts and some host has several.
bool relay_results(const Runtime& rt, const Topology& t);

/// What one AllReduce folds along the chain of host segments (collectives.cpp, `run_chain`): the
/// schedule (segments, pieces, carriers, relays, pipelining) is the same for the plain and the
/// compressed wire; these say what travels and how a carrier folds.
struct ChainFold {
  /// Bytes per element of a rank's own values, which go to its segment's carrier of a piece.
  std::size_t value_size = 0;
  /// Bytes per element of a running value (between segments) and of a finished piece.
  std::size_t wire_size = 0;
  /// This rank's values (`value_size` each), indexed like the buffer.
  const void* own = nullptr;
  /// A carrier folds piece `p` of its segment, ranks [first, end): `in` is the running value
  /// from the previous segment (null in segment 0), `value(m)` rank m's values of the piece. Into
  /// `out` goes the running value for the next segment or, when `last` (the last segment), the
  /// finished piece, and then this rank's result of the piece into its receive buffer.
  std::function<void(const Chunk& p, const char* in, const std::function<const char*(int)>& value,
                     int first, int end, bool last, char* out)>
      carry;
  /// Any other rank: its result of piece `p` from the finished piece `fin`.
  std::function<void(const Chunk& p, const char* fin)> deliver;
};

/// The AllReduce of `count` elements as a chain of host segments (docs/mpi.md, "Across hosts"),
/// every element folded in rank order; `key` names its slots and waits.
void run_chain(Runtime& rt, const Topology& t, std::int64_t count, const ChainFold& f,
               const std::string& key);

/// EmbeddingAllToAll's pooling work for Runtime::compute_seconds_per: seconds per element
/// gathered (every local bag of the global batch, whatever the mode), which scale-out's tile order
/// weighs against its wire time.
inline constexpr const char* kEmbeddingPoolWork = "embedding pool";

void embedding_alltoall(Runtime& rt, const EmbeddingAllToAllArgs& args, Mode mode);
void gemv_allreduce(Runtime& rt, const GemvAllReduceArgs& args, Mode mode);
void gemm_alltoall(Runtime& rt, const GemmAllToAllArgs& args, Mode mode);
void all_reduce(Runtime& rt, const AllReduceArgs& args);
void all_to_allv(Runtime& rt, const AllToAllvArgs& args);
void reduce_scatter(Runtime& rt, const ReduceScatterArgs& args);
void all_gather(Runtime& rt, const AllGatherArgs& args);
void broadcast(Runtime& rt, const BroadcastArgs& args);

// The compressed-wire collectives (compressed.cpp), called after `enter` when `wire.format` is
// not `none`; `all` is enter's result.
void all_reduce_wire(Runtime& rt, const AllReduceArgs& args);
void reduce_scatter_wire(Runtime& rt, const ReduceScatterArgs& args);
void all_gather_wire(Runtime& rt, const AllGatherArgs& args);
void all_to_allv_wire(Runtime& rt, const AllToAllvArgs& args, const std::vector<AllToAllvArgs>& all);

}  // namespace fusedcoll::mpi
