#pragma once
/// @file
/// The MPI backend (`fusedcoll_mpi`, docs/mpi.md): one rank = one MPI process, its workgroups
/// oneTBB tasks inside it, symmetric memory an `MPI_Win_allocate` window under `MPI_Win_lock_all`,
/// put = `MPI_Put`, signal = `MPI_Win_flush` then an atomic `MPI_Accumulate` on a 64-bit flag,
/// wait = local polling through MPI (Open MPI has no progress thread). The per-rank user code is
/// the same as on every backend: it sees a `Communicator` and the entry points of
/// communicator.hpp. This is the only public header that names MPI types.

#include <mpi.h>

#include <cstddef>
#include <functional>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/env.hpp"

namespace fusedcoll::mpi {

/// Knobs of one MPI communicator.
struct Options {
  /// Workgroups (oneTBB tasks) of a fused kernel's persistent grid; 0 = default_workgroups(comm):
  /// this rank's share of the CPUs it may use. The grid never waits on itself, so any value is
  /// safe.
  int workgroups = 0;
  /// Bytes of symmetric window allocated up front; the window grows (a collective
  /// reallocation, at the start of a call) when a call needs more.
  std::size_t initial_window_bytes = std::size_t{1} << 20;
  /// How data moves between ranks (docs/mpi.md, "Transports"): `rma` (one-sided puts into an
  /// MPI_Win_allocate window; needs shared memory or an RDMA network between every pair),
  /// `p2p` (two-sided MPI_Isend/MPI_Irecv; works over TCP), or `automatic`: the value of
  /// FUSEDCOLL_MPI_TRANSPORT, whose default picks rma when all ranks share one host's memory
  /// and p2p otherwise. Every rank must end up with the same choice (checked: BackendError).
  Env::MpiTransport transport = Env::MpiTransport::automatic;
};

/// The workgroups a rank's grid gets when `Options::workgroups` is 0: the threads oneTBB may use
/// in this process divided by the ranks of `comm` on this host whose CPU sets (affinity masks)
/// overlap this rank's, at least 1. Ranks that share cores would otherwise each start a grid as
/// wide as the whole host, and their threads would take turns on the cores: with 4 ranks of 2
/// workgroups on 2 cores a piece whose tiles were dealt to a descheduled worker left milliseconds
/// late, and idle workers spinning after a grid delayed the other ranks
/// (docs/results/across-hosts.md). Ranks bound to cores of their own keep them all. Collective
/// over `comm`.
int default_workgroups(MPI_Comm comm);

/// A `Communicator` over the ranks of `comm`. Collective over `comm`: every rank calls it, in
/// the same order as its other collective calls on `comm`. The backend works on its own duplicate
/// of `comm`. MPI must have been initialised with `MPI_THREAD_MULTIPLE` (throws `BackendError`
/// otherwise), and every `Communicator` (and copy) of it must be destroyed, on every rank, before
/// `MPI_Finalize`: destroying the last copy frees the window, which is collective.
Communicator make_communicator(MPI_Comm comm, const Options& options = {});

/// Initialises MPI with `MPI_THREAD_MULTIPLE` unless it already is (throws `BackendError` if the
/// library provides less), and returns a `Communicator` over `MPI_COMM_WORLD`. Pair it with
/// `finalize()` after the last copy of the communicator is gone.
Communicator init(int& argc, char**& argv, const Options& options = {});

/// Memory the peers write into directly: the MPI analogue of a registered (NCCL) or symmetric
/// (NVSHMEM) buffer. An All-to-All(v) or AllReduce whose `recv` lies inside one, or a scale-up
/// EmbeddingAllToAll / GemmAllToAll whose output does, has the peers' data put straight into its
/// final place, one copy per byte as in `MPI_Alltoall`; into ordinary memory data lands in the
/// communicator's window first and is copied out (docs/mpi.md). Results are the same bits either
/// way.
///
/// Making and destroying one are collective over the communicator's ranks, in the same order as
/// its other calls (one `MPI_Win_allocate` window each; sizes may differ between ranks). A buffer
/// keeps its communicator alive; destroy it before `finalize()`.
class SymmetricBuffer {
 public:
  /// `bytes` of this rank's memory, zero-filled. Throws `InvalidArgument` for a communicator of
  /// another backend.
  SymmetricBuffer(Communicator& comm, std::size_t bytes);
  ~SymmetricBuffer();
  SymmetricBuffer(const SymmetricBuffer&) = delete;
  SymmetricBuffer& operator=(const SymmetricBuffer&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  Communicator comm_;
  int id_ = -1;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// `MPI_Finalize`, unless MPI is already finalised or was never initialised.
void finalize();

/// The opt-in top-level handler for programs run under `mpiexec`: initialises MPI (as `init`),
/// runs `body` with this rank's communicator, destroys it and finalises MPI; returns 0.
///
/// If `body` throws on any rank (a failed check, a `TimeoutError` of a wait past
/// `FUSEDCOLL_TIMEOUT`, anything), that rank prints `fusedcoll mpi: rank R: <what>` to stderr and
/// calls `MPI_Abort(MPI_COMM_WORLD, 1)`, which ends every rank of the job: a fault on one rank
/// never leaves `mpiexec` hanging. This is the one place fusedcoll ends a process; the library
/// itself only throws.
int run(int& argc, char**& argv, const std::function<void(Communicator&)>& body,
        const Options& options = {});

}  // namespace fusedcoll::mpi
