#pragma once
// fusedcoll-perf's Open MPI side, shared by the backends that run one rank per MPI process
// (--backend mpi: perf_mpi.cpp; --backend gpu in process mode: perf_gpu.cpp): Open MPI's own
// collective as the baseline, the interleaved wall-clock timing of a round, and the sums of the
// ranks' checks on rank 0 (docs/benchmarking.md). Needs only MPI, not the MPI backend, so that a
// GPU machine's build without oneTBB has it too.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "perf_common.hpp"

namespace perf {

/// Fits `o` to the MPI world of P ranks, the same check on every rank so that every rank leaves
/// alike: -g, when given, must be P and --root a rank (false, after rank 0 printed the usage
/// error, when not). Sets o.ranks to P and o.processes_per_host to this host's processes (every
/// process builds every rank's inputs: the memory check counts them).
bool fit_world(Options& o, int P, int me);

/// The end of a run on every rank: rank 0 prints the footer and, when `wrong` (rank 0's sum of
/// every rank's wrong elements) is not 0, says so. Returns the exit status, the same on every
/// rank (1 when any element differed).
int finish_world(Printer& out, std::int64_t wrong, int me);

/// Runs warm-up + timed rounds of `variants`, shuffled per round by `rng` (seeded alike on every
/// rank, so every rank calls the collectives in the same order). Each call is MPI_Barrier, clock,
/// call, MPI_Barrier, clock: the time until the slowest rank is done. -n rounds, then more while
/// --min-time asks for them (rank 0's clock decides for all). Returns each variant's median
/// seconds per call, as timed on this rank.
std::vector<double> time_interleaved(const std::vector<std::function<void()>>& variants,
                                     const Options& o, std::mt19937& rng);

/// The sums (counts) and maxima (errors) of every rank's `e`, on rank 0.
Errors reduce_errors(const Errors& e);

/// The sum of every rank's `v`, on rank 0.
std::int64_t sum_over_ranks(std::int64_t v);

/// How a fused sweep runs a case on this rank: the call of each mode, and where that call leaves
/// this rank's output (`floats` of them), which the check compares with ref/'s.
struct FusedRun {
  std::function<void(fc::Mode)> call;
  float* output = nullptr;
  std::size_t floats = 0;
};

/// A fused operator's sweep on this rank of an mpiexec job (--backend mpi, and --backend gpu in
/// process mode): per size, `bind(case)`'s three modes timed interleaved (time_interleaved), the
/// unfused mode being the baseline of the other two; with -c 1, this rank's output of each mode
/// bit for bit against ref/'s, summed on rank 0. Returns rank 0's sum of wrong elements.
std::int64_t fused_world(const Options& o, fc::Communicator& comm, Printer& out,
                         const std::function<FusedRun(FusedCase&)>& bind);

/// The name of Open MPI's collective compared with `o.op`.
std::string ompi_baseline_name(const Options& o);

/// Open MPI's collective of `o.op` on rank `me`'s host buffers of `c`, into `c.recv[me]`. The
/// sizes of a sweep are multiples of P elements (collective_bytes), so the even-count calls apply.
std::function<void()> ompi_call(const Options& o, CollectiveCase& c, int me, int P);

/// The MPI call of `ompi_call` alone, on `send` and `recv` laid out as a rank's buffers of `c`:
/// host memory, or device memory where the MPI library is CUDA-aware. Without what ompi_call adds
/// around it on host buffers (avg's division of the sum by P, Broadcast's copy of the root's send
/// into its recv), which a caller on device buffers does on the device.
std::function<void()> mpi_collective(const Options& o, const CollectiveCase& c, const float* send,
                                     float* recv);
/// The elements of a rank's receive buffer that avg divides (AllReduce, ReduceScatter) or
/// Broadcast's root copies.
std::int64_t ompi_recv_count(const Options& o, const CollectiveCase& c);

/// The first line of MPI_Get_library_version ("Open MPI v4.1.4, ...").
std::string mpi_library_version();

}  // namespace perf
