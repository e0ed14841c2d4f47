#pragma once
// Process mode's bootstrap over MPI (docs/gpu.md, "Process mode"): which ranks share a node, how
// each rank reaches each peer (its own memory, a CUDA/HIP IPC mapping, or the host proxy), which
// device a rank takes, and the exchange of the IPC handles of symmetric allocations, with the
// check that every rank allocates the same buffers, of the same sizes, in the same order.
//
// Plain host code over MPI: handles are opaque bytes here (cudaIpcMemHandle_t and
// hipIpcMemHandle_t are 64 bytes), so the CPU suite tests the exchange and its errors under
// mpiexec (tests/mpi/gpu_proxy_test.cpp) and the GPU backend opens what it gets
// (gpu/process.cpp).

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fusedcoll/env.hpp"

namespace fusedcoll::gpu::process {

/// Throws `BackendError` naming `call` and MPI's error string unless `rc == MPI_SUCCESS` (the
/// MPI backend's check lives in its own private header, which this one may not include).
void check_mpi(int rc, const char* call);

/// How this rank reaches a peer's symmetric memory and signals.
enum class Route : std::uint8_t {
  self,   ///< its own memory
  ipc,    ///< a same-node peer's allocations mapped through IPC handles: plain device stores
  proxy,  ///< puts and signals through the host proxy (gpu/proxy.hpp)
};
const char* to_string(Route r) noexcept;

/// Every rank's node (index = rank), numbered 0, 1, ... in order of each node's first rank: the
/// ranks that MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts together. Collective over `comm`.
std::vector<int> node_of(MPI_Comm comm);

/// Rank `me`'s route to every rank (index = rank). `auto`: IPC within a node, the proxy across
/// nodes; `all`: the proxy for every peer (the cross-node path on one machine); `off`: IPC only,
/// and InvalidArgument naming the first peer on another node. The same rule on every rank, so
/// routes are symmetric: p reaches q as q reaches p.
std::vector<Route> routes(const std::vector<int>& node_of, int me, Env::GpuProxy mode);

/// This rank's index among the ranks of its node, and their number.
int local_rank(const std::vector<int>& node_of, int me);
int local_size(const std::vector<int>& node_of, int me);

/// The device a rank takes: `requested` when >= 0 (InvalidArgument unless < `visible`), else its
/// local rank modulo the visible devices (several ranks then share one device, as on a machine
/// with fewer GPUs than ranks). InvalidArgument when no device is visible.
int pick_device(int requested, int local_rank, int visible);

/// Every rank's `blob` (index = rank; lengths may differ), through nonblocking allgathers polled
/// under `timeout_s`: TimeoutError names `what` and this rank when some rank never joins.
std::vector<std::string> allgather_bytes(MPI_Comm comm, const std::string& blob, double timeout_s,
                                         const std::string& what);

/// An IPC memory handle as bytes (cudaIpcMemHandle_t / hipIpcMemHandle_t).
using IpcHandle = std::array<unsigned char, 64>;

/// The symmetric allocations of one communicator, in the order every rank makes them.
class HandleExchange {
 public:
  /// `comm`: the ranks that allocate together (the caller keeps it alive). `timeout_s`: how long
  /// an exchange waits for the slowest rank.
  HandleExchange(MPI_Comm comm, double timeout_s);

  /// Collective: this rank's allocation number `count()` is `name`, of `bytes`, reachable through
  /// `mine`. Checks that every rank made the same allocation as its number `count()` (same name,
  /// same size) and returns every rank's handle (index = rank). Throws InvalidArgument naming the
  /// allocation number and every rank's name and size when they differ (on every rank alike,
  /// before anything is mapped), and TimeoutError naming the ranks that did not join in time.
  std::vector<IpcHandle> exchange(const std::string& name, std::size_t bytes,
                                  const IpcHandle& mine);

  /// Allocations exchanged so far.
  int count() const noexcept { return count_; }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  int count_ = 0;
};

}  // namespace fusedcoll::gpu::process
