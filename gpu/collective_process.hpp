#pragma once
// The collectives in process mode (docs/gpu.md, "Process mode"): one rank per process, so a
// rank's kernel runs only its own steps of the plan (gpu/collective_plan.hpp, built with
// Reach::process), its buffers are carved from its symmetric heap, and what a step writes into a
// peer goes either through that peer's IPC mapping or, for a proxied peer, into this process's
// shadow of the peer's heap and from there as a put record of the host proxy, ahead of the
// target's signal (collective_exec.hpp, run_item). The compressed wire's scales are agreed as in
// the single mode, except that each rank folds the |values| of its own inputs and the ranks merge
// their tables on the host.
//
// Plain host code (no GPU types): the GPU's launcher (gpu/collectives.cpp) and the CPU suite's
// replay of every collective through the proxies (tests/mpi/gpu_process_replay_test.cpp) call the
// same functions, so the layout, the addresses, the puts and the agreed scales checked on the CPU
// are the ones the device gets.

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gpu/collective_plan.hpp"

namespace fusedcoll::gpu::coll {

/// A collective's plan in process mode (Reach::process), from every rank's call as process
/// mode's entry returns it (agree_world: this rank's in full, a peer's with its agreed fields
/// only, so no address or displacement of a peer's): the same plan on every rank.
Plan process_plan(std::span<const AllReduceArgs> all);
Plan process_plan(std::span<const ReduceScatterArgs> all);
Plan process_plan(std::span<const AllGatherArgs> all);
Plan process_plan(std::span<const AllToAllvArgs> all);
Plan process_plan(std::span<const BroadcastArgs> all);

/// Where each of a call's buffers sits in every rank's symmetric heap: the same offsets on every
/// rank (each buffer gets the most any rank needs, 256-byte aligned), from agreed values only,
/// so an offset names the same bytes in every rank's heap.
struct HeapLayout {
  std::array<std::int64_t, kNumBufs> offset{};
  std::int64_t bytes = 0;  ///< the heap this call needs
};
HeapLayout heap_layout(const Plan& plan);

/// A plan's steps of rank `me` resolved for its kernel in process mode: `x` holds only `me`'s
/// steps (its step_begin puts them at `me`, every other rank's range empty), their sources and
/// targets renumbered; `puts[k]` says how target k travels (XPut, peer -1: stored in place).
struct ProcessResolved {
  Resolved x;
  std::vector<XPut> puts;
};

/// Resolves rank `me`'s steps of `plan` (built with Reach::process) against `heap[q]`, where
/// this rank's kernel writes rank q's heap (its own, an IPC mapping, or its shadow of a proxied
/// peer), `proxied[q]` (q is reached through the host proxy), its first slot `slot0` and `target(
/// slot)`, the cumulative value this rank's slot `slot0 + slot` reaches in this call. Throws
/// InternalError if a step of `me` reads another rank's buffer (a plan that a process cannot run).
ProcessResolved resolve_process(const Plan& plan, int me, const HeapLayout& layout,
                                const std::vector<unsigned char*>& heap,
                                const std::vector<bool>& proxied, int slot0,
                                const std::function<std::uint64_t(int)>& target);

/// The runs of `plan.amax_runs` over rank `me`'s own inputs: a rank can fold only those.
std::vector<AmaxRun> amax_runs_of(const Plan& plan, int me);

/// One rank's amax table as bytes for the exchange: per entry the bits of |max| (as the device's
/// atomicMax leaves them: non-negative floats order as their bits, NaN above infinity).
std::string amax_bytes(const std::vector<std::uint32_t>& bits);

/// Every rank's table (amax_bytes, index = rank) merged into the call's table: per entry the
/// largest bits of any rank, as the single mode's one table over every rank's runs would hold.
/// The same on every rank, so make_plan then gives every rank the same scales (or the same
/// InvalidArgument). Throws InternalError on tables of different lengths.
std::vector<float> merge_amax(const std::vector<std::string>& tables);

}  // namespace fusedcoll::gpu::coll
