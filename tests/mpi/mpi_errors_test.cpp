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

fusedcoll::GemvProblem small_gemv() {
  fusedcoll::GemvProblem gp;
  gp.world_size = world_size();
  gp.m = 2;
  gp.n = 9;
  gp.k_splits.assign(static_cast<std::size_t>(world_size()), 3);
  return gp;
}

/// This rank's data of a small, valid problem of each operator (embedding seed `seed`, GEMM
/// seed `seed + 1`), for the tests to break one field of.
struct EachOperator {
  explicit EachOperator(std::uint64_t seed)
      : emb(emb_problem(world_size(), 0, seed), me()),
        gemm(gemm_problem(world_size(), 0, seed + 1), me()),
        gemv(small_gemv(), me()) {}
  fusedcoll::EmbeddingRankData emb;
  fusedcoll::GemmRankData gemm;
  fusedcoll::GemvRankData gemv;
};

TEST(MpiErrors, UnknownModeIsRejectedOnEveryOperator) {
  EachOperator ops(1);
  EXPECT_INVALID(fusedcoll::embedding_alltoall(fctest::world(), ops.emb.args(), kBadMode),
                 "unknown mode", 7);
  EXPECT_INVALID(fusedcoll::gemv_allreduce(fctest::world(), ops.gemv.args(), kBadMode),
                 "unknown mode", 7);
  EXPECT_INVALID(fusedcoll::gemm_alltoall(fctest::world(), ops.gemm.args(), kBadMode),
                 "unknown mode", 7);
  fusedcoll::barrier(fctest::world());
}

TEST(MpiErrors, UnknownModeOnOneRankIsReportedOnEveryRank) {
  fusedcoll::EmbeddingRankData emb(emb_problem(world_size(), 0, 3), me());
  EXPECT_INVALID(fusedcoll::embedding_alltoall(fctest::world(), emb.args(),
                                               me() == 0 ? kBadMode : Mode::scale_up),
                 "collective call mismatch", "mode 7");
  fusedcoll::barrier(fctest::world());
}

// Sizes no memory can have (a count, displacement or product over 2^63 bytes) are InvalidArgument
// naming the field and value on every rank, on every collective and operator, and the
// communicator stays usable.
constexpr std::int64_t kHuge = std::int64_t{1} << 62;  // 2^62 f32 = 2^64 bytes

TEST(MpiErrors, ImpossibleSizesAreRejectedOnEveryCollective) {
  using fusedcoll::DType;
  auto& comm = fctest::world();
  const auto P = static_cast<std::size_t>(world_size());
  std::vector<float> s(8), r(8);
  EXPECT_INVALID(fusedcoll::all_reduce(comm, {s.data(), r.data(), kHuge, DType::f32}),
                 "AllReduce count", kHuge);
  std::vector<std::int64_t> ones(P, 1), iota(P), huge_at_0(P, 0);
  for (std::size_t q = 0; q < P; ++q) iota[q] = static_cast<std::int64_t>(q);
  huge_at_0[0] = kHuge;
  EXPECT_INVALID(
      fusedcoll::all_to_allv(comm, {s.data(), r.data(), ones, huge_at_0, ones, iota, DType::f32}),
      "send_displs[0]", kHuge);
  EXPECT_INVALID(
      fusedcoll::all_to_allv(comm, {s.data(), r.data(), ones, iota, ones, huge_at_0, DType::f32}),
      "recv_displs[0]", kHuge);
  std::vector<std::int64_t> counts(P, 1);
  counts[0] = kHuge;
  EXPECT_INVALID(fusedcoll::reduce_scatter(comm, {s.data(), r.data(), counts, DType::f32}),
                 "recv_counts");
  EXPECT_INVALID(fusedcoll::all_gather(comm, {s.data(), r.data(), counts, DType::f32}),
                 "recv_counts");
  EXPECT_INVALID(fusedcoll::broadcast(comm, {s.data(), r.data(), kHuge, DType::f32, 0}),
                 "Broadcast count", kHuge);
  fusedcoll::barrier(comm);
  std::vector<float> x(4, static_cast<float>(me())), y(4);
  fusedcoll::all_reduce(comm, {x.data(), y.data(), 4, DType::f32});
  EXPECT_EQ(y[0], static_cast<float>(world_size() * (world_size() - 1) / 2));
}

TEST(MpiErrors, ImpossibleSizesAreRejectedOnEveryOperator) {
  EachOperator ops(4);
  auto emb_args = ops.emb.args();
  auto gemm_args = ops.gemm.args();
  auto gemv_args = ops.gemv.args();
  emb_args.dim = kHuge;
  gemv_args.n = kHuge;
  gemm_args.k = gemm_args.n = std::int64_t{1} << 32;
  for (Mode mode : {Mode::unfused, Mode::scale_up, Mode::scale_out}) {
    EXPECT_INVALID(fusedcoll::embedding_alltoall(fctest::world(), emb_args, mode), "B * T * dim",
                   kHuge);
    EXPECT_INVALID(fusedcoll::gemv_allreduce(fctest::world(), gemv_args, mode),
                   "n * sum of k_splits", kHuge);
    EXPECT_INVALID(fusedcoll::gemm_alltoall(fctest::world(), gemm_args, mode), "k * n",
                   std::int64_t{1} << 32);
  }
  fusedcoll::barrier(fctest::world());
}

}  // namespace
