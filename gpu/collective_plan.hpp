#pragma once
// The GPU backend's collectives as data: for every rank, a list of steps (work items) that the
// one persistent kernel of gpu/collectives.cpp deals out to the rank's blocks, each step reading
// its sources element by element, folding them in the pinned order (docs/semantics.md,
// "Collectives"), and writing its targets, with at most one wait before it and a signal per
// target after it. The steps are a translation of the shared plans (detail/collective_plan.hpp:
// tiles, owner parts, ring steps, chain order, exchanges, remote-first orders; Tiling::gpu), which
// the emulator runs too, onto the device's buffers and slots; except that, where every rank is on
// this device (Reach::device), an uncompressed reduction's owner reads its peers' inputs in place
// (the inputs are uploaded before the launch), where the emulator puts them to the owner first.
// In process mode (Reach::process) a step reads only its own rank's buffers, and the owner's
// inputs are put to it first, as in the emulator (gpu/collective_process.hpp runs those plans).
//
// Plain host code (no GPU types), built into fusedcoll_gpu and into the normal test suite, which
// runs the plans on the CPU with the same step code as the kernel (gpu/collective_exec.hpp)
// under a simulated scheduler of resident blocks, against ref/ (tests/gpu_plan_test.cpp).
//
//   AllReduce direct   level 0 (compressed only): put the encoded tile of chunk c to owner c's
//                               stage[me] (+ 'part'[t] there)
//                      level 1: owner folds rank 0..P-1 (uncompressed: straight from every
//                               rank's send buffer, which no step writes; compressed: waits
//                               'part'[t] and decodes its stage), stores into every rank's recv
//                               (+ 'landed' there); compressed: encodes the result into every
//                               peer's final buffer (+ 'final'[owner][t])
//                      level 2: wait 'landed' / decode the final tiles of the other chunks
//   AllReduce ring     level k: chunk (me-1-k) mod P: received running value op own value, sent
//                               on to rank me+1 ('ring'[k][t]); level P-1 finishes chunk me and
//                               stores it everywhere as direct's level 1 does (the all-gather
//                               half is direct: it only moves the finished bits)
//   AllReduce chain    uncompressed: direct. Compressed, level r (rank r): waits 'chain'[t] (r > 0),
//                               received running value op own value, encoded into rank r+1's
//                               stage; rank P-1 finishes the tile and stores it everywhere as
//                               direct's level 1 does ('final'[t]); level P: decode it
//   ReduceScatter      direct's levels 0 and 1 over the recv_counts chunks, result to the owner
//   AllGather          level 0: contribution tile to every rank's recv (compressed: encoded into
//                               every peer's stage, rt into the own recv); level 1: wait / decode
//   All-to-All(v)      level 0: segment tile to its destination; level 1: wait / decode
//   Broadcast          level 0 (root): tile to every rank's recv; level 1: wait

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/detail/collective_plan.hpp"
#include "gpu/collective_exec.hpp"

