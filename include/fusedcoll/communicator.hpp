#pragma once
/// @file
/// `Communicator`: the value handle SPMD user code holds, one per rank, whatever the backend
/// (the emulator, MPI, the GPU's single-device world). The same per-rank code runs unchanged on
/// every backend.

#include <cstdint>
#include <memory>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/gemv_allreduce.hpp"

namespace fusedcoll {

namespace detail {
class KernelRuntime;  // fusedcoll/detail/kernel_runtime.hpp
}  // namespace detail

/// How a fused operator runs. Every mode gives the bits `ref/` defines.
enum class Mode : std::uint8_t {
  /// The baseline: the compute kernel, then the collective as a separate kernel.
  unfused = 0,
  /// Fused, scale-up: each workgroup stores its finished tile straight into its final place in
  /// the destination rank's memory (zero-copy) and bumps a per-(source, destination) counter.
  scale_up = 1,
  /// Fused, scale-out: tiles fill a local staging slice; the last workgroup to finish a slice
  /// puts the whole slice to its destination with one put and a signal.
  scale_out = 2,
};

/// Name of a mode ("unfused", "scale_up", "scale_out").
constexpr const char* to_string(Mode m) noexcept {
  switch (m) {
    case Mode::unfused: return "unfused";
    case Mode::scale_up: return "scale_up";
    case Mode::scale_out: return "scale_out";
  }
  return "invalid";
}

/// The host-side interface a backend implements, one object per rank. Calls move whole
/// operators; no virtual call happens per element or per tile.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// Returns once every rank has entered the barrier.
  virtual void barrier() = 0;
  virtual void embedding_alltoall(const EmbeddingAllToAllArgs& args, Mode mode) = 0;
  virtual void gemv_allreduce(const GemvAllReduceArgs& args, Mode mode) = 0;
  virtual void gemm_alltoall(const GemmAllToAllArgs& args, Mode mode) = 0;
  virtual void all_reduce(const AllReduceArgs& args) = 0;
  virtual void all_to_allv(const AllToAllvArgs& args) = 0;
  virtual void reduce_scatter(const ReduceScatterArgs& args) = 0;
  virtual void all_gather(const AllGatherArgs& args) = 0;
  virtual void broadcast(const BroadcastArgs& args) = 0;
  /// The host side of users' kernels (fusedcoll/kernel_launch.hpp), or null where this backend
  /// runs none (docs/kernels.md, "Backends").
  virtual detail::KernelRuntime* kernels() noexcept { return nullptr; }
};

/// A rank's handle on its world. Cheap to copy; copies share the backend.
class Communicator {
 public:
  explicit Communicator(std::shared_ptr<Backend> backend) : backend_(std::move(backend)) {
    FC_ENFORCE(backend_ != nullptr, "a Communicator needs a backend");
  }
  int rank() const noexcept { return backend_->rank(); }
  int size() const noexcept { return backend_->size(); }
  Backend& backend() const noexcept { return *backend_; }

 private:
  std::shared_ptr<Backend> backend_;
};

/// The entry points. Each is a collective call: every rank of the world makes it, with arguments
/// that `check` accepts and that agree across ranks (a mismatch is reported on every rank before
/// any data moves). On return this rank's output is complete.
inline void embedding_alltoall(Communicator& comm, const EmbeddingAllToAllArgs& args,
                               Mode mode = Mode::scale_up) {
  comm.backend().embedding_alltoall(args, mode);
}
inline void gemv_allreduce(Communicator& comm, const GemvAllReduceArgs& args,
                           Mode mode = Mode::scale_up) {
  comm.backend().gemv_allreduce(args, mode);
}
inline void gemm_alltoall(Communicator& comm, const GemmAllToAllArgs& args,
                          Mode mode = Mode::scale_up) {
  comm.backend().gemm_alltoall(args, mode);
}
inline void all_reduce(Communicator& comm, const AllReduceArgs& args) {
  comm.backend().all_reduce(args);
}
inline void all_to_allv(Communicator& comm, const AllToAllvArgs& args) {
  comm.backend().all_to_allv(args);
}
inline void reduce_scatter(Communicator& comm, const ReduceScatterArgs& args) {
  comm.backend().reduce_scatter(args);
}
inline void all_gather(Communicator& comm, const AllGatherArgs& args) {
  comm.backend().all_gather(args);
}
inline void broadcast(Communicator& comm, const BroadcastArgs& args) {
  comm.backend().broadcast(args);
}
inline void barrier(Communicator& comm) { comm.backend().barrier(); }

}  // namespace fusedcoll
