// The tutorial of docs/kernels.md, run: its kernel is bit-exact against its oracle at every world
// size and fuzz seed, traced and timed in virtual time, and each planted bug is caught by the aid
// the tutorial says catches it, with the report it shows. Public API only.

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "fusedcoll/emu.hpp"
#include "fusedcoll/testing.hpp"
#include "kernels/tutorial.hpp"

namespace fc = fusedcoll;

namespace {

constexpr std::int64_t kChunk = 37;  // not a multiple of anything the kernel does

// [doc:test]
/// Runs kernel K through the test kit: every rank's y against the oracle's.
template <class K>
fc::testing::Result check_kernel(const fc::testing::Options& options = {}) {
  return fc::testing::check(
      [](fc::Communicator& comm, fc::testing::Buffers& out) {
        const int P = comm.size(), r = comm.rank();
        out.add("y", tutorial::reduce_scatter_relu<K>(comm, tutorial::x_of(r, P, kChunk),
                                                      tutorial::bias_of(r, kChunk)));
      },
      [](int P, int r, fc::testing::Buffers& want) {
        want.add("y", tutorial::oracle(r, P, kChunk));
      },
      options);
}

TEST(Tutorial, BitExactAtEveryWorldSizeAndFuzzSeed) {
  fc::testing::Options options;
  options.fuzz_seeds = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const auto result = check_kernel<tutorial::ReduceScatterRelu>(options);
  EXPECT_TRUE(result) << result.message;
}
// [/doc:test]

/// Runs `fn`, expecting a report that contains every needle.
void expect_report(const fc::testing::Result& r, fc::ErrorCode code,
                   const std::vector<std::string>& needles) {
  ASSERT_FALSE(r.ok) << "the broken kernel passed";
  EXPECT_EQ(r.error, code) << r.message;
  for (const auto& n : needles)
    EXPECT_NE(r.message.find(n), std::string::npos) << "missing '" << n << "' in:\n" << r.message;
  std::printf("%s\n", r.message.c_str());  // the report the tutorial quotes
}

TEST(Tutorial, MissingSignalIsAHangReportNamingTheSignal) {
  fc::testing::Options options;
  options.world_sizes = {3};
  options.fuzz_seeds = {0};
  options.timeout_s = 0.5;
  expect_report(check_kernel<tutorial::MissingSignal>(options), fc::ErrorCode::timeout,
                {"world size 3, fuzz seed 0", "kernel 'missing_signal' WG 0 waits for slot",
                 "('tutorial.arrived'[0]) >= 3, current value 0", "never by {0 1 2 }",
                 "waited more than 0.5 s"});
}

TEST(Tutorial, ReadBeforeTheWaitIsCaughtByTheProtocolCheckerWithinTwentySeeds) {
  fc::testing::Options options;
  options.world_sizes = {4};
  options.fuzz_seeds = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  const fc::testing::Result found = check_kernel<tutorial::ReadBeforeWait>(options);
  expect_report(found, fc::ErrorCode::protocol,
                {"kernel 'read_before_wait' read bytes", "of symmetric buffer",
                 "('tutorial.inbox')"});
  // The seed the report names replays the failure alone (the fuzzer's schedule is a function of
  // the seed).
  fc::testing::Options replay;
  replay.world_sizes = {found.world_size};
  replay.fuzz_seeds = {found.fuzz_seed};
  const fc::testing::Result again = check_kernel<tutorial::ReadBeforeWait>(replay);
  EXPECT_FALSE(again.ok) << "seed " << found.fuzz_seed << " did not replay the failure";
  EXPECT_EQ(again.error, fc::ErrorCode::protocol) << again.message;
}

TEST(Tutorial, WrongOffsetIsTheTestKitsFirstDifference) {
  expect_report(
      check_kernel<tutorial::WrongOffset>(), fc::ErrorCode::ok,
      {"world size 2, fuzz seed 0: rank 0, buffer 'y': first difference at element", "expected",
       "got", "replay: testing::Options{.world_sizes = {2}, .fuzz_seeds = {0}}"});
}

TEST(Tutorial, TraceShowsTheKernelsSpansPutsAndWaits) {
  const std::string path = ::testing::TempDir() + "fusedcoll_tutorial_trace.json";
  std::remove(path.c_str());
  {
    // [doc:trace]
    fc::emu::World world({.world_size = 4, .device = {}, .trace_path = path});
    world.run([](fc::Communicator& comm) {
      tutorial::reduce_scatter_relu(comm, tutorial::x_of(comm.rank(), 4, kChunk),
                                    tutorial::bias_of(comm.rank(), kChunk));
    });
    // [/doc:trace]
  }  // the trace is written when the World goes
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no trace at " << path;
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* needle : {"reduce_relu", "\"put\"", "reduce_scatter_relu"})
    EXPECT_NE(json.find(needle), std::string::npos) << "no " << needle << " in the trace";
  std::remove(path.c_str());
}

TEST(Tutorial, VirtualTimePredictsTheKernelOnAPreset) {
  // [doc:virtual]
  fc::emu::World world({.world_size = 4,
                        .device = {},
                        .clock = fc::emu::ClockKind::virtual_time,
                        .preset = "mi250x"});
  world.run([](fc::Communicator& comm) {
    fc::barrier(comm);
    tutorial::reduce_scatter_relu(comm, tutorial::x_of(comm.rank(), 4, 1 << 16),
                                  tutorial::bias_of(comm.rank(), 1 << 16));
    fc::barrier(comm);
  });
  std::printf("predicted on mi250x: %.1f us\n", world.virtual_seconds(0) * 1e6);
  // [/doc:virtual]
  EXPECT_GT(world.virtual_seconds(0), 0.0);
}

}  // namespace