namespace fusedcoll::gpu::coll {

/// The per-rank device buffers of one call: the uploaded input, the output downloaded after the
/// kernel, and two scratch buffers peers put into (contributions or running values, and the
/// encoded finished values of a compressed AllReduce).
enum class Buf : std::uint8_t { send = 0, recv = 1, stage = 2, final_wire = 3 };
inline constexpr int kNumBufs = 4;

/// Where a call's ranks are, which decides what a step may read.
enum class Reach : std::uint8_t {
  /// Every rank on this device (the single-GPU mode), inputs uploaded before the launch and never
  /// written: a fold reads its peers' inputs in place.
  device = 0,
  /// One rank per process (process mode): a step reads only its own rank's buffers, since a
  /// proxied peer's memory cannot be read at all and an IPC peer's input is uploaded by that
  /// peer whenever it gets there; every byte a step needs from a peer is put to it, signalled.
  process = 1,
};

/// How a step reads or writes an element.
enum class Access : std::uint8_t {
  raw = 0,         ///< the dtype's value as it is
  wire = 1,        ///< an encoded element (f32 only): reads decode, writes encode
  round_trip = 2,  ///< f32: the value's decode(encode(v)), without the bytes leaving the rank
};

/// A byte offset into rank `rank`'s buffer `buf`.
struct Place {
  int rank = 0;
  Buf buf = Buf::send;
  std::int64_t offset = 0;
};

struct Source {
  Place at;
  Access access = Access::raw;
  bool predivide = false;   ///< avg with wire.predivide: the value is divided by P first
  std::int64_t index0 = 0;  ///< element index (for the wire's scale) of the step's element 0
};

struct Target {
  Place at;
  Access access = Access::raw;
  std::int64_t index0 = 0;
  int signal_rank = -1;  ///< after the step: +1 on this rank's slot `signal_slot` (-1: none)
  int signal_slot = -1;  ///< relative to the call's first slot
};

/// One work item of one rank: wait (optional), then for each of `n` elements fold the sources
/// left to right, divide for `avg` if `divide`, and store into every target; then signal.
struct Step {
  int level = 0;
  int wait_slot = -1;  ///< this rank's slot (relative) that must reach its total for the call
  std::int64_t n = 0;
  int src_begin = 0, src_count = 0;
  int dst_begin = 0, dst_count = 0;
  bool divide = false;
};

/// Host memory copied into a device buffer before the kernel, or out of one after it.
struct Upload {
  Place at;
  const void* host = nullptr;
  std::int64_t bytes = 0;
};
struct Download {
  Place from;
  void* host = nullptr;
  std::int64_t bytes = 0;
};

/// Elements of a contribution (or segment) whose absolute maxima feed the agreed scales: `n`
/// f32 at byte `offset` of `rank`'s send buffer, the first with scale index `index0`.
struct AmaxRun {
  int rank = 0;
  std::int64_t offset = 0;
  std::int64_t n = 0;
  std::int64_t index0 = 0;
};

/// A named range of signal slots (for Context::slots and timeout messages).
struct SlotRange {
  std::string name;
  int base = 0;
  int count = 0;
};

struct Plan {
  std::string name;  ///< "all_reduce ring", ...
  int P = 1;
  Reach reach = Reach::device;
  DType dtype = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  std::size_t elem = 4;
  CompressionOptions wire{};
  // Compressed calls: the amax of every run, folded into `amax_entries` entries (index i in
  // entry i / wire.block, or entry 0 per tensor), gives the scales with `headroom`.
  std::vector<AmaxRun> amax_runs;
  std::int64_t amax_entries = 0;
  float headroom = 1;
  bool amax_predivide = false;

  std::vector<std::vector<Step>> steps;  ///< [rank], in level order
  std::vector<Source> sources;
  std::vector<Target> targets;
  std::array<std::vector<std::int64_t>, kNumBufs> buf_bytes;  ///< [buf][rank]
  std::vector<Upload> uploads;
  std::vector<Download> downloads;
  std::vector<SlotRange> slots;
  int slot_count = 0;

  bool compressed() const { return wire.format != WireFormat::none; }
  std::int64_t& bytes(Buf b, int rank) {
    return buf_bytes[static_cast<int>(b)][static_cast<std::size_t>(rank)];
  }
};

/// The plans of the five collectives over every rank's (validated, agreeing) arguments. In
/// process mode a peer's call carries only its agreed fields (gpu/agreement_codec.hpp): the plans
/// read nothing else of it but its buffers' addresses, for transfers only its own rank makes.
Plan plan_all_reduce(std::span<const AllReduceArgs> all, Reach reach = Reach::device);
Plan plan_reduce_scatter(std::span<const ReduceScatterArgs> all, Reach reach = Reach::device);
Plan plan_all_gather(std::span<const AllGatherArgs> all);
Plan plan_all_to_allv(std::span<const AllToAllvArgs> all);
Plan plan_broadcast(std::span<const BroadcastArgs> all);

/// How many signals each rank's slot receives in one call: [rank][relative slot].
std::vector<std::vector<std::uint64_t>> signal_counts(const Plan& plan);

/// Whether a step only moves bytes (one raw source, raw targets, no arithmetic): the kernel then
/// copies it in the widest aligned units, whatever the dtype.
bool is_move(const Plan& plan, const Step& s);

/// A plan with addresses: what the kernel (or the simulation) reads.
struct Resolved {
  std::vector<XStep> steps;
  std::vector<int> step_begin;  ///< [P + 1]
  std::vector<XSource> sources;
  std::vector<XTarget> targets;
};

/// Resolves `plan` against the call's buffers (`base[rank][buf]`), its first slot id `slot0`, and
/// `target(rank, slot)`, the cumulative value rank's slot `slot0 + slot` reaches in this call
/// (Context::expect with signal_counts(plan)).
Resolved resolve(const Plan& plan, const std::vector<std::array<unsigned char*, kNumBufs>>& base,
                 int slot0, const std::function<std::uint64_t(int, int)>& target);

/// The most tiles of one segment: the shared plan's GPU tiling (detail/collective_plan.hpp,
/// Tiling::gpu) spreads every segment over this many tiles of 4 to 64 KiB.
inline constexpr int kMaxTiles = fusedcoll::detail::collective::Tiling::kGpuTiles;

}  // namespace fusedcoll::gpu::coll
