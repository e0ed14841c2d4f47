#pragma once
/// @file
/// The standalone collectives: AllReduce, All-to-All(v), ReduceScatter, AllGather, Broadcast.
///
/// Buffers are raw pointers plus element counts, NCCL-style, so any allocation can take part.
/// Counts and displacements are in elements of `dtype`. The reduction order of every collective is
/// pinned in docs/semantics.md ("Collectives"); every backend reproduces it bit for bit.

#include <cstdint>
#include <vector>

#include "fusedcoll/compression.hpp"
#include "fusedcoll/dtype.hpp"
#include "fusedcoll/error.hpp"

namespace fusedcoll {

/// Element-wise reduction.
enum class ReduceOp : std::uint8_t {
  sum = 0,  ///< Sum in the algorithm's pinned order; integers wrap around (two's complement).
  avg = 1,  ///< The `sum`, then divided by the number of ranks (integers: truncating division).
  min = 2,  ///< Smallest; a NaN operand makes the result NaN.
  max = 3,  ///< Largest; a NaN operand makes the result NaN.
};

/// Name of a reduction ("sum", "avg", "min", "max").
constexpr const char* to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
  }
  return "invalid";
}

/// AllReduce algorithm; it decides the order in which the ranks' values are combined.
enum class AllReduceAlgo : std::uint8_t {
  /// Reduce-scatter by owner chunk, then all-gather. Every element is combined in rank order:
  /// ((v0 + v1) + v2) + ...
  direct = 0,
  /// Ring reduce-scatter, then ring all-gather. Chunk `c` (owner `c`) is combined starting at rank
  /// `c + 1` around the ring: ((v_{c+1} + v_{c+2}) + ...) + v_c (indices mod P).
  ring = 1,
  /// A chain in rank order: every element's running value passes rank 0, 1, ..., P - 1, which
  /// adds its own value. Uncompressed, the same order and bits as `direct`. With a compressed
  /// wire the running value (not each contribution) is encoded at every step, as in `ring`, so
  /// a network link between two groups of consecutive ranks carries each element once each way
  /// (docs/semantics.md, "Compressed collectives").
  chain = 2,
};

/// Name of an algorithm ("direct", "ring" or "chain").
constexpr const char* to_string(AllReduceAlgo a) noexcept {
  switch (a) {
    case AllReduceAlgo::direct: return "direct";
    case AllReduceAlgo::ring: return "ring";
    case AllReduceAlgo::chain: return "chain";
  }
  return "invalid";
}

/// AllReduce of `count` elements. In place when `send == recv`; otherwise the buffers must not
/// overlap. Reductions run on f32, i32 and i64; another valid dtype is `UnsupportedError` (the
/// 16- and 8-bit formats are wire formats: compressed collectives reduce in f32).
///
/// `wire` compresses what travels between ranks (f32 data only; docs/compression.md pins each
/// algorithm's encode/decode points). The default, `WireFormat::none`, is the plain collective.
struct AllReduceArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::int64_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  AllReduceAlgo algo = AllReduceAlgo::direct;
  CompressionOptions wire{};  ///< global: identical on every rank
};

/// All-to-All with per-peer counts (MPI_Alltoallv). Rank `r` sends
/// `send[send_displs[q] .. + send_counts[q])` to rank `q`, which stores it at
/// `recv[recv_displs[r] .. + recv_counts[r])`; so `send_counts[q]` on `r` must equal
/// `recv_counts[r]` on `q`. Any dtype (bytes are moved, not interpreted). Send and receive regions
/// must not overlap.
struct AllToAllvArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<std::int64_t> send_counts;  ///< [P]
  std::vector<std::int64_t> send_displs;  ///< [P]
  std::vector<std::int64_t> recv_counts;  ///< [P]
  std::vector<std::int64_t> recv_displs;  ///< [P]
  DType dtype = DType::f32;
  /// Wire compression (f32 only): every segment, the self-segment included, arrives as
  /// `decode(encode(x))`.
  CompressionOptions wire{};
};

/// The equal-count All-to-All: `count` elements to and from every rank, packed by peer.
AllToAllvArgs make_alltoall(const void* send, void* recv, std::int64_t count, DType dtype,
                            int world_size);

/// ReduceScatter: every rank contributes `sum(recv_counts)` elements; rank `q` receives the
/// reduction of chunk `q` (offset `sum(recv_counts[0..q))`, length `recv_counts[q]`), combined in
/// rank order. In place when `recv == send + offset(rank)`.
struct ReduceScatterArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<std::int64_t> recv_counts;  ///< [P], uneven allowed
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  /// Wire compression (f32 only): contributions are encoded by their senders and reduced in f32;
  /// the owner's result is not re-encoded.
  CompressionOptions wire{};
};

/// AllGather (allgatherv): rank `r` contributes `recv_counts[r]` elements, and every rank receives
/// all contributions concatenated in rank order. In place when `send == recv + offset(rank)`.
/// Any dtype.
struct AllGatherArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<std::int64_t> recv_counts;  ///< [P], uneven allowed
  DType dtype = DType::f32;
  /// Wire compression (f32 only): every contribution, this rank's included, arrives as
  /// `decode(encode(x))`.
  CompressionOptions wire{};
};

/// Broadcast of `count` elements from `root`'s `send` into every rank's `recv` (the root's too,
/// in place when `send == recv`). `send` is read only on the root. Any dtype.
struct BroadcastArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::int64_t count = 0;
  DType dtype = DType::f32;
  int root = 0;
};

/// Chunk `c` of `count` elements split into `parts` contiguous chunks: the first `count % parts`
/// chunks hold one element more. Returns {offset, length}. Used by `direct` and `ring`.
struct Chunk {
  std::int64_t offset = 0;
  std::int64_t length = 0;
};
Chunk chunk_of(std::int64_t count, int parts, int c);

/// Throw `InvalidArgument` (naming the offending value) unless the call is valid for `rank`.
void check(const AllReduceArgs& args, int rank, int world_size);
void check(const AllToAllvArgs& args, int rank, int world_size);
void check(const ReduceScatterArgs& args, int rank, int world_size);
void check(const AllGatherArgs& args, int rank, int world_size);
void check(const BroadcastArgs& args, int rank, int world_size);

/// Non-throwing forms of `check`.
Status can_implement(const AllReduceArgs& args, int rank, int world_size) noexcept;
Status can_implement(const AllToAllvArgs& args, int rank, int world_size) noexcept;
Status can_implement(const ReduceScatterArgs& args, int rank, int world_size) noexcept;
Status can_implement(const AllGatherArgs& args, int rank, int world_size) noexcept;
Status can_implement(const BroadcastArgs& args, int rank, int world_size) noexcept;

/// Throw `InvalidArgument` unless the calls of two ranks fit together (equal counts, dtype, op,
/// algorithm, root, wire compression; matching send/receive counts for All-to-All(v)).
void check_consistent(const AllReduceArgs& a, int rank_a, const AllReduceArgs& b, int rank_b);
void check_consistent(const AllToAllvArgs& a, int rank_a, const AllToAllvArgs& b, int rank_b);
void check_consistent(const ReduceScatterArgs& a, int rank_a, const ReduceScatterArgs& b, int rank_b);
void check_consistent(const AllGatherArgs& a, int rank_a, const AllGatherArgs& b, int rank_b);
void check_consistent(const BroadcastArgs& a, int rank_a, const BroadcastArgs& b, int rank_b);

}  // namespace fusedcoll
