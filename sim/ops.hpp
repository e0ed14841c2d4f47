#pragma once
/// @file
/// The three fused operators as simulator programs, in each of their modes (docs/simulation.md,
/// "Scale-out", "fusedcoll-sim op"). A program prices what the emulator's kernel of that mode
/// does (emu/embedding_alltoall.cpp, emu/gemm_alltoall.cpp, emu/gemv_allreduce.cpp): the same
/// plan (detail/*_plan.hpp), the same tiles with the same work (the cost model's), the same
/// workgroup grid and compute-unit assignment, the same puts. Inputs are the generators'
/// problems (fusedcoll/inputs.hpp), so an EmbeddingAllToAll is priced with the very bag lengths
/// the emulator pools.

#include <cstdint>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/inputs.hpp"
#include "sim/sim.hpp"

namespace fusedcoll::sim {

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
