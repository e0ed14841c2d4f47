#pragma once
// What both backends of fusedcoll-perf share (docs/benchmarking.md): the flags, the sizes of a
// sweep, the cases (every rank's inputs, the call on one rank, ref/ on all of them), the output
// checks and the printer. perf.cpp runs the cases on the emulator, perf_mpi.cpp under mpiexec.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/fusedcoll.hpp"

namespace perf {

namespace fc = fusedcoll;

struct Options {
  std::string op;
  std::int64_t min_bytes = -1, max_bytes = -1;
  double factor = 4;
  int iters = 20, warmup = 5;
  // --min-time: timed rounds (emu: batches) continue past -n until they add up to this many
  // seconds per variant, at most kMaxTimedRounds; 0 = exactly -n (emu and mpi, wall clock).
  double min_time = 0;
  bool check = true;
  int ranks = 0;          // -g; 0 = not given (emu: 4; mpi: the world size)
  int compute_units = 0;  // -C; 0 = not given (emu: 2; mpi: the backend's default grid)
  fc::ReduceOp redop = fc::ReduceOp::sum;
  fc::AllReduceAlgo algo = fc::AllReduceAlgo::direct;
  int root = 0;
  std::string backend = "emu";
  std::string compress = "none";
  fc::CompressionOptions wire;
  double link_gbps = 0, link_us = 0;
  bool symmetric = false;  // --symmetric (mpi): receive buffers / outputs in SymmetricBuffers
  std::string clock = "wall";  // --clock (emu): wall or virtual
  std::string preset;          // --preset (virtual): name or path; empty = FUSEDCOLL_PRESET
  // Not a flag: the processes on this host that each build every rank's inputs (mpi: the ranks
  // on the node), for the memory check of make_collective / make_fused_case.
  int processes_per_host = 1;
  enum class Format { table, csv, json } format = Format::table;
  // --csv-file: rows appended to this file as CSV with the run's settings in leading columns,
  // beside the output on stdout (scripts/results collects its figures this way). --label: a
  // free text of the caller's (e.g. the link a cluster was shaped to) in the file's first column.
  std::string csv_file, label;
  std::string scaling = "auto";  // --scaling as given, for the file's columns
};

/// The most timed rounds (emu: batches) --min-time adds up to per size: a 10 us call then takes
/// 1000 rounds, 10 ms, so that a size's timing cannot run away on a call faster than it measures.
inline constexpr int kMaxTimedRounds = 1000;

/// Whether another timed round (emu: batch) is due after `done` of them, of `at_least` asked for
/// (-n; emu: its batches), whose calls took `timed_seconds` per variant in all: until `at_least`,
/// then while they fall short of --min-time (at most kMaxTimedRounds).
bool more_rounds(const Options& o, int done, int at_least, double timed_seconds);

/// Throws `fc::InvalidArgument` with `what` and the usage text.
[[noreturn]] void usage_error(const std::string& what);

/// The command line, checked as far as it can be without knowing the world size (the MPI backend
/// checks -g and --root once MPI is up). Prints the usage and exits 0 on -h.
Options parse(int argc, char** argv);

bool is_fused(const std::string& op);

double median(std::vector<double> v);

/// The sizes of the sweep -b, -b*f, ... up to -e.
std::vector<std::int64_t> sweep(const Options& o);

/// Per-element comparison of one rank's output: bit differences from ref/, and with a lossy wire
/// the error against the uncompressed result. Mergeable across ranks.
struct Errors {
  std::int64_t wrong = 0;
  double max_abs = 0, max_rel = 0;
  double sq = 0;       // sum of squared errors
  std::int64_t n = 0;  // elements in `sq`
  double rms() const;
  /// Adds `count` floats of `got` against `expect` (bitwise) and, when `exact` is not null,
  /// against `exact` (numeric error).
  void add(const float* got, const float* expect, const float* exact, std::size_t count);
};

struct Row {
  std::int64_t bytes = 0;
  std::int64_t count = 0;
  std::string shape;       // fused ops
  double seconds = 0;      // collectives: fusedcoll's call; fused: unfused
  double up_seconds = 0;   // fused: scale_up
  double out_seconds = 0;  // fused: scale_out
  double busbw_factor = 1;
  double wire = -1;  // bytes per rank per call (fused: scale_up); < 0: not measured
  Errors err;
  // MPI collectives: Open MPI's own collective on the same buffers (< 0: none).
  double base_seconds = -1;
  std::int64_t base_wrong = 0;
};

/// Prints rows as a table, CSV or JSON. Collectives with a baseline get its columns.
class Printer {
 public:
  /// `ranks` the world size; `setup` what runs the ranks (header line); `baseline` the name of
  /// the collective compared against ("" for none).
  Printer(const Options& o, int ranks, std::string setup, std::string baseline);
  ~Printer();
  Printer(const Printer&) = delete;
  Printer& operator=(const Printer&) = delete;
  /// Opens the --csv-file (only the rank that prints calls header); throws `fc::InvalidArgument`
  /// when it cannot be written or already holds other columns.
  void header();
  void row(const Row& r);
  void footer();

