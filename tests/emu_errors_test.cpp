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

// Sizes no memory can have (a count, displacement or product over 2^63 bytes) are InvalidArgument
// naming the field and value on every collective and operator, before anything is allocated.
constexpr std::int64_t kHuge = std::int64_t{1} << 62;  // 2^62 f32 = 2^64 bytes

template <class Call>
void run_world(int P, Call&& call) {
  fusedcoll::emu::World(options(P)).run([&](Communicator& comm) { call(comm); });
}

TEST(EmuErrors, ImpossibleSizesAreRejectedOnEveryCollective) {
  const int P = 2;
  std::vector<float> s(8), r(8);
  using fusedcoll::DType;
  EXPECT_INVALID(run_world(P, [&](Communicator& c) {
    fusedcoll::all_reduce(c, {s.data(), r.data(), kHuge, DType::f32});
  }),
                 "AllReduce count", kHuge);
  EXPECT_INVALID(run_world(P, [&](Communicator& c) {
    fusedcoll::all_to_allv(c, {s.data(), r.data(), {2, 2}, {0, kHuge}, {2, 2}, {0, 2}, DType::f32});
  }),
                 "send_displs[1]", kHuge);
  EXPECT_INVALID(run_world(P, [&](Communicator& c) {
    fusedcoll::all_to_allv(c, {s.data(), r.data(), {2, 2}, {0, 2}, {2, 2}, {kHuge, 0}, DType::f32});
  }),
                 "recv_displs[0]", kHuge);
  EXPECT_INVALID(run_world(P, [&](Communicator& c) {
    fusedcoll::reduce_scatter(c, {s.data(), r.data(), {1, kHuge}, DType::f32});
  }),
                 "recv_counts", kHuge + 1);
  EXPECT_INVALID(run_world(P, [&](Communicator& c) {
    fusedcoll::all_gather(c, {s.data(), r.data(), {kHuge, 1}, DType::f32});
  }),
                 "recv_counts", kHuge + 1);
  EXPECT_INVALID(run_world(P, [&](Communicator& c) {
    fusedcoll::broadcast(c, {s.data(), r.data(), kHuge, DType::f32, 0});
  }),
                 "Broadcast count", kHuge);
}

TEST(EmuErrors, ImpossibleSizesAreRejectedOnEveryOperator) {
  const int P = 2;
  auto emb = fusedcoll::make_world(emb_problem(P, 0, 4));
  auto gemm = fusedcoll::make_world(gemm_problem(P, 0, 5));
  auto gemv = fusedcoll::make_world(
      fusedcoll::GemvProblem{.world_size = P, .m = 2, .n = 9, .k_splits = {3, 4}});
  auto emb_args = fusedcoll::args_of(emb);
  auto gemm_args = fusedcoll::args_of(gemm);
  auto gemv_args = fusedcoll::args_of(gemv);
  for (auto& a : emb_args) a.dim = kHuge;
  for (auto& a : gemv_args) a.n = kHuge;
  for (auto& a : gemm_args) a.k = a.n = std::int64_t{1} << 32;
  for (Mode mode : {Mode::unfused, Mode::scale_up, Mode::scale_out}) {
    EXPECT_INVALID(run_world(P, [&](Communicator& c) {
      fusedcoll::embedding_alltoall(c, emb_args[c.rank()], mode);
    }),
                   "B * T * dim", kHuge);
    EXPECT_INVALID(run_world(P, [&](Communicator& c) {
      fusedcoll::gemv_allreduce(c, gemv_args[c.rank()], mode);
    }),
                   "n * sum of k_splits", kHuge);
    EXPECT_INVALID(run_world(P, [&](Communicator& c) {
      fusedcoll::gemm_alltoall(c, gemm_args[c.rank()], mode);
    }),
                   "k * n", std::int64_t{1} << 32);
  }
}

}  // namespace
