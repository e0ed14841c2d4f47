#pragma once
/// @file
/// The three fused operators as simulator programs, in each of their modes (docs/simulation.md,
/// "Scale-out", "fusedcoll-sim op"), and the pricing of their kernels that sim/dlrm.cpp's
/// iteration uses too: one pricing of each operator for both. A program prices what the
/// emulator's kernel of that mode does (emu/embedding_alltoall.cpp, emu/gemm_alltoall.cpp,
/// emu/gemv_allreduce.cpp): the same plan (detail/*_plan.hpp: tiles, order, grids, unpack
/// shares), the same tiles with the same work (the cost model's), the same compute-unit
/// assignment, the same puts. Inputs are the generators' problems (fusedcoll/inputs.hpp), so an
/// EmbeddingAllToAll is priced with the very bag lengths the emulator pools.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/detail/embedding_plan.hpp"
#include "fusedcoll/detail/gemm_plan.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/model.hpp"
#include "sim/sim.hpp"

namespace fusedcoll::sim {

/// What one work item costs: its compute unit's time (`model::seconds`) and its workgroup's
/// (`model::latency_seconds`: the item holds its workgroup at least that long from when the
/// workgroup was free, however idle its unit; docs/simulation.md, "Latency-bound tiles"). A plain
/// number of seconds is a cost without latency.
struct Cost {
  double seconds = 0, latency = 0;
  Cost() = default;
  Cost(double s, double l = 0) : seconds(s), latency(l) {}  // implicit: seconds alone
};
/// A compute span doing `works` on a device of `c`, as the emulator prices one: its unit's time
/// (`model::span_seconds`, a node's memory shared by its G devices where the preset says so)
/// and its latency (`model::latency_seconds`, summed). `working_set`: the bytes the kernel's
/// device works over, call after call (0: undeclared), for the cache term (`model::in_cache`), as
/// the emulator's `Rank::declare_working_set`.
Cost cost_of(const Cluster& c, std::initializer_list<model::Work> works, double working_set = 0);
inline Cost cost_of(const Cluster& c, const model::Work& w, double working_set = 0) {
  return cost_of(c, {w}, working_set);
}

/// A persistent kernel on one device as the emulator runs it: grid = detail::persistent_grid(work,
/// resident workgroups), workgroup w on compute unit w mod CUs (emu/ops.hpp `grid_for`,
/// emu/vtime.cpp). Times count from the kernel's first workgroup start; `seconds()` adds the
/// launch.
class Kernel {
 public:
  Kernel(const Cluster& c, std::size_t work);
  int grid() const { return grid_; }
  /// The next item claimed (`WgContext::claim`): on the CU, of those the grid occupies, that frees
  /// first, the lowest on a tie (the emulator's driver resumes the lowest workgroup id first).
  /// With a latency, by the workgroup that can start it first (its own and its CU's free time),
  /// on a tie the one free longest, then the lowest (the emulator's deferred claims). Returns
  /// the item's end.
  double claim(Cost cost);
  /// Item i dealt statically, to workgroup i mod grid (the owners' reductions, the collectives).
  /// Returns the item's end.
  double deal(std::size_t i, Cost cost);
  /// Work of workgroup w, all at once (a copy after a wait).
  void add(int w, Cost cost);
  double makespan() const;
  /// From the host's call: the launch, then the makespan.
  double seconds() const;

 private:
  /// Workgroup w's next item: its unit from max(its, the unit's free time), the workgroup until
  /// the later of that plus the unit's time and its own free time plus the latency.
  double book(std::size_t w, Cost cost);
  void track_workgroups();

