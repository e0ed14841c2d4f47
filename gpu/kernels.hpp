#pragma once
// Users' kernels on the GPU backend (fusedcoll/kernel_launch.hpp; docs/kernels.md, "On the
// GPU"): the host side of one gpu::World. Its symmetric buffers and signals live as long as the
// World; a launch finds the kernel's registered GPU instantiation (gpu/kernel_register.hpp) by
// type and runs it like an operator's kernel: one grid for all ranks in the single-GPU mode
// (after the ranks' rendezvous), one per process in process mode (after the processes' exchange),
// with the Context's timeout record turned into TimeoutError naming rank, block, signal and value.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fusedcoll/detail/kernel_runtime.hpp"

namespace fusedcoll::gpu {

class Context;

/// The single-GPU mode's meeting of every rank's host thread (World::State::collective): the last
/// rank to arrive runs `work` over every rank's `arg` (index = rank); a `what` that differs between
/// ranks is InvalidArgument on all of them, and an exception of `work` is thrown on all of them.
using Rendezvous =
    std::function<void(int rank, const std::string& what, const void* arg,
                       const std::function<void(const std::vector<const void*>&)>& work)>;

/// Users' kernels of one World: one `detail::KernelRuntime` per rank of this process.
class Kernels {
 public:
  /// The single-GPU mode: every rank of `ctx`, meeting through `meet`.
  Kernels(Context& ctx, Rendezvous meet);
  /// Process mode: this process's rank (`ctx.process()`).
  explicit Kernels(Context& ctx);
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  /// Rank `rank`'s runtime (process mode: this process's rank).
  detail::KernelRuntime* rank(int rank);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusedcoll::gpu
