// The emulator runtime (white box: custom kernels against emu/runtime.hpp) and GemvAllReduce on
// it: bit-identical to ref/ in every mode, under schedule fuzzing, and every way of hanging turned
// into a TimeoutError that names who waited for what.

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "emu/runtime.hpp"
#include "emu/state.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"

namespace fc = fusedcoll;
using fc::emu::Cmp;
using fc::emu::SignalOp;
using fc::emu::WgContext;
using fc::emu::WgTask;

namespace {

fc::emu::Rank& rank_of(fc::emu::World& world, const fc::Communicator& comm) {
  return *world.state().ranks[comm.rank()];
}

/// Runs `fn` expecting an exception of type E whose message contains every needle.
template <class E, class F>
void expect_error(F&& fn, std::vector<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception, nothing was thrown";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& n : needles)
      EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in:\n" << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

struct GemvCase {
  int world;
  int compute_units;
  std::int64_t m, n;
  std::vector<std::int64_t> k_splits;
};

void run_gemv_case(const GemvCase& c, fc::Mode mode, std::uint64_t fuzz_seed, int repeats = 2) {
  fc::GemvProblem problem;
  problem.world_size = c.world;
  problem.m = c.m;
  problem.n = c.n;
  problem.k_splits = c.k_splits;
  problem.seed = 1234 + c.n;
  auto expect = fc::make_world(problem);
  auto expect_args = fc::args_of(expect);
  fc::ref::gemv_allreduce(expect_args);

  auto got = fc::make_world(problem);
  auto got_args = fc::args_of(got);
  fc::emu::World world({.world_size = c.world,
                        .device = {.compute_units = c.compute_units},
                        .timeout_s = 20,
                        .fuzz_seed = fuzz_seed});
  // Repeats reuse the slots and scratch buffers: the cumulative-target protocol must hold.
  for (int rep = 0; rep < repeats; ++rep) {
    for (auto& r : got) fc::poison(r.y.data(), r.y.size() * 4);
    world.run([&](fc::Communicator& comm) {
      fc::gemv_allreduce(comm, got_args[comm.rank()], mode);
    });
    for (int r = 0; r < c.world; ++r)
      ASSERT_TRUE(expect[r].y.empty() ||
                  std::memcmp(expect[r].y.data(), got[r].y.data(), expect[r].y.size() * 4) == 0)
          << "GemvAllReduce " << fc::to_string(mode) << " P=" << c.world << " C="
          << c.compute_units << " M=" << c.m << " N=" << c.n << " rank " << r << " repeat "
          << rep << " fuzz seed " << fuzz_seed;
  }
}

class EmuGemv : public ::testing::TestWithParam<std::tuple<int, int, fc::Mode>> {};

TEST_P(EmuGemv, BitIdenticalToRef) {
  const auto [world, cus, mode] = GetParam();
  run_gemv_case({world, cus, 4, 300, fc::split_evenly(257, world)}, mode, 0);
  run_gemv_case({world, cus, 1, 7, fc::split_evenly(33, world)}, mode, 0);   // N < P possible
  run_gemv_case({world, cus, 16, 129, fc::split_evenly(64, world)}, mode, 0);
  std::vector<std::int64_t> uneven(world, 3);
  uneven[0] = 0;  // a rank with no K columns still contributes (a zero partial)
  uneven[world - 1] = 41;
  run_gemv_case({world, cus, 2, 70, uneven}, mode, 0);
  run_gemv_case({world, cus, 0, 50, fc::split_evenly(10, world)}, mode, 0);  // M = 0
  run_gemv_case({world, cus, 3, 0, fc::split_evenly(10, world)}, mode, 0);   // N = 0
}

INSTANTIATE_TEST_SUITE_P(
    Grid, EmuGemv,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Values(1, 2, 4),
                       ::testing::Values(fc::Mode::unfused, fc::Mode::scale_up,
                                         fc::Mode::scale_out)),
    [](const auto& param_info) {
      const auto& p = param_info.param;
      // make_string, not operator+: GCC 12 warns falsely (-Wrestrict) on "P" + std::to_string.
      return fc::detail::make_string("P", std::get<0>(p), "_C", std::get<1>(p), "_",
                                     fc::to_string(std::get<2>(p)));
    });

TEST(EmuGemvFuzz, FiftySeedsEachModeStayBitExact) {
  for (fc::Mode mode : {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out})
    for (std::uint64_t seed = 1; seed <= 50; ++seed) {
      SCOPED_TRACE("replay with FUSEDCOLL_FUZZ_SEED=" + std::to_string(seed));
      run_gemv_case({3, 2, 2, 150, {20, 0, 13}}, mode, seed, 1);
    }
}

TEST(EmuRuntime, EightDevicesOfFourComputeUnitsRunOnTwoCores) {
  run_gemv_case({8, 4, 4, 1000, fc::split_evenly(512, 8)}, fc::Mode::scale_up, 0);
}

// ---------------------------------------------------------------------------------------------
// Put / signal / wait with hand-written kernels.

TEST(EmuRuntime, PutSignalWaitDeliversDataAcrossRanks) {
  fc::emu::World world({.world_size = 4, .device = {.compute_units = 2}, .timeout_s = 10});
  std::vector<std::vector<int>> got(4);
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const auto buf = rk.alloc(4 * sizeof(int), "ring");
    const int slot = rk.slots("ring", 1);
    const std::uint64_t target = rk.expect(slot, 1);
    rk.launch("ring", 1, [&](WgContext& wg) -> WgTask {
      const int value = 100 + wg.rank();
      const int next = (wg.rank() + 1) % wg.world_size();
      wg.put_signal(next, buf, wg.rank() * sizeof(int), &value, sizeof(int), slot, SignalOp::add, 1);
      co_await wg.wait_until(slot, Cmp::ge, target);
      const int prev = (wg.rank() + wg.world_size() - 1) % wg.world_size();
      got[wg.rank()].push_back(wg.local_as<int>(buf)[prev]);
      co_return;
    });
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r], std::vector<int>{100 + (r + 3) % 4}) << r;
}

