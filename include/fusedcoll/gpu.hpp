#pragma once
/// @file
/// The GPU backend (HIP or CUDA, chosen at build time: FUSEDCOLL_ENABLE_HIP / _CUDA), in its
/// single-GPU multi-rank mode: P virtual ranks whose buffers all live on one GPU, every rank's
/// blocks resident at once, peers written through plain device pointers. Results match `ref/`
/// bit for bit on `ValueMode::integer` inputs and within the stated tolerance otherwise (the
/// kernels follow ref/'s pinned per-element orders without FMA contraction, so in practice they
/// match bit for bit on random inputs too). See docs/gpu.md.
///
/// Arguments are host memory, exactly as for `ref/` and the emulator: each call uploads the
/// inputs, runs the kernels of the chosen `Mode` (one launch per kernel for all ranks), and
/// downloads the outputs. No GPU type appears in this header.

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

/// Options of a `World`.
struct WorldOptions {
  /// Virtual ranks sharing the GPU.
  int world_size = 4;
  /// Which visible device.
  int device = 0;
  /// Seconds a device-side wait may spin before the kernel gives up and the call throws
  /// `TimeoutError` naming the rank, block, slot, expected and observed value; <= 0: from
  /// `FUSEDCOLL_TIMEOUT` (default 30).
  double timeout_s = 0;
};

/// P virtual ranks on one GPU.
class World {
 public:
  /// Throws `UnsupportedError` when no device is visible.
  explicit World(WorldOptions options = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int size() const noexcept;
  /// The device's name as the runtime reports it.
  std::string device_name() const;

  /// SPMD, like `emu::World::run`: one host thread per rank, each with its `Communicator`. Every
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
