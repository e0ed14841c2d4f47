// The emulator's link model: what it books for each put and when it makes a signal due (exact,
// on a link held busy until a fixed anchor), that a put costs the modelled wall time, puts share
// their device's link back to back, latency adds, and results stay bit-exact. The wall-clock
// tests leave wide margins over this VM's copy times (the tight 10 GB/s case is a benchmark:
// `fusedcoll-emu-bench --link`); CTest runs this binary alone (RUN_SERIAL), and they skip
// themselves under sanitizers.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
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
using Clock = std::chrono::steady_clock;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // instrumented copies outlast any modelled link
#else
constexpr bool kSanitized = false;
#endif

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The median over `trials` of: rank 0 issues `puts` puts of `bytes` each, then one signal; the
/// time from the first put to rank 1 observing the signal.
double median_delivery_ms(fc::emu::World& world, std::size_t bytes, int puts, int trials) {
  std::vector<Clock::time_point> sent(trials), got(trials);
  std::vector<std::byte> src(bytes * puts, std::byte{1});
  world.run([&](fc::Communicator& comm) {
    auto& rk = *world.state().ranks[comm.rank()];
    const auto box = rk.alloc(bytes * puts, "box");
    const int slot = rk.slots("delivered", 1);
    for (int t = 0; t < trials; ++t) {
      rk.begin_op();
      rk.barrier("trial");
      const std::uint64_t target = rk.expect(slot, comm.rank() == 1 ? 1 : 0);
      rk.launch("transfer", 1, [&](WgContext& wg) -> WgTask {
        if (wg.rank() == 0) {
          sent[t] = Clock::now();
          for (int i = 0; i < puts; ++i) wg.put(1, box, i * bytes, src.data() + i * bytes, bytes);
          wg.signal(1, slot, SignalOp::add, 1);
        } else {
          co_await wg.wait_until(slot, Cmp::ge, target);
          got[t] = Clock::now();
        }
        co_return;
      });
    }
  });
  std::vector<double> ms;
  for (int t = 0; t < trials; ++t)
    ms.push_back(std::chrono::duration<double, std::milli>(got[t] - sent[t]).count());
  return median(ms);
}

fc::emu::WorldOptions linked(double gbps, double latency_us) {
  return {.world_size = 2, .device = {.compute_units = 1}, .timeout_s = 20, .fuzz_seed = 0,
          .check_protocol = false, .link_gbps = gbps, .link_latency_us = latency_us};
}

// What the model computes, independent of the host's speed: rank 0's link is made busy until an
// anchor an hour ahead, so every booking starts from the anchor instead of from "now". Each put
// to a peer then books exactly bytes / bandwidth after the one before, a put to the device's own
// memory books nothing, and the signal is due one latency after the last put has left (and has
// not landed before). The wall-clock counterpart is `fusedcoll-emu-bench --link`.
TEST(EmuLink, PutsBookTheLinkBackToBackAndTheSignalIsDueOneLatencyAfter) {
  constexpr std::size_t kBig = 64 << 20, kSmall = 4 << 20;
  fc::emu::World world(linked(10, 5));
  auto& link = *world.state().devices[0]->link;
  const auto anchor = Clock::now() + std::chrono::hours(1);
  {
    std::lock_guard lock(link.mu);
    link.free_at = anchor;
  }
  std::vector<std::byte> src(kBig, std::byte{1});
  int slot = -1;
  world.run([&](fc::Communicator& comm) {
    auto& rk = *world.state().ranks[comm.rank()];
    const auto box = rk.alloc(kBig + 4 * kSmall, "box");
    const int delivered = rk.slots("delivered", 1);
    if (comm.rank() == 1) slot = delivered;
    rk.begin_op();
    rk.launch("transfer", 1, [&](WgContext& wg) -> WgTask {
      if (wg.rank() == 0) {
        wg.put(1, box, 0, src.data(), kBig);
        wg.put(0, box, 0, src.data(), kBig);  // its own memory: crosses no link
        for (int i = 0; i < 4; ++i) wg.put(1, box, kBig + i * kSmall, src.data(), kSmall);
        wg.signal(1, delivered, SignalOp::add, 1);
      }
      co_return;
    });
  });
  const auto ns = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  };
  std::lock_guard lock(link.mu);
  // 64 MiB at 10 GB/s is 6.71 ms, four 4 MiB puts 4 x 0.42 ms; each booking rounds down to the
  // clock's nanosecond.
  EXPECT_NEAR(ns(link.free_at - anchor), 1e9 * (kBig + 4.0 * kSmall) / 10e9, 5);
  ASSERT_EQ(link.in_flight.size(), 1u);
  EXPECT_EQ(ns(link.in_flight.front().due - link.free_at), 5000);
  EXPECT_EQ(link.in_flight.front().peer, 1);
  EXPECT_EQ(world.state().devices[1]->slots[slot].load(), 0u) << "the signal landed early";
  EXPECT_EQ(world.bytes_sent(0), kBig + 4 * kSmall);
}