TEST(EmuRuntime, WaitingWorkgroupsDoNotHoldThreads) {
  // 16 resident WGs on one compute unit: WG i waits for WG i+1, the last one signals. With a
  // thread per waiting WG this would need 16 threads; suspended coroutines need one.
  fc::emu::World world({.world_size = 1, .device = {.compute_units = 1, .max_resident_wgs = 16},
                        .timeout_s = 10});
  std::atomic<int> finished{0};
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const int base = rk.slots("chain", 16);
    std::vector<std::uint64_t> target(16);
    for (int i = 0; i < 16; ++i) target[i] = rk.expect(base + i, 1);
    rk.launch("chain", 16, [&](WgContext& wg) -> WgTask {
      const int i = wg.wg();
      if (i < 15) co_await wg.wait_until(base + i, Cmp::ge, target[i]);
      if (i > 0) wg.signal(0, base + i - 1, SignalOp::add, 1);
      ++finished;
      co_return;
    });
  });
  EXPECT_EQ(finished.load(), 16);
}

TEST(EmuRuntime, MissingSignalTimesOutNamingTheWaiterAndSilentRanks) {
  fc::emu::World world({.world_size = 3, .device = {.compute_units = 2}, .timeout_s = 0.3});
  expect_error<fc::TimeoutError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          auto& rk = rank_of(world, comm);
          const int slot = rk.slots("never", 1);
          const std::uint64_t target = rk.expect(slot, 2);  // expects 2, gets 1 (from rank 1)
          rk.launch("broken", 1, [&](WgContext& wg) -> WgTask {
            if (wg.rank() == 1) wg.signal(0, slot, SignalOp::add, 1);
            if (wg.rank() == 0) co_await wg.wait_until(slot, Cmp::ge, target);
            co_return;
          });
        });
      },
      {"timeout", "rank 0 kernel 'broken' WG 0 waits for slot", "('never'[0]) >= 2",
       "current value 1", "signalled by ranks {1 }", "never by {0 2 }", "host threads:"});
}

TEST(EmuRuntime, ResidencyDeadlockIsReported) {
  // WGs 0 and 1 wait for WG 3, which can never start: only 2 WGs may be resident.
  fc::emu::World world({.world_size = 1, .device = {.compute_units = 2, .max_resident_wgs = 2},
                        .timeout_s = 0.3});
  expect_error<fc::TimeoutError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          auto& rk = rank_of(world, comm);
          const int slot = rk.slots("grid barrier", 1);
          const std::uint64_t target = rk.expect(slot, 1);
          rk.launch("needs four resident", 4, [&](WgContext& wg) -> WgTask {
            if (wg.wg() == 3) wg.signal(0, slot, SignalOp::add, 1);
            else co_await wg.wait_until(slot, Cmp::ge, target);
            co_return;
          });
        });
      },
      {"WG 0 waits", "WG 1 waits", "WGs { 2 3 } never became resident (max_resident_wgs 2)"});
}