  /// The first line --csv-file holds for `op` (fused or collective columns).
  static std::string file_header(const std::string& op);

 private:
  bool lossy() const { return o_.wire.format != fc::WireFormat::none; }
  bool has_baseline() const { return !baseline_.empty() && !is_fused(o_.op); }

  const Options& o_;
  int ranks_;
  std::string setup_, baseline_;
  bool first_ = true;
  std::FILE* file_ = nullptr;  // --csv-file, open between header() and footer()
};

// ---------------------------------------------------------------------------------------------
// Collectives: `size` is nccl-tests' size (the bytes of the whole buffer a rank holds).

/// One rank's arguments of one collective call.
using AnyArgs = std::variant<fc::AllReduceArgs, fc::ReduceScatterArgs, fc::AllGatherArgs,
                             fc::AllToAllvArgs, fc::BroadcastArgs>;

/// Every rank's buffers and arguments for one collective at one size.
struct CollectiveCase {
  std::vector<std::vector<float>> send, recv;
  std::function<void(fc::Communicator&)> call;  // the op on comm.rank()'s buffers
  /// The op with comm.rank()'s receive buffer at `recv` instead (same size).
  std::function<void(fc::Communicator&, float* recv)> call_into;
  /// Every rank's arguments with its buffers at send[r] and recv[r] instead (same sizes; e.g.
  /// device copies).
  std::function<std::vector<AnyArgs>(const std::vector<const float*>& send,
                                     const std::vector<float*>& recv)>
      args_at;
  /// ref/ on the same inputs with wire options `wire`, into `out` (one buffer per rank).
  std::function<void(const fc::CompressionOptions& wire, std::vector<std::vector<float>>& out)> ref;
  std::int64_t bytes = 0, count = 0;
  std::int64_t requested = 0;  // the bytes make_collective was asked for (same shape again)
  double busbw_factor = 1;
  // The layout, for a baseline that calls another library on the same buffers.
  std::vector<std::int64_t> pieces;  // ReduceScatter / AllGather: per-rank element counts
  std::int64_t per_peer = 0;         // All-to-All: elements to each peer
};

/// Throws `fc::InvalidArgument` naming `what`, the bytes it needs and the bytes available when
/// `bytes` per process, times `o.processes_per_host`, exceed the host's available memory
/// (MemAvailable): a clear error where the allocation would otherwise succeed (overcommit) and
/// the process be killed once it touches the memory. Where that figure is unknown, does nothing.
void require_memory(const Options& o, double bytes, const std::string& what);

/// The size of a collective row: `b` rounded down to a multiple of 4 * P bytes (at least that),
/// so that every rank's piece is whole elements.
std::int64_t collective_bytes(std::int64_t b, int ranks);

/// The case of `o.op` at `bytes` over `ranks` ranks, inputs drawn in `values` mode. On the heap:
/// its closures refer to its buffers. Checks first that its buffers fit (`require_memory`).
std::unique_ptr<CollectiveCase> make_collective(const Options& o, int ranks, std::int64_t bytes,
                                                fc::ValueMode values = fc::ValueMode::random);

/// Expected outputs for checking `c` after the op ran: `expect` ref/ with the run's wire options,
/// `exact` ref/ uncompressed (filled only for a lossy wire). Then poisons every receive buffer.
void prepare_check(CollectiveCase& c, const Options& o, std::vector<std::vector<float>>& expect,
                   std::vector<std::vector<float>>& exact);
/// Compares rank `r`'s receive buffer with what `prepare_check` expected.
void check_rank(const CollectiveCase& c, int r, const std::vector<std::vector<float>>& expect,
                const std::vector<std::vector<float>>& exact, Errors& err);

/// `c`'s check: `prepare_check`, then `run()` (the op into the case's receive buffers), then rank
/// `me`'s output (-1: every rank's) against the expected ones.
Errors check_collective(CollectiveCase& c, const Options& o, const std::function<void()>& run,
                        int me = -1);

/// A baseline's check: a case of `c`'s op and shape on integer inputs (their sums are exact in
/// any order, and the baselines fix none), `run(case)` into its receive buffers, against ref/
/// without compression (the baselines have none); rank `me`'s output (-1: every rank's).
Errors check_baseline(const CollectiveCase& c, const Options& o, int ranks,
                      const std::function<void(CollectiveCase&)>& run, int me = -1);

// ---------------------------------------------------------------------------------------------
// Fused operators: the size is the bytes of one rank's output.

struct FusedCase {
  std::string shape;
  std::int64_t bytes = 0;
  std::function<void(fc::Communicator&, fc::Mode)> call;
  /// The op with comm.rank()'s output moved to `out` (same shape, dense); empty for GemvAllReduce.
  std::function<void(fc::Communicator&, fc::Mode, float* out)> call_into;
  std::function<void()> ref;                                  // ref/ into the outputs
  std::function<std::vector<std::vector<float>*>()> outputs;  // per rank
};

/// The case of fused `o.op` whose output per rank is about `bytes`, after checking that every
/// rank's inputs and outputs fit (`require_memory`).
FusedCase make_fused_case(const Options& o, int ranks, std::int64_t bytes);

/// Runs ref/ into every rank's output and returns copies of them (the expected outputs).
std::vector<std::vector<float>> fused_expected(const FusedCase& c);

inline constexpr fc::Mode kModes[] = {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out};

// ---------------------------------------------------------------------------------------------
// Sweeps: what every backend does per size.

/// The collective sweep of `o` over `ranks` ranks: per size, the case and a Row with its size
/// columns, which `measure(c, row)` completes (times, checks); each row's wrong elements
/// (fusedcoll's and the baseline's) are summed, and the row printed where `print` (MPI: rank 0
/// only). Returns the sum.
std::int64_t collective_sweep(const Options& o, int ranks, Printer& out, bool print,
                              const std::function<void(CollectiveCase&, Row&)>& measure);

/// The same for a fused operator: per size, the case and a Row with its size and shape.
std::int64_t fused_sweep(const Options& o, int ranks, Printer& out, bool print,
                         const std::function<void(FusedCase&, Row&)>& measure);

/// `--backend mpi`: this process is one rank of an mpiexec job; initialises MPI, runs `o`, prints
/// on rank 0 and returns the exit status (a failure on any rank aborts the whole job). Defined in
/// perf_mpi.cpp, which is built only when the build has MPI.
int run_mpi(const Options& o, int argc, char** argv);

/// The exit status of `--backend gpu` where no GPU is visible (ctest's SKIP_RETURN_CODE).
inline constexpr int kNoDevice = 77;

/// `--backend gpu`: the collectives on gpu::World (P ranks on one device) against a copy-engine
/// or fold-kernel baseline on the same device; prints and returns the exit status. Defined in
/// perf_gpu.cpp, which is built only when the build has a GPU backend.
int run_gpu(const Options& o);

}  // namespace perf
