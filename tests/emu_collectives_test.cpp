// The emulator's standalone collectives against ref/, bit for bit. Every case gives each rank one
// block of memory holding its send and receive regions (with poisoned gaps around them); the
// emulator runs on one copy of every block and ref/ on an identical copy, then the whole blocks
// are compared with memcmp. So the outputs must match exactly, inputs must be left alone (except
// in place), and nothing outside the receive regions may be written.
//
// Many cases run back to back inside one World::run, which also checks that scratch buffers and
// signal slots are reused correctly across calls (and across different collectives).

#include <gtest/gtest.h>

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

#include "common/collective_cases.hpp"

namespace {

using namespace fctest::collectives;  // Case, add_case, the builders and grids

using fusedcoll::emu::World;
using fusedcoll::emu::WorldOptions;

/// A mix of every collective, used under fuzzing and small residency limits.
void add_mix(Cases& cases, int P, std::uint64_t seed) {
  for (AllReduceAlgo algo : kAlgos) {
    add_all_reduce(cases, P, 1000, DType::f32, ReduceOp::sum, algo, false, seed);
    add_all_reduce(cases, P, 7, DType::f32, ReduceOp::min, algo, true, seed);
    add_all_reduce(cases, P, 2 * 16384 * P + 5, DType::f32, ReduceOp::avg, algo, true, seed);
  }
  add_all_to_allv(cases, P, DType::f16, 1, seed);
  add_all_to_allv(cases, P, DType::f32, 1000, seed);
  add_reduce_scatter(cases, uneven(P, 2, 300, seed), DType::f32, ReduceOp::sum, false, seed);
  add_reduce_scatter(cases, uneven(P, 2, 40000, seed), DType::f32, ReduceOp::max, true, seed);
  add_all_gather(cases, uneven(P, 2, 300, seed), DType::i64, true, seed);
  add_all_gather(cases, uneven(P, 2, 40000, seed), DType::f16, false, seed);
  for (int root = 0; root < P; ++root)
    add_broadcast(cases, P, root == 0 ? 70000 : 100, DType::f32, root, root % 2 == 1, seed);
}

// --- Tests --------------------------------------------------------------------------------------

struct WorldParam {
  int P;
  int C;
};

std::vector<WorldParam> worlds() {
  std::vector<WorldParam> out;
  for (int P : {1, 2, 3, 4, 8})
    for (int C : {1, 2, 4}) out.push_back({P, C});
  return out;
}

class EmuCollectives : public ::testing::TestWithParam<WorldParam> {
 protected:
  WorldOptions options() const {
    WorldOptions o;
    o.world_size = GetParam().P;
    o.device.compute_units = GetParam().C;
    return o;
  }
};

TEST_P(EmuCollectives, AllReduceMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  add_all_reduce_grid(cases, P, 2 * 16384 * P + 3);  // several 64 KiB tiles per chunk
  run_cases(world, cases);
}

TEST_P(EmuCollectives, AllToAllvMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  add_all_to_allv_grid(cases, P);
  run_cases(world, cases);
}

TEST_P(EmuCollectives, ReduceScatterMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  add_reduce_scatter_grid(cases, P);
  run_cases(world, cases);
}

TEST_P(EmuCollectives, AllGatherMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  add_all_gather_grid(cases, P);
  run_cases(world, cases);
}

TEST_P(EmuCollectives, BroadcastMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  add_broadcast_grid(cases, P);
  run_cases(world, cases);
}

INSTANTIATE_TEST_SUITE_P(Worlds, EmuCollectives, ::testing::ValuesIn(worlds()),
                         [](const ::testing::TestParamInfo<WorldParam>& i) {
                           // make_string: GCC 12 warns falsely (-Wrestrict) on "P" + to_string.
                           return fusedcoll::detail::make_string("P", i.param.P, "_C", i.param.C);
                         });

// Schedule fuzzing (random workgroup start order, random delays before puts and signals) must not
// change a bit. Every collective, 50 seeds (10 under the sanitizers, which are 5-15x slower; the
// Release run does all 50), P in {2, 3, 4, 8}.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kFuzzSeeds = 10;
#else
constexpr std::uint64_t kFuzzSeeds = 50;
#endif
TEST(EmuCollectivesFuzz, FiftySeedsBitExact) {
  constexpr int kWorlds[] = {2, 3, 4, 8};
  for (std::uint64_t fuzz = 1; fuzz <= kFuzzSeeds; ++fuzz) {
    WorldOptions o;
    o.world_size = kWorlds[fuzz % 4];
    o.device.compute_units = 2;
    o.fuzz_seed = fuzz * 7919;
    World world(o);
    SCOPED_TRACE(name_of(o));
    Cases cases;
    add_mix(cases, o.world_size, 600 + fuzz);
    run_cases(world, cases);
  }
}

// Persistent grids must not rely on more residency than there is: one or two resident WGs.
TEST(EmuCollectivesResidency, TinyDevicesStillComplete) {
  for (int resident : {1, 2}) {
    WorldOptions o;
    o.world_size = 4;
    o.device.compute_units = 1;
    o.device.max_resident_wgs = resident;
    o.fuzz_seed = 99 + resident;
    World world(o);
    SCOPED_TRACE(name_of(o));
    Cases cases;
    add_mix(cases, o.world_size, 700 + resident);
    run_cases(world, cases);
  }
}

// A chunk above 64 tiles of 64 KiB: tiles grow instead of outnumbering the slots.
TEST(EmuCollectivesLarge, ChunksBeyondTheTileLimit) {
  WorldOptions o;
  o.world_size = 2;
  o.device.compute_units = 2;
  World world(o);
  Cases cases;
  const std::int64_t count = 2 * 64 * 16384 + 4099;  // chunks of > 64 tiles of 16384 elements
  for (AllReduceAlgo algo : kAlgos)
    add_all_reduce(cases, 2, count, DType::i32, ReduceOp::sum, algo, algo == AllReduceAlgo::ring,
                   800);
  add_reduce_scatter(cases, {count / 2, count - count / 2}, DType::f32, ReduceOp::sum, false, 801);
  add_all_gather(cases, {count / 2, 3}, DType::i32, false, 802);
  add_broadcast(cases, 2, count, DType::i32, 1, false, 803);
  run_cases(world, cases);
}

// The worked example of docs/semantics.md: direct and ring differ, with literal expected bits.
TEST(EmuCollectivesSemantics, DirectAndRingOrdersDiffer) {
  WorldOptions o;
  o.world_size = 3;
  o.device.compute_units = 1;
  World world(o);
  const float v[3] = {1e8f, 1.0f, -1e8f};
  std::vector<std::vector<float>> direct(3, std::vector<float>(3)), ring = direct;
  world.run([&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> send(3, v[r]);
    fusedcoll::all_reduce(
        comm, {send.data(), direct[r].data(), 3, DType::f32, ReduceOp::sum, AllReduceAlgo::direct});
    fusedcoll::all_reduce(
        comm, {send.data(), ring[r].data(), 3, DType::f32, ReduceOp::sum, AllReduceAlgo::ring});
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(direct[r][0]), 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(direct[r][1]), 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(direct[r][2]), 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[r][0]), 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[r][1]), 0x3F800000u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[r][2]), 0u);
  }
}

