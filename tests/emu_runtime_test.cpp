// The emulator runtime (white box: custom kernels against emu/runtime.hpp) and GemvAllReduce on
// it: bit-identical to ref/ in every mode, under schedule fuzzing, and every way of hanging turned
// into a TimeoutError that names who waited for what.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emu/runtime.hpp"
#include "emu/state.hpp"
#include "fusedcoll/detail/spmd.hpp"
#include "common/errors.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/env.hpp"
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

using fctest::expect_error;

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

TEST(EmuRuntime, EveryClaimedIndexGoesToExactlyOneWorkgroup) {
  // Wall clock, fuzzed: the host decides who claims what, but each index is taken once.
  for (std::uint64_t seed : {0, 5}) {
    fc::emu::World world({.world_size = 2, .device = {.compute_units = 2, .max_resident_wgs = 6},
                          .timeout_s = 10, .fuzz_seed = seed});
    std::vector<std::vector<std::atomic<int>>> taken(2);
    for (auto& t : taken) t = std::vector<std::atomic<int>>(40);
    world.run([&](fc::Communicator& comm) {
      rank_of(world, comm).launch("claims", 6, [&](WgContext& wg) -> WgTask {
        for (;;) {
          const std::int64_t i = co_await wg.claim();
          if (i >= 40) break;
          ++taken[wg.rank()][static_cast<std::size_t>(i)];
        }
      });
    });
    for (const auto& t : taken)
      for (const auto& n : t) EXPECT_EQ(n.load(), 1) << "seed " << seed;
  }
}

TEST(EmuRuntime, MissingSignalTimesOutNamingTheWaiterAndSilentRanks) {
  // 2 s, not less: under ThreadSanitizer with several test processes on 2 cores, rank 1's WG had
  // not yet signalled (and rank 2's thread had not started) when a 0.3 s timeout fired.
  fc::emu::World world({.world_size = 3, .device = {.compute_units = 2}, .timeout_s = 2});
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
  // 2 s, not less: under ThreadSanitizer on a loaded machine WG 1 once had not yet reached its
  // wait when a 0.3 s timeout fired.
  fc::emu::World world({.world_size = 1, .device = {.compute_units = 2, .max_resident_wgs = 2},
                        .timeout_s = 2});
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
  // 2 s: every other rank must have entered the call (and rank 2 returned) before it fires.
  fc::emu::World world({.world_size = 3, .device = {.compute_units = 1}, .timeout_s = 2});
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

// The SPMD runner of the emu and gpu worlds picks the root cause by the secondary mark, never by
// the message: a secondary error caught first loses to a later unmarked one, even one whose text
// reads like an abort.
TEST(Spmd, RootCauseIsTheFirstUnmarkedFailureWhateverItsMessage) {
  std::atomic<bool> secondary_recorded{false};
  std::atomic<int> aborts{0};
  const auto root = fc::detail::run_spmd(
      3,
      [&](int r) {
        if (r == 0)
          throw fc::detail::SecondaryError<fc::BackendError>("rank 0 stopped: a peer failed");
        if (r == 2) {
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!secondary_recorded && std::chrono::steady_clock::now() < give_up)
            std::this_thread::yield();
          FC_ENFORCE(false, "aborted because another part of the run failed: no, the root");
        }
      },
      [&](int r, std::exception_ptr) {
        ++aborts;
        if (r == 0) secondary_recorded = true;
      });
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->rank, 2);
  EXPECT_FALSE(fc::detail::is_secondary(root->error));
  EXPECT_THROW(std::rethrow_exception(root->error), fc::InvalidArgument);
  EXPECT_EQ(aborts, 2);
}

TEST(Spmd, OnlySecondaryFailuresReportTheFirstAndNoFailureReportsNone) {
  const auto root = fc::detail::run_spmd(
      2,
      [](int r) {
        throw fc::detail::SecondaryError<fc::TimeoutError>("rank " + std::to_string(r));
      },
      [](int, std::exception_ptr) {});
  ASSERT_TRUE(root.has_value());
  EXPECT_TRUE(fc::detail::is_secondary(root->error));
  EXPECT_THROW(std::rethrow_exception(root->error), fc::TimeoutError);
  const auto none = fc::detail::run_spmd(
      4, [](int) {}, [](int, std::exception_ptr) {});
  EXPECT_FALSE(none.has_value());
  // The mark survives the copy an error crosses threads as.
  EXPECT_TRUE(fc::detail::is_secondary(
      fc::detail::make_error(fc::ErrorCode::backend, "copied", /*secondary=*/true)));
  EXPECT_FALSE(fc::detail::is_secondary(fc::make_error(fc::ErrorCode::backend, "copied")));
}

