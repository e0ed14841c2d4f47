// The emulator's link model: what it books for each put and when it makes a signal due (exact,
// on a link held busy until a fixed anchor), that without the model nothing is booked, and that
// results stay bit-exact under it. Whether a put then costs the modelled wall time (64 MiB at 10
// and 1 GB/s, puts sharing the link, latency) is a benchmark, `fusedcoll-emu-bench --link`
// (docs/benchmarking.md): a wall-clock bound in a unit test fails under load.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "emu/runtime.hpp"
#include "emu/state.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"

namespace fc = fusedcoll;
using fc::emu::SignalOp;
using fc::emu::WgContext;
using fc::emu::WgTask;
using Clock = std::chrono::steady_clock;

namespace {

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

// Off by default: no link exists, so a put is the copy alone and its signal lands with it.
TEST(EmuLink, WithoutTheModelNothingIsBookedAndTheSignalLandsAtOnce) {
  fc::emu::World world({.world_size = 2, .device = {.compute_units = 1}, .timeout_s = 20});
  EXPECT_EQ(world.state().devices[0]->link, nullptr);
  std::vector<std::byte> src(1 << 20, std::byte{7});
  int slot = -1;
  world.run([&](fc::Communicator& comm) {
    auto& rk = *world.state().ranks[comm.rank()];
    const auto box = rk.alloc(src.size(), "box");
    const int delivered = rk.slots("delivered", 1);
    if (comm.rank() == 1) slot = delivered;
    rk.begin_op();
    rk.launch("transfer", 1, [&](WgContext& wg) -> WgTask {
      if (wg.rank() == 0) {
        wg.put(1, box, 0, src.data(), src.size());
        wg.signal(1, delivered, SignalOp::add, 1);
      }
      co_return;
    });
  });
  EXPECT_EQ(world.state().devices[1]->slots[slot].load(), 1u);
  EXPECT_EQ(world.bytes_sent(0), src.size());
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