// NaN payloads, signed zeros and infinities: min/max keep the pinned operand, sums the first NaN,
// so the fold order shows in the bits; the emulator must reproduce each algorithm's.
TEST(EmuCollectivesSemantics, SpecialValuesFollowTheFoldOrder) {
  for (int P : {2, 3, 5}) {
    WorldOptions o;
    o.world_size = P;
    o.device.compute_units = 2;
    World world(o);
    SCOPED_TRACE(name_of(o));
    Cases cases;
    const std::int64_t count = 97;
    std::uint64_t seed = 900;
    for (ReduceOp op : kOps)
      for (AllReduceAlgo algo : kAlgos)
        add_special_values_all_reduce(cases, P, count, op, algo, ++seed);
    for (ReduceOp op : kOps) {
      ++seed;
      add_reduce_scatter(cases, uneven(P, 2, 40, seed), DType::f32, op, false, seed);
    }
    run_cases(world, cases);
  }
}

// In virtual time on a GPU preset a chunk is spread over the device's workgroups: here 256 tiles
// of 4 KiB per chunk (the most a segment may have, so the slots' stride is the largest), uneven
// last tiles, plain and compressed wires, both AllReduce algorithms, ReduceScatter and All-to-All.
TEST(EmuCollectivesVirtual, GpuTilingMatchesRef) {
  const int P = 4;
  WorldOptions o;
  o.world_size = P;
  o.device.compute_units = 2;
  o.clock = fusedcoll::emu::ClockKind::virtual_time;
  o.preset = "mi250x";
  World world(o);
  SCOPED_TRACE(name_of(o));
  Cases cases;
  const std::int64_t count = 256 * 1024 * P + 7;
  std::uint64_t seed = 1200;
  for (AllReduceAlgo algo : kAlgos) {
    add_all_reduce(cases, P, count, DType::f32, ReduceOp::sum, algo, false, ++seed);
    add_all_reduce(cases, P, count, DType::f32, ReduceOp::avg, algo, algo == AllReduceAlgo::ring,
                   ++seed, {.format = fusedcoll::WireFormat::f16});
  }
  ++seed;
  add_reduce_scatter(cases, uneven(P, 2, 200000, seed), DType::f32, ReduceOp::sum, false, seed);
  add_all_to_allv(cases, P, DType::f32, 20000, ++seed, {.format = fusedcoll::WireFormat::bf16});
  run_cases(world, cases);
}

}  // namespace