  const Cluster* c_;
  int grid_ = 1;
  std::vector<double> cu_;
  std::vector<std::pair<double, int>> free_;  ///< claim's heap of the grid's CUs (empty: rebuild)
  std::vector<double> wg_;  ///< each workgroup's free time, once an item has a latency (else empty)
};

/// The makespan of a copy kernel over `work` items whose workgroup w of `grid` copies
/// `bytes(w, grid)` bytes: the unpacks after an exchange (no launch: they run in the kernel that
/// waited). `working_set` as `cost_of`'s.
double copy_kernel(const Cluster& c, std::size_t work,
                   const std::function<std::int64_t(std::int64_t w, std::int64_t grid)>& bytes,
                   double working_set = 0);

// --- EmbeddingAllToAll --------------------------------------------------------------------------

/// What prices one rank's EmbeddingAllToAll besides its plan.
struct EmbeddingCost {
  /// The cost of pooling samples [b0, b1) (global ids) of local table k.
  std::function<Cost(int k, std::int64_t b0, std::int64_t b1)> pool;
  /// [T] floats per sample of each table (global ids, Plan::ids): the plan's D for the operator;
  /// a shard's columns where a model cuts tables by column (sim/dlrm.cpp). A slice carries its
  /// source's widths, a scale_up tile its table's.
  std::vector<std::int64_t> width;
};

/// EmbeddingAllToAll's kernels on rank pl.me in `mode`. Unfused: the pooling kernel (a compute
/// step, `kernel_phase`), then the All-to-All kernel (an exchange: every block at its launch, then
/// the unpack, `exchange_phase`). Fused: one exchange (`exchange_phase`): scale_up sends each
/// tile's rows as it ends, scale_out each slice with its last tile and unpacks after the exchange.
Program embedding_steps(const detail::embedding::Plan& pl, const EmbeddingCost& cost,
                        const Cluster& c, Mode mode, const std::string& kernel_phase,
                        const std::string& exchange_phase);

// --- GemmAllToAll -------------------------------------------------------------------------------

/// GemmAllToAll's unfused expert kernel on rank pl.me, launch included: every local tile in
/// Plan::unfused_tiles order, claimed, a panel's first tile paying its first touch. A dense GEMM
/// cut in the operator's tiles is the kernel of a one-rank, one-expert plan (sim/dlrm.cpp's MLPs).
double expert_kernel_seconds(const detail::gemm::Plan& pl, const Cluster& c);

// --- The operators' programs (fusedcoll-sim op, sim_emu_test) -----------------------------------

Program embedding_program(const EmbeddingProblem& pb, const Cluster& c, int rank, Mode mode);
Program gemm_program(const GemmProblem& pb, const Cluster& c, int rank, Mode mode);
Program gemv_program(const GemvProblem& pb, const Cluster& c, int rank, Mode mode);

// --- fusedcoll-sim op's problems ----------------------------------------------------------------

/// EmbeddingAllToAll: T tables of `dim`, table t on rank t mod P, the global batch split evenly,
/// bag lengths uniform in [min_bag, max_bag] (drawn as the input generator draws them).
struct EmbeddingOp {
  std::int64_t tables = 26, dim = 128, global_batch = 65536, min_bag = 1, max_bag = 1;
};
EmbeddingProblem embedding_problem(const EmbeddingOp& op, int ranks);

/// GemmAllToAll (MoE): E experts on ranks round-robin, every rank routes `tokens` rows evenly to
/// the experts, each expert multiplies by its k x n weight.
struct GemmOp {
  std::int64_t experts = 0, tokens = 4096, k = 1024, n = 1024;
};
GemmProblem gemm_problem(const GemmOp& op, int ranks);

/// GemvAllReduce: y = x W with W's k rows split evenly over the ranks, AllReduce of the m x n y.
struct GemvOp {
  std::int64_t m = 1, k = 8192, n = 8192;
};
GemvProblem gemv_problem(const GemvOp& op, int ranks);

/// The problem `fusedcoll-perf OP` runs at `bytes` (its -b size) on `ranks` ranks
/// (bench/perf_common.cpp, make_fused_case): op is embedding, gemm or gemv.
EmbeddingProblem perf_embedding(int ranks, std::int64_t bytes);
GemmProblem perf_gemm(int ranks, std::int64_t bytes);
GemvProblem perf_gemv(int ranks, std::int64_t bytes);

}  // namespace fusedcoll::sim