TEST(EmuRuntime, RankThatNeverEntersTheOpIsNamed) {
  fc::GemvProblem problem{.world_size = 3, .m = 1, .n = 12, .k_splits = {4, 4, 4}};
  auto data = fc::make_world(problem);
  auto args = fc::args_of(data);
  fc::emu::World world({.world_size = 3, .device = {.compute_units = 1}, .timeout_s = 0.3});
  expect_error<fc::TimeoutError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          if (comm.rank() == 2) return;  // forgets the collective call
          fc::gemv_allreduce(comm, args[comm.rank()]);
        });
      },
      {"for ranks { 2 } that never entered it", "gemv_allreduce", "rank 2: returned from user code"});
}

TEST(EmuRuntime, MismatchedArgumentsAreReportedBeforeDataMoves) {
  fc::GemvProblem problem{.world_size = 2, .m = 1, .n = 12, .k_splits = {4, 4}};
  auto data = fc::make_world(problem);
  auto args = fc::args_of(data);
  args[1].n = 11;  // rank 1 believes N = 11 (its y view is then too large: fix the view too)
  args[1].y = fc::TensorView(data[1].y.data(), fc::DType::f32, {1, 11});
  args[1].w = fc::ConstTensorView(data[1].w.data(), fc::DType::f32, {11, 4});
  fc::emu::World world({.world_size = 2, .device = {.compute_units = 1}, .timeout_s = 5});
  expect_error<fc::InvalidArgument>(
      [&] { world.run([&](fc::Communicator& comm) { fc::gemv_allreduce(comm, args[comm.rank()]); }); },
      {"rank 0 and rank 1 disagree on n", "12 vs 11"});
  // Nothing was written: the outputs still hold the poison pattern.
  std::uint32_t bits;
  std::memcpy(&bits, data[0].y.data(), 4);
  EXPECT_EQ(bits, fc::kPoisonBits);
}

TEST(EmuRuntime, DifferentCollectivesAtTheSameStepAreReported) {
  fc::emu::World world({.world_size = 2, .device = {.compute_units = 1}, .timeout_s = 5});
  expect_error<fc::InvalidArgument>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          auto& rk = rank_of(world, comm);
          if (comm.rank() == 0) rk.alloc(64, "a");
          else rk.alloc(128, "a");
        });
      },
      {"does not match across ranks", "alloc 'a' 64 bytes", "alloc 'a' 128 bytes"});
}

TEST(EmuRuntime, ExceptionOnOneRankEndsTheRunWithoutWaitingForTheTimeout) {
  fc::emu::World world({.world_size = 3, .device = {.compute_units = 1}, .timeout_s = 30});
  const auto start = std::chrono::steady_clock::now();
  expect_error<fc::InvalidArgument>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          if (comm.rank() == 1) FC_ENFORCE(false, "user code of rank 1 gave up");
          fc::barrier(comm);
        });
      },
      {"rank 1: ", "user code of rank 1 gave up"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The world is unusable afterwards, and says so.
  expect_error<fc::InvalidArgument>([&] { world.run([](fc::Communicator&) {}); },
                                    {"aborted by an earlier failure"});
}

TEST(EmuRuntime, WorkgroupExceptionIsTheRootCauseNotTheAbortEcho) {
  fc::emu::World world({.world_size = 3, .device = {.compute_units = 1}, .timeout_s = 30});
  expect_error<fc::InvalidArgument>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          auto& rk = rank_of(world, comm);
          const int slot = rk.slots("never signalled", 1);
          const std::uint64_t target = rk.expect(slot, 1);
          rk.launch("throws on rank 1", 2, [&](WgContext& wg) -> WgTask {
            if (wg.rank() == 1 && wg.wg() == 1) FC_ENFORCE(false, "kernel bug on rank 1");
            co_await wg.wait_until(slot, Cmp::ge, target);  // others would wait forever
            co_return;
          });
        });
      },
      {"rank 1: ", "kernel bug on rank 1"});
}

TEST(EmuRuntime, InvalidOptionsAreRejected) {
  expect_error<fc::InvalidArgument>(
      [] { fc::emu::World w({.world_size = 0, .device = {}}); }, {"world_size 0"});
  expect_error<fc::InvalidArgument>(
      [] { fc::emu::World w({.world_size = 2, .device = {.compute_units = 0}}); },
      {"compute_units 0"});
}

}  // namespace
