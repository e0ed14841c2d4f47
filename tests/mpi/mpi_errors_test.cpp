// Bad calls on the MPI backend: each is `InvalidArgument` naming the offending value, on every
// rank, before any data moves, and the communicator stays usable (tests/errors_test.cpp checks the
// same rules on ref/'s whole-world entry points).

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/mpi.hpp"
#include "tests/common/errors.hpp"
#include "tests/common/op_problems.hpp"
#include "tests/mpi/mpi_world.hpp"

namespace {

using namespace fctest::ops;  // emb_problem, gemm_problem
using fusedcoll::Mode;

int me() { return fctest::world().rank(); }
int world_size() { return fctest::world().size(); }

const Mode kBadMode = static_cast<Mode>(7);

TEST(MpiErrors, UnknownModeIsRejectedOnEveryOperator) {
  fusedcoll::EmbeddingRankData emb(emb_problem(world_size(), 0, 1), me());
  fusedcoll::GemmRankData gemm(gemm_problem(world_size(), 0, 2), me());
  fusedcoll::GemvProblem gp;
  gp.world_size = world_size();
  gp.m = 2;
  gp.n = 9;
  gp.k_splits.assign(static_cast<std::size_t>(world_size()), 3);
  fusedcoll::GemvRankData gemv(gp, me());
  EXPECT_INVALID(fusedcoll::embedding_alltoall(fctest::world(), emb.args(), kBadMode),
                 "unknown mode", 7);
  EXPECT_INVALID(fusedcoll::gemv_allreduce(fctest::world(), gemv.args(), kBadMode), "unknown mode",
                 7);
  EXPECT_INVALID(fusedcoll::gemm_alltoall(fctest::world(), gemm.args(), kBadMode), "unknown mode",
                 7);
  fusedcoll::barrier(fctest::world());
}

TEST(MpiErrors, UnknownModeOnOneRankIsReportedOnEveryRank) {
  fusedcoll::EmbeddingRankData emb(emb_problem(world_size(), 0, 3), me());
  EXPECT_INVALID(fusedcoll::embedding_alltoall(fctest::world(), emb.args(),
                                               me() == 0 ? kBadMode : Mode::scale_up),
                 "collective call mismatch", "mode 7");
  fusedcoll::barrier(fctest::world());
}

}  // namespace
