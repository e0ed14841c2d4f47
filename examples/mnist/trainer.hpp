#pragma once
/// @file
/// Data-parallel SGD training of the MNIST network on a `fusedcoll::Communicator`, one process or
/// thread per worker, and the `--report` grid. The per-rank code uses only `Communicator`, so it
/// runs unchanged on any backend; `train` runs it on the emulator (one thread per worker).

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "mnist/idx.hpp"
#include "fusedcoll/communicator.hpp"
#include "fusedcoll/compression.hpp"

namespace fusedcoll::mnist {

/// Wire format of the gradient AllReduce (`--compress`).
enum class GradCompression { none, fp16, bf16, fp8_e4m3, fp8_e5m2 };

/// "none", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2".
const char* to_string(GradCompression c) noexcept;
/// Inverse of `to_string`; throws `InvalidArgument` listing the accepted names.
GradCompression parse_compression(const std::string& name);

/// How gradients travel between workers.
struct ExchangeOptions {
  GradCompression compression = GradCompression::none;
  AllReduceAlgo algo = AllReduceAlgo::direct;
  /// Error feedback (`--error-feedback`): each rank adds what the wire lost of its previous
  /// contributions to the next one. Only with a compressed format.
  bool error_feedback = false;
};

/// Throws `InvalidArgument` unless `options` describe a valid gradient exchange.
void check_exchange(const ExchangeOptions& options);

/// Replaces `grads` on every rank by the mean over ranks of every rank's `grads` (one AllReduce
/// of the flat buffer). A collective call: every rank makes it with equal sizes and options.
/// This is the one place where gradient compression plugs in.
/// With `options.error_feedback`, `feedback` (this rank's state, kept across steps) is required.
void exchange_gradients(Communicator& comm, std::span<float> grads, const ExchangeOptions& options,
                        ErrorFeedback* feedback = nullptr);

/// Bytes rank 0 puts on the wire per `exchange_gradients` of `count` elements on `world_size`
/// ranks, one rank per host: direct and ring send 2 (P-1)/P of the buffer (exactly, with the
/// remainder elements of `chunk_of`), chain the buffer once (its running values to rank 1). The
/// MPI backend's host segments (mpi.md, "Across hosts") move part of that through shared memory.
std::int64_t exchange_bytes_per_step(std::int64_t count, int world_size,
                                     const ExchangeOptions& options);

/// Rank `rank`'s training-set indices for `epoch` (0-based): a seeded shuffle of all `n` indices,
/// the same on every rank, padded by wrapping around to a multiple of `world` (as PyTorch's
/// DistributedSampler does, so every rank runs the same number of steps), then dealt out
/// round-robin. Every rank gets ceil(n / world) indices.
std::vector<std::int64_t> epoch_shard(std::int64_t n, int rank, int world, std::uint64_t seed,
                                      int epoch);

struct TrainOptions {
  int workers = 1;
  int epochs = 10;
  int batch_size = 64;  ///< per worker
  int hidden = 50;      ///< width of the fc layer (320->hidden->10); 50 is the lab's network
  double lr = 0.01;     ///< per worker: the step size is lr x workers (Horovod's rule)
  double momentum = 0.5;
  std::uint64_t seed = 42;
  int test_batch_size = 1000;
  ExchangeOptions exchange;
  bool progress = true;          ///< a progress bar on rank 0
  bool redraw_progress = false;  ///< redraw the bar in place (a terminal); else one line per epoch
};

struct EpochStats {
  int epoch = 0;          ///< 1-based
  double train_loss = 0;  ///< mean over the epoch's steps and workers
  double test_loss = 0;
  double test_accuracy = 0;  ///< fraction in [0, 1]
  double train_seconds = 0;  ///< wall time of the epoch's training steps (no evaluation)
  /// This rank's split of `train_seconds`: forward + backward, and `exchange_gradients` (the
  /// AllReduce with its codec, including any wait for a slower peer to arrive). The remainder is
  /// batch gathering and the SGD update.
  double compute_seconds = 0;
  double exchange_seconds = 0;
  double samples_per_second = 0;
};

struct TrainResult {
  std::vector<EpochStats> epochs;
  double train_seconds = 0;  ///< sum of the epochs' training time
  std::int64_t steps_per_epoch = 0;
  std::int64_t parameters = 0;
  std::int64_t bytes_per_step = 0;  ///< rank 0's gradient bytes on the wire per step
  std::vector<float> final_parameters;
};

/// The per-rank training loop, SPMD: broadcasts rank 0's initial parameters, then for each epoch
/// trains on this rank's shard of a seeded shuffle, averaging gradients with
/// `exchange_gradients` after every step, and evaluates on the test set (sharded, reduced).
/// Rank 0 returns the statistics; the other ranks return the same numbers. `log` (rank 0 only,
/// may be null) receives the progress bar.
TrainResult train_rank(Communicator& comm, const Dataset& train, const Dataset& test,
                       const TrainOptions& options, std::ostream* log);

/// Runs `train_rank` on an emulated world of `options.workers` ranks.
TrainResult train(const Dataset& train, const Dataset& test, const TrainOptions& options,
                  std::ostream* log);

/// One configuration of the `--report` grid.
struct ReportConfig {
  std::string name;
  int workers = 1;
  GradCompression compression = GradCompression::none;
};

/// The grid `--report` runs; extend it here when a configuration becomes available.
std::vector<ReportConfig> report_grid();

/// Runs every configuration of `grid` with `base` (its workers and compression overridden) and
/// writes `results.md`, `accuracy.dat`, `accuracy.gp` and, if gnuplot is on the PATH,
/// `accuracy.png` into `out_dir`. `command` is quoted in results.md so the table can be
/// reproduced.
void write_report(const Dataset& train, const Dataset& test, const TrainOptions& base,
                  const std::vector<ReportConfig>& grid, const std::string& out_dir,
                  const std::string& command, std::ostream& log);

}  // namespace fusedcoll::mnist