// ---------------------------------------------------------------------------------------------
// Protocol checking: broken kernels that fuzzing can only catch by luck are reported every time.

fc::emu::WorldOptions checked(int P) {
  return {.world_size = P, .device = {.compute_units = 2}, .timeout_s = 10,
          .check_protocol = true};
}

/// Rank 0 puts 16 bytes into rank 1's mailbox and signals slot `a`; in a second kernel it signals
/// slot `b`. Rank 1's one WG waits on `a` (correct) or only on `b` (broken: `b` says nothing about
/// the put, which another WG published), then reads the bytes.
void run_publish_case(fc::emu::World& world, bool reader_waits_on_a, std::vector<int>& got) {
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const auto box = rk.alloc(64, "box");
    const int a = rk.slots("a", 1), b = rk.slots("b", 1);
    const std::uint64_t target_a = rk.expect(a, comm.rank() == 1 ? 1 : 0);
    const std::uint64_t target_b = rk.expect(b, comm.rank() == 1 ? 1 : 0);
    if (comm.rank() == 0) {
      rk.launch("writer", 1, [&](WgContext& wg) -> WgTask {
        const int data[4] = {1, 2, 3, 4};
        wg.put_signal(1, box, 0, data, sizeof data, a, SignalOp::add, 1);
        co_return;
      });
      rk.launch("late flag", 1, [&](WgContext& wg) -> WgTask {
        wg.signal(1, b, SignalOp::add, 1);
        co_return;
      });
    } else {
      rk.launch("reader", 1, [&](WgContext& wg) -> WgTask {
        if (reader_waits_on_a) co_await wg.wait_until(a, Cmp::ge, target_a);
        else co_await wg.wait_until(b, Cmp::ge, target_b);
        const int* p = wg.read_as<int>(box, 0, 4);
        got.assign(p, p + 4);
        co_return;
      });
    }
  });
}

TEST(EmuProtocol, ReadAfterObservingItsSignalPasses) {
  fc::emu::World world(checked(2));
  std::vector<int> got;
  run_publish_case(world, true, got);
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3, 4}));
}

TEST(EmuProtocol, ReadWithoutObservingItsSignalIsReported) {
  // The bytes are there (the late flag is sent after the put completed), so only the checker
  // can tell that the kernel is wrong.
  fc::emu::World world(checked(2));
  std::vector<int> got;
  expect_error<fc::ProtocolError>(
      [&] { run_publish_case(world, false, got); },
      {"rank 1: ", "rank 1 WG 0 of kernel 'reader' read bytes [0, 16) of symmetric buffer 0",
       "that rank 0 WG 0 of kernel 'writer' put, without observing a signal that publishes it",
       "slot 0 >= 1 (observed never)"});
  // Without checking, the same kernel "works": the bug is invisible to a result check.
  if (fc::env().check_protocol) return;  // the environment forces checking on
  fc::emu::World unchecked({.world_size = 2, .device = {.compute_units = 2}, .timeout_s = 10});
  run_publish_case(unchecked, false, got);
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3, 4}));
}

TEST(EmuProtocol, ReadOfBytesNoPutWroteIsReported) {
  fc::emu::World world(checked(2));
  expect_error<fc::ProtocolError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          auto& rk = rank_of(world, comm);
          const auto box = rk.alloc(64, "box");
          rk.launch("impatient", 1, [&](WgContext& wg) -> WgTask {
            (void)wg.read(box, 8, 24);  // nobody put anything: reads zeros
            co_return;
          });
        });
      },
      {"kernel 'impatient' read bytes [8, 32) of symmetric buffer 0 ('box') of its mailbox, which "
       "no put "
       "of this call wrote"});
}

