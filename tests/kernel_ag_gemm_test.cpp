// The AllGather + GEMM example (examples/kernels/ag_gemm.hpp), written only against the public
// kernel API: fused and unfused, bit-exact against its oracle's plain loops at P = 1..8 and every
// fuzz seed of the test kit, with the protocol checker on.

#include <gtest/gtest.h>

#include <vector>

#include "fusedcoll/testing.hpp"
#include "kernels/ag_gemm.hpp"
#include "kernels/ag_gemm_oracle.hpp"

namespace fc = fusedcoll;

namespace {

/// Rows per rank of A: uneven, one rank without rows, not multiples of the tile.
std::vector<std::int64_t> rows_for(int P) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(P));
  for (int s = 0; s < P; ++s) rows[s] = (s * 13 + 5) % 41;
  if (P > 2) rows[1] = 0;
  return rows;
}

fc::testing::Result check(bool fused, std::int64_t k, std::int64_t n,
                          const fc::testing::Options& options) {
  return fc::testing::check(
      [&](fc::Communicator& comm, fc::testing::Buffers& out) {
        const int P = comm.size(), r = comm.rank();
        const auto rows = rows_for(P);
        out.add("c", ag_gemm::run(comm, rows, k, n, ag_gemm::a_rows_of(r, rows[r], k),
                                  ag_gemm::b_of(r, k, n), fused));
      },
      [&](int P, int r, fc::testing::Buffers& want) {
        want.add("c", ag_gemm::oracle(r, rows_for(P), k, n));
      },
      options);
}

TEST(AgGemm, FusedIsBitExactAtEveryWorldSizeAndFuzzSeed) {
  fc::testing::Options options;
  options.fuzz_seeds = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  options.world.device.compute_units = 2;
  const auto r = check(true, 23, 70, options);
  EXPECT_TRUE(r) << r.message;
}

TEST(AgGemm, UnfusedIsBitExactAtEveryWorldSize) {
  fc::testing::Options options;
  options.fuzz_seeds = {0, 1};
  const auto r = check(false, 23, 70, options);
  EXPECT_TRUE(r) << r.message;
}

TEST(AgGemm, EmptyShapesStillRunTheCollective) {
  fc::testing::Options options;
  options.world_sizes = {1, 3};
  options.fuzz_seeds = {0, 3};
  for (bool fused : {true, false}) {
    for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{0, 5}, {9, 0}}) {
      const auto r = check(fused, k, n, options);
      EXPECT_TRUE(r) << (fused ? "fused" : "unfused") << " k " << k << " n " << n << ": "
                     << r.message;
    }
  }
}

TEST(AgGemm, InVirtualTimeTooAndAcrossRepeatedCalls) {
  fc::testing::Options options;
  options.world_sizes = {4};
  options.fuzz_seeds = {0};
  options.world.clock = fc::emu::ClockKind::virtual_time;
  options.world.preset = "h100";
  const auto r = fc::testing::check(
      [&](fc::Communicator& comm, fc::testing::Buffers& out) {
        const auto rows = rows_for(4);
        for (int call = 0; call < 3; ++call)  // signals' cumulative targets, buffers reused
          for (bool fused : {true, false})
            out.add(fused ? "fused" + std::to_string(call) : "unfused" + std::to_string(call),
                    ag_gemm::run(comm, rows, 17, 40,
                                 ag_gemm::a_rows_of(comm.rank(), rows[comm.rank()], 17),
                                 ag_gemm::b_of(comm.rank(), 17, 40), fused));
      },
      [&](int, int rank, fc::testing::Buffers& want) {
        for (int call = 0; call < 3; ++call)
          for (bool fused : {true, false})
            want.add(fused ? "fused" + std::to_string(call) : "unfused" + std::to_string(call),
                     ag_gemm::oracle(rank, rows_for(4), 17, 40));
      },
      options);
  EXPECT_TRUE(r) << r.message;
}

}  // namespace