TEST(EmuLink, A64MiBPutAt1GBpsTakes67Milliseconds) {
  if (kSanitized) GTEST_SKIP() << "timing is meaningless under sanitizers";
  const double expect = 64.0 * 1024 * 1024 / 1e9 * 1e3;
  fc::emu::World world(linked(1, 0));
  EXPECT_NEAR(median_delivery_ms(world, 64 << 20, 1, 3), expect, 0.1 * expect);
}

TEST(EmuLink, PutsShareTheLinkAndLatencyAdds) {
  if (kSanitized) GTEST_SKIP() << "timing is meaningless under sanitizers";
  // Four 4 MiB puts leave one after another at 1 GB/s (4 x 4.19 ms), then 5 ms of latency.
  const double expect = 4 * 4.0 * 1024 * 1024 / 1e9 * 1e3 + 5.0;
  fc::emu::World world(linked(1, 5000));
  EXPECT_NEAR(median_delivery_ms(world, 4 << 20, 4, 3), expect, 0.1 * expect);
}

TEST(EmuLink, WithoutTheModelDeliveryIsJustTheCopy) {
  if (kSanitized) GTEST_SKIP() << "timing is meaningless under sanitizers";
  fc::emu::World world({.world_size = 2, .device = {.compute_units = 1}, .timeout_s = 20});
  // Far below the 67 ms a 1 GB/s link would take: the model is really off by default.
  EXPECT_LT(median_delivery_ms(world, 64 << 20, 1, 3), 40.0);
}

// Delayed signals must not change a bit, nor break the protocol (checked), under fuzzing.
TEST(EmuLink, OpsStayBitExactUnderTheModel) {
  for (fc::Mode mode : {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out}) {
    fc::GemvProblem problem{.world_size = 4, .m = 3, .n = 100, .k_splits = fc::split_evenly(64, 4)};
    auto expect = fc::make_world(problem);
    auto expect_args = fc::args_of(expect);
    fc::ref::gemv_allreduce(expect_args);
    auto got = fc::make_world(problem);
    auto got_args = fc::args_of(got);
    fc::emu::World world({.world_size = 4, .device = {.compute_units = 2}, .timeout_s = 20,
                          .fuzz_seed = 5, .check_protocol = true, .link_gbps = 1,
                          .link_latency_us = 50});
    for (int rep = 0; rep < 2; ++rep) {
      world.run([&](fc::Communicator& comm) {
        fc::gemv_allreduce(comm, got_args[comm.rank()], mode);
      });
      for (int r = 0; r < 4; ++r)
        EXPECT_EQ(std::memcmp(expect[r].y.data(), got[r].y.data(), expect[r].y.size() * 4), 0)
            << fc::to_string(mode) << " rank " << r << " repeat " << rep;
    }
  }
}

TEST(EmuLink, BadModelValuesAreRejected) {
  EXPECT_THROW(fc::emu::World w(linked(-1, 0)), fc::InvalidArgument);
  EXPECT_THROW(fc::emu::World w(linked(0, -5)), fc::InvalidArgument);
}

}  // namespace
