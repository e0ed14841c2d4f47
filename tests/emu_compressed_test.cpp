// The emulator's compressed collectives (wire = f16 / bf16 / E4M3 / E5M2; scaled per tensor or per
// block, pow2 scales, predivided avg) against ref/'s, bit for bit, with the harness of
// emu_collectives_test.cpp: every rank gets one poisoned block of memory holding its send and
// receive regions; emu runs on one copy, ref/ on another, and the whole blocks are compared with
// memcmp. Many calls run back to back in one World::run, so the scratch buffers and slots of
// compressed and plain calls are reused across calls; fuzz seeds shuffle the schedules.

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

#include "common/compressed_cases.hpp"

namespace {

using namespace fctest::collectives;  // Case, run_cases, add_compressed
using fusedcoll::CompressionOptions;
using fusedcoll::Scaling;
using fusedcoll::WireFormat;
using fusedcoll::emu::World;
using fusedcoll::emu::WorldOptions;

// --- Tests --------------------------------------------------------------------------------------

class EmuCompressed : public ::testing::TestWithParam<int> {};

TEST_P(EmuCompressed, EveryCollectiveMatchesRef) {
  const int P = GetParam();
  WorldOptions o;
  o.world_size = P;
  o.device.compute_units = 2;
  World world(o);
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  add_compressed(cases, P, 1000 + P);
  add_compressed_chain(cases, P, 5000 + P);
  run_cases(world, cases);
}

TEST_P(EmuCompressed, SeveralTilesPerChunk) {
  const int P = GetParam();
  WorldOptions o;
  o.world_size = P;
  o.device.compute_units = 2;
  World world(o);
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  add_compressed_large(cases, P, 2000);
  run_cases(world, cases);
}

INSTANTIATE_TEST_SUITE_P(Worlds, EmuCompressed, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return fusedcoll::detail::make_string("P", i.param);
                         });

// Schedule fuzzing must not change a bit.
TEST(EmuCompressedFuzz, SeedsBitExact) {
  for (std::uint64_t fuzz = 1; fuzz <= 4; ++fuzz) {
    WorldOptions o;
    o.world_size = fuzz % 2 ? 3 : 4;
    o.device.compute_units = 2;
    o.device.max_resident_wgs = fuzz == 4 ? 1 : 0;
    o.fuzz_seed = fuzz * 7919;
    World world(o);
    SCOPED_TRACE(name_of(o));
    Cases cases;
    add_compressed(cases, o.world_size, 3000 + fuzz);
    add_compressed_chain(cases, o.world_size, 6000 + fuzz);
    run_cases(world, cases);
  }
}

// A NaN in the data with a scaled fp8 wire is rejected on every rank, as ref/ rejects it.
TEST(EmuCompressedErrors, NanAmaxIsInvalidOnEveryRank) {
  WorldOptions o;
  o.world_size = 3;
  o.device.compute_units = 1;
  World world(o);
  std::vector<std::vector<float>> send(3, std::vector<float>(10, 1.0f)), recv = send;
  send[2][4] = NAN;
  std::atomic<int> rejected{0};
  EXPECT_THROW(world.run([&](Communicator& comm) {
    const int r = comm.rank();
    try {
      fusedcoll::all_reduce(comm, {send[r].data(), recv[r].data(), 10, DType::f32, ReduceOp::sum,
                                   AllReduceAlgo::ring, {.format = WireFormat::fp8_e4m3}});
    } catch (const fusedcoll::InvalidArgument&) {
      ++rejected;
      throw;
    }
  }),
               fusedcoll::InvalidArgument);
  EXPECT_EQ(rejected.load(), 3);
  send[2][4] = 2.0f;
  World fresh(o);  // a World that saw a failure stays aborted
  fresh.run([&](Communicator& comm) {
    const int r = comm.rank();
    // pow2 scale 64: every value and partial sum (64 .. 256) is exact in E4M3.
    fusedcoll::all_reduce(comm, {send[r].data(), recv[r].data(), 10, DType::f32, ReduceOp::sum,
                                 AllReduceAlgo::ring,
                                 {.format = WireFormat::fp8_e4m3, .pow2_scale = true}});
  });
  EXPECT_EQ(recv[0][4], 4.0f);
  EXPECT_EQ(recv[1][0], 3.0f);
}

// Ranks that disagree on the wire options fail on every rank before anything moves.
TEST(EmuCompressedErrors, MismatchedWireIsInvalid) {
  WorldOptions o;
  o.world_size = 2;
  o.device.compute_units = 1;
  World world(o);
  std::vector<std::vector<float>> send(2, std::vector<float>(10, 1.0f)), recv = send;
  EXPECT_THROW(world.run([&](Communicator& comm) {
    const int r = comm.rank();
    CompressionOptions w{.format = r == 0 ? WireFormat::f16 : WireFormat::bf16};
    fusedcoll::all_reduce(comm, {send[r].data(), recv[r].data(), 10, DType::f32, ReduceOp::sum,
                                 AllReduceAlgo::direct, w});
  }),
               fusedcoll::InvalidArgument);
  EXPECT_EQ(recv[0], send[0]);
}

}  // namespace
