#pragma once
// The emulator's operators: one launcher per op, each reading like gloo's collectives — a block
// of checks (`enter`), then a plain schedule of kernels. Kernels live in the op's .cpp file.

#include <algorithm>
#include <cstddef>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "emu/runtime.hpp"
#include "fusedcoll/communicator.hpp"
#include "fusedcoll/detail/schedule.hpp"
#include "fusedcoll/detail/validate.hpp"

namespace fusedcoll::emu::ops {

void embedding_alltoall(Rank& rk, const EmbeddingAllToAllArgs& args, Mode mode);
void gemv_allreduce(Rank& rk, const GemvAllReduceArgs& args, Mode mode);
void gemm_alltoall(Rank& rk, const GemmAllToAllArgs& args, Mode mode);
void all_reduce(Rank& rk, const AllReduceArgs& args);
void all_to_allv(Rank& rk, const AllToAllvArgs& args);
void reduce_scatter(Rank& rk, const ReduceScatterArgs& args);
void all_gather(Rank& rk, const AllGatherArgs& args);
void broadcast(Rank& rk, const BroadcastArgs& args);

/// Ends the window in which other ranks' argument structs may be read.
inline void leave_args(Rank& rk, const std::string& op) { rk.barrier(op + " args read"); }

/// The prologue of every collective call: validates this rank's call, meets every other rank
/// (a hidden collective), and checks that all calls agree, so that a bad or mismatched call is
/// reported on every rank before any data moves. Returns all ranks' calls (index = rank); the
/// pointers are valid until `leave` — copy what you need first.
template <class Args>
std::vector<const Args*> enter(Rank& rk, const std::string& op, const Args& args) {
  enforce_env();
  rk.begin_op();
  rk.set_activity("in " + op + " (checking arguments)");
  check(args, rk.rank(), rk.size());
  const auto raw = rk.exchange(op, &args);
  std::vector<const Args*> all;
  for (const void* p : raw) all.push_back(static_cast<const Args*>(p));
  std::exception_ptr mismatch;
  try {
    detail::check_all_agree(rk.size(), [&](int r) -> const Args& { return *all[r]; });
  } catch (...) {
    mismatch = std::current_exception();
  }
  if (mismatch) {
    // Every rank finds the same mismatch. None may unwind, and so free the argument struct its
    // caller built, while a peer may still be reading it (TSan caught a rank reading a struct on
    // a stack its owner had already left).
    leave_args(rk, op);
    std::rethrow_exception(mismatch);
  }
  rk.set_activity("in " + op);
  return all;
}

/// Workgroups of a persistent kernel over `work` items on this rank's device
/// (detail::persistent_grid, which the simulator prices too).
inline int grid_for(const Rank& rk, std::size_t work) {
  return fusedcoll::detail::persistent_grid(work, static_cast<std::size_t>(rk.max_resident_wgs()));
}

/// The communication-aware order of the kernels' peers (detail/schedule.hpp).
using fusedcoll::detail::remote_first;

}  // namespace fusedcoll::emu::ops
