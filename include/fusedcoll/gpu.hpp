#pragma once
/// @file
/// The GPU backend (HIP or CUDA, chosen at build time: FUSEDCOLL_ENABLE_HIP / _CUDA). Its
/// single-GPU multi-rank mode runs P virtual ranks whose buffers all live on one GPU, every rank's
/// blocks resident at once, peers written through plain device pointers; its process mode
/// (`Placement::process`, builds with MPI) runs one rank per MPI process. Results match `ref/`
/// bit for bit on `ValueMode::integer` inputs and within the stated tolerance otherwise (the
/// kernels follow ref/'s pinned per-element orders without FMA contraction, so in practice they
/// match bit for bit on random inputs too). See docs/gpu.md.
///
/// Arguments are host memory, exactly as for `ref/` and the emulator: each call uploads the
/// inputs, runs the kernels of the chosen `Mode` (one launch per kernel for all ranks), and
/// downloads the outputs. No GPU or MPI type appears in this header.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "fusedcoll/communicator.hpp"

namespace fusedcoll::gpu {

/// True when the build has a GPU backend and at least one device is visible. Never throws.
bool available() noexcept;

/// "HIP" or "CUDA": the runtime this build was compiled for.
const char* vendor() noexcept;

/// Where a `World`'s ranks run (docs/gpu.md).
enum class Placement {
  from_environment,  ///< FUSEDCOLL_GPU_MODE (default: single_gpu)
  single_gpu,        ///< P virtual ranks as blocks of one launch on one GPU, in this process
  process,           ///< one rank per MPI process (run under mpiexec), over MPI_COMM_WORLD
};

/// Options of a `World`.
struct WorldOptions {
  /// Virtual ranks sharing the GPU (single_gpu; in process mode the size is MPI_COMM_WORLD's).
  int world_size = 4;
  /// Which visible device; -1: device 0 (single_gpu), or the rank's local rank on its node modulo
  /// the visible devices (process).
  int device = -1;
  /// single_gpu or process; FUSEDCOLL_GPU_MODE when from_environment.
  Placement placement = Placement::from_environment;
  /// Seconds a device-side wait may spin before the kernel gives up and the call throws
  /// `TimeoutError` naming the rank, block, slot, expected and observed value; <= 0: from
  /// `FUSEDCOLL_TIMEOUT` (default 30).
  double timeout_s = 0;
};

/// P virtual ranks on one GPU, or (process mode) this process's rank of an MPI job: peers on the
/// same node are reached through CUDA/HIP IPC mappings of their symmetric memory and signals,
/// peers on other nodes (every peer under FUSEDCOLL_GPU_PROXY=all) through a host proxy thread
/// over MPI. Process mode initialises MPI (MPI_THREAD_MULTIPLE) if the program has not, and then
/// finalises it when the World ends; it takes calls through `run` only, one rank's per process.
class World {
 public:
  /// Throws `UnsupportedError` when no device is visible.
  explicit World(WorldOptions options = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int size() const noexcept;
  /// Process mode: this process's rank; 0 in the single-GPU mode.
  int rank() const noexcept;
  /// Whether this World runs one rank per process.
  bool process_mode() const noexcept;
  /// The device's name as the runtime reports it.
  std::string device_name() const;

  /// SPMD, like `emu::World::run`: one host thread per rank, each with its `Communicator` (process
  /// mode: `per_rank` runs once, for this process's rank, as under `mpi::run`). Every
  /// op call is a rendezvous; once every rank has entered it, one thread launches the kernels for
  /// all ranks and every rank returns with its output complete. A rank that throws makes the
  /// others' pending calls fail instead of hang; `run` rethrows the first error, prefixed with
  /// its rank. The collectives run there too (`all_reduce`, ..., compressed wires included).
  void run(const std::function<void(Communicator&)>& per_rank);

  /// The operators over all ranks' calls at once (index = rank), the form `ref::` takes.
  void embedding_alltoall(std::span<const EmbeddingAllToAllArgs> ranks, Mode mode);
  void gemv_allreduce(std::span<const GemvAllReduceArgs> ranks, Mode mode);
  void gemm_alltoall(std::span<const GemmAllToAllArgs> ranks, Mode mode);

  /// The collectives over all ranks' calls at once (index = rank), bit for bit ref/'s result
  /// (docs/semantics.md, "Collectives"; compressed wires as docs/compression.md pins them). Only
  /// the receive regions are written; in-place calls and ranks sharing host memory work because
  /// every input is uploaded before any output is downloaded.
  void all_reduce(std::span<const AllReduceArgs> ranks);
  void reduce_scatter(std::span<const ReduceScatterArgs> ranks);
  void all_gather(std::span<const AllGatherArgs> ranks);
  void all_to_allv(std::span<const AllToAllvArgs> ranks);
  void broadcast(std::span<const BroadcastArgs> ranks);

  /// Device time of the kernels of the last operator or collective call (events around its
  /// launches), in milliseconds; uploads and downloads are not included (a compressed
  /// collective's scale agreement, its amax kernel and the host round trip, is).
  double last_kernel_ms() const noexcept;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace fusedcoll::gpu
