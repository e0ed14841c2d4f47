// Bad calls on the emulator: each is `InvalidArgument` naming the offending value, on every rank,
// before any data moves (tests/errors_test.cpp checks the same rules on ref/'s whole-world entry
// points; this suite checks that the per-rank entry points of a running world apply them too).

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/errors.hpp"
#include "common/op_problems.hpp"
#include "fusedcoll/communicator.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/inputs.hpp"

namespace {

using namespace fctest::ops;  // emb_problem, gemm_problem
using fusedcoll::Communicator;
using fusedcoll::Mode;

fusedcoll::emu::WorldOptions options(int P) {
  fusedcoll::emu::WorldOptions o;
  o.world_size = P;
  o.device.compute_units = 1;
  o.timeout_s = 20;
  return o;
}

const Mode kBadMode = static_cast<Mode>(7);

TEST(EmuErrors, UnknownModeIsRejectedOnEveryOperator) {
  const int P = 2;
  auto emb = fusedcoll::make_world(emb_problem(P, 0, 1));
  auto gemm = fusedcoll::make_world(gemm_problem(P, 0, 2));
  auto gemv = fusedcoll::make_world(
      fusedcoll::GemvProblem{.world_size = P, .m = 2, .n = 9, .k_splits = {3, 4}});
  const auto emb_args = fusedcoll::args_of(emb);
  const auto gemm_args = fusedcoll::args_of(gemm);
  const auto gemv_args = fusedcoll::args_of(gemv);
  EXPECT_INVALID(fusedcoll::emu::World(options(P)).run([&](Communicator& comm) {
    fusedcoll::embedding_alltoall(comm, emb_args[comm.rank()], kBadMode);
  }),
                 "unknown mode", 7);
  EXPECT_INVALID(fusedcoll::emu::World(options(P)).run([&](Communicator& comm) {
    fusedcoll::gemv_allreduce(comm, gemv_args[comm.rank()], kBadMode);
  }),
                 "unknown mode", 7);
  EXPECT_INVALID(fusedcoll::emu::World(options(P)).run([&](Communicator& comm) {
    fusedcoll::gemm_alltoall(comm, gemm_args[comm.rank()], kBadMode);
  }),
                 "unknown mode", 7);
}

TEST(EmuErrors, UnknownModeOnOneRankIsTheRootCause) {
  const int P = 3;
  auto emb = fusedcoll::make_world(emb_problem(P, 0, 3));
  const auto args = fusedcoll::args_of(emb);
  EXPECT_INVALID(fusedcoll::emu::World(options(P)).run([&](Communicator& comm) {
    fusedcoll::embedding_alltoall(comm, args[comm.rank()],
                                  comm.rank() == 1 ? kBadMode : Mode::scale_up);
  }),
                 "rank 1", "unknown mode", 7);
}

}  // namespace