TEST(EmuProtocol, DataLeftByAnEarlierCallIsStale) {
  // Call 1 is correct. In call 2 the writer forgets the put; the reader skips its wait and
  // finds call 1's bytes, which a result check could not tell from fresh ones.
  fc::emu::World world(checked(2));
  auto call = [&](fc::Communicator& comm, fc::emu::SymBuffer box, int slot, bool broken) {
    auto& rk = rank_of(world, comm);
    rk.begin_op();
    const std::uint64_t target = rk.expect(slot, comm.rank() == 1 ? 1 : 0);
    rk.launch("call", 1, [&](WgContext& wg) -> WgTask {
      const int data[2] = {7, 8};
      if (wg.rank() == 0 && !broken) wg.put_signal(1, box, 16, data, sizeof data, slot, SignalOp::add, 1);
      if (wg.rank() == 1) {
        if (!broken) co_await wg.wait_until(slot, Cmp::ge, target);
        (void)wg.read(box, 16, 8);
      }
      co_return;
    });
  };
  expect_error<fc::ProtocolError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          auto& rk = rank_of(world, comm);
          const auto box = rk.alloc(64, "box");
          const int slot = rk.slots("s", 1);
          call(comm, box, slot, false);
          rk.barrier("between calls");
          call(comm, box, slot, true);
        });
      },
      {"rank 1 WG 0 of kernel 'call' read bytes [16, 24)", "which no put of this call wrote"});
}

TEST(EmuProtocol, OverlappingPutsInOneCallAreReported) {
  // Ranks 0 and 1 both put into rank 2's mailbox, at bytes [0, 16) and [8, 24).
  fc::emu::World world(checked(3));
  expect_error<fc::ProtocolError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          auto& rk = rank_of(world, comm);
          const auto box = rk.alloc(64, "box");
          rk.launch("clobber", 1, [&](WgContext& wg) -> WgTask {
            const int data[4] = {1, 2, 3, 4};
            if (wg.rank() < 2) wg.put(2, box, wg.rank() * 8, data, sizeof data);
            co_return;
          });
        });
      },
      {"put to rank 2 bytes", "overlapping bytes [8, 16) of symmetric buffer 0",
       "already wrote in the same call"});
}

TEST(EmuProtocol, OverlappingZeroCopyStoresAreReported) {
  fc::emu::World world(checked(2));
  std::vector<float> out(8);
  expect_error<fc::ProtocolError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          auto& rk = rank_of(world, comm);
          rk.launch("two WGs, one tile", 2, [&](WgContext& wg) -> WgTask {
            const float tile[4] = {1, 2, 3, 4};
            if (wg.rank() == 0) wg.store(1, out.data() + 2 * wg.wg(), tile, sizeof tile);
            co_return;
          });
        });
      },
      {"stored to rank 1 output bytes", "already wrote in the same call"});
}

TEST(EmuProtocol, SameBytesInSeparateCallsAndDisjointPutsPass) {
  fc::emu::World world(checked(3));
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const auto box = rk.alloc(64, "box");
    const int slot = rk.slots("s", 1);
    for (int call = 0; call < 3; ++call) {
      rk.begin_op();
      // The rendezvous every op starts with: without it a writer's next call can overwrite the
      // box before the reader consumed it (the checker reported exactly that on a first draft).
      rk.barrier("call");
      const std::uint64_t target = rk.expect(slot, comm.rank() == 2 ? 2 : 0);
      rk.launch("gather", 2, [&](WgContext& wg) -> WgTask {
        const int data[2] = {call, wg.rank()};
        if (wg.rank() < 2 && wg.wg() == 0)
          wg.put_signal(2, box, wg.rank() * 8, data, sizeof data, slot, SignalOp::add, 1);
        if (wg.rank() == 2) {
          co_await wg.wait_until(slot, Cmp::ge, target);
          const int* p = wg.read_as<int>(box, 0, 4);
          EXPECT_EQ(p[0], call);
          EXPECT_EQ(p[2], call);
        }
        co_return;
      });
    }
  });
}

TEST(EmuRuntime, InvalidOptionsAreRejected) {
  expect_error<fc::InvalidArgument>(
      [] { fc::emu::World w({.world_size = 0, .device = {}}); }, {"world_size 0"});
  expect_error<fc::InvalidArgument>(
      [] { fc::emu::World w({.world_size = 2, .device = {.compute_units = 0}}); },
      {"compute_units 0"});
  expect_error<fc::InvalidArgument>(
      [] { fc::emu::World w({.world_size = 2, .device = {}, .link_gbps = -1}); }, {"link_gbps -1"});
}

}  // namespace
