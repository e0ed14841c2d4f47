// The public kernel API (fusedcoll/kernel.hpp, fusedcoll/kernel_launch.hpp) on the emulator,
// black box: kernels written only against it, launched through a Communicator, with every
// debugging aid the built-in operators get: fuzzing, protocol checking, hang reports naming the
// signal, virtual time. docs/kernels.md is the contract these check.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"
#include "fusedcoll/kernel.hpp"
#include "fusedcoll/kernel_launch.hpp"

namespace fc = fusedcoll;

namespace {

using fctest::expect_error;

/// Every rank puts its `n` values to every rank (itself too) into slot [its rank] of their
/// `box`, with one signal per destination; each rank waits for all P, then sums the P blocks in
/// rank order into `out`. Workgroup w sends to destinations w, w + grid, ...
struct AllSum {
  static constexpr const char* name = "all_sum";
  struct Params {
    fc::Symmetric<std::int64_t> in, box, out;
    fc::Signals arrived;
    std::uint64_t target;
    std::int64_t n;
  };
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const int me = wg.rank(), P = wg.world_size();
    for (int j = wg.wg(); j < P; j += wg.num_wgs()) {
      const int q = (me + 1 + j) % P;
      wg.put_signal_nbi(q, p.box, me * p.n, wg.local(p.in), p.n, p.arrived[0], fc::SignalOp::add,
                        1);
    }
    if (wg.wg() != 0) FC_RETURN;
    FC_WAIT_UNTIL(wg, p.arrived[0], fc::Cmp::ge, p.target);
    const std::int64_t* got = wg.read(p.box, 0, P * p.n);
    std::int64_t* out = wg.local(p.out);
    wg.compute("sum", fc::cost::reduce(P * p.n, 8), [&] {
      for (std::int64_t i = wg.thread_rank(); i < p.n; i += wg.num_threads()) {
        std::int64_t s = 0;
        for (int src = 0; src < P; ++src) s += got[src * p.n + i];
        out[i] = s;
      }
    });
    FC_RETURN;
  }
};

std::int64_t value_of(int rank, std::int64_t i) { return 1000 * rank + i; }

/// One AllSum call on this rank; returns its output.
std::vector<std::int64_t> all_sum(fc::Communicator& comm, std::int64_t n, int grid) {
  const int P = comm.size();
  const auto in = fc::symmetric<std::int64_t>(comm, "in", n);
  const auto box = fc::symmetric<std::int64_t>(comm, "box", P * n);
  const auto out = fc::symmetric<std::int64_t>(comm, "out", n);
  const auto arrived = fc::signals(comm, "arrived", 1);
  std::vector<std::int64_t> mine(n);
  for (std::int64_t i = 0; i < n; ++i) mine[i] = value_of(comm.rank(), i);
  fc::upload(comm, in, 0, mine.data(), n);
  const AllSum::Params p{in, box, out, arrived, fc::expect(comm, arrived[0], P), n};
  fc::launch<AllSum>(comm, grid, p);
  std::vector<std::int64_t> got(n);
  fc::download(comm, out, 0, got.data(), n);
  return got;
}

TEST(KernelApi, OneBodyRunsAtEveryWorldSizeGridAndFuzzSeed) {
  for (int P : {1, 2, 3, 4, 8})
    for (int grid : {1, 3})
      for (std::uint64_t seed : {0, 1, 2, 3}) {
        SCOPED_TRACE(fc::detail::make_string("P ", P, " grid ", grid, " seed ", seed));
        fc::emu::World world({.world_size = P,
                              .device = {.compute_units = 2},
                              .timeout_s = 20,
                              .fuzz_seed = seed,
                              .check_protocol = true});
        world.run([&](fc::Communicator& comm) {
          for (int call = 0; call < 2; ++call) {  // the second reuses buffers and signals
            const auto got = all_sum(comm, 5, grid);
            for (std::int64_t i = 0; i < 5; ++i) {
              std::int64_t want = 0;
              for (int r = 0; r < P; ++r) want += value_of(r, i);
              ASSERT_EQ(got[i], want) << "rank " << comm.rank() << " index " << i;
            }
          }
        });
      }
}

TEST(KernelApi, VirtualTimePricesTheComputeSpans) {
  fc::emu::World world({.world_size = 2,
                        .device = {},
                        .clock = fc::emu::ClockKind::virtual_time,
                        .preset = "mi250x"});
  world.run([&](fc::Communicator& comm) { all_sum(comm, 1 << 16, 2); });
  const double small = world.virtual_seconds(0);
  world.run([&](fc::Communicator& comm) { all_sum(comm, 1 << 20, 2); });
  // The second call's span reduces 16x the elements: it must cost more than the first call.
  EXPECT_GT(world.virtual_seconds(0) - small, small);
}

/// Waits for a signal nobody sends when `broken`.
struct Lonely {
  static constexpr const char* name = "lonely";
  struct Params {
    fc::Signals ready;
    std::uint64_t target;
    bool broken;
  };
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const int next = (wg.rank() + 1) % wg.world_size();
    if (!p.broken || wg.rank() != 0) wg.signal_op(next, p.ready[2], fc::SignalOp::add, 1);
    FC_WAIT_UNTIL(wg, p.ready[2], fc::Cmp::ge, p.target);
    FC_RETURN;
  }
};

TEST(KernelApi, MissingSignalIsAHangReportNamingKernelWorkgroupAndSignal) {
  fc::emu::World world({.world_size = 3, .device = {.compute_units = 1}, .timeout_s = 0.3});
  expect_error<fc::TimeoutError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          const auto ready = fc::signals(comm, "ready", 4);
          fc::launch<Lonely>(comm, 1, {ready, fc::expect(comm, ready[2], 1), true});
        });
      },
      {"rank 1 kernel 'lonely' WG 0 waits for slot", "('ready'[2]) >= 1, current value 0",
       "never by {0 1 2 }"});
}

/// Reads its box before waiting for the signal that publishes it.
struct Eager {
  static constexpr const char* name = "eager";
  struct Params {
    fc::Symmetric<float> box;
    fc::Signals ready;
    std::uint64_t target;
  };
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const float v[4] = {1, 2, 3, 4};
    const int next = (wg.rank() + 1) % wg.world_size();
    wg.put_signal_nbi(next, p.box, 0, v, 4, p.ready[0], fc::SignalOp::add, 1);
    const float first = wg.read(p.box, 0, 4)[0];  // the bug: before the wait
    FC_WAIT_UNTIL(wg, p.ready[0], fc::Cmp::ge, p.target);
    (void)first;
    FC_RETURN;
  }
};

TEST(KernelApi, ReadBeforeItsSignalIsAProtocolErrorNamingTheBuffer) {
  fc::emu::World world({.world_size = 2, .device = {}, .timeout_s = 10, .check_protocol = true});
  expect_error<fc::ProtocolError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          const auto box = fc::symmetric<float>(comm, "inbox", 4);
          const auto ready = fc::signals(comm, "ready", 1);
          fc::launch<Eager>(comm, 1, {box, ready, fc::expect(comm, ready[0], 1)});
        });
      },
      {"kernel 'eager' read bytes [0, 16) of symmetric buffer", "('inbox')"});
}

/// Every rank puts into the same bytes of rank 0's box: two writers of one destination.
struct Collide {
  static constexpr const char* name = "collide";
  struct Params {
    fc::Symmetric<float> box;
  };
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const float v[4] = {1, 2, 3, 4};
    wg.put_nbi(0, p.box, 0, v, 4);  // the bug: no per-sender offset
    FC_RETURN;
  }
};

TEST(KernelApi, TwoPutsToTheSameBytesAreAProtocolErrorNamingBothWriters) {
  fc::emu::World world({.world_size = 2, .device = {}, .timeout_s = 10, .check_protocol = true});
  expect_error<fc::ProtocolError>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          fc::launch<Collide>(comm, 1, {fc::symmetric<float>(comm, "shared", 4)});
        });
      },
      {"rank 0 WG 0 of kernel 'collide'", "rank 1 WG 0 of kernel 'collide'",
       "put to rank 0 bytes [0, 16) of symmetric buffer", "('shared')",
       "already wrote in the same call"});
}

/// Puts past the end of its destination.
struct Overrun {
  static constexpr const char* name = "overrun";
  struct Params {
    fc::Symmetric<float> box;
  };
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const float v[8] = {};
    wg.put_nbi(wg.rank(), p.box, 2, v, 8);
    FC_RETURN;
  }
};

TEST(KernelApi, OutOfRangeAccessNamesTheBufferAndTheRange) {
  fc::emu::World world({.world_size = 2, .device = {}, .timeout_s = 10});
  expect_error<fc::InvalidArgument>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          fc::launch<Overrun>(comm, 1, {fc::symmetric<float>(comm, "small", 6)});
        });
      },
      {"kernel 'overrun' WG 0: put_nbi of elements [2, 10) is outside symmetric buffer",
       "('small') of 6 elements"});
}

TEST(KernelApi, MismatchedLaunchesAndBadHostCallsAreRejected) {
  fc::emu::World world({.world_size = 2, .device = {}, .timeout_s = 10});
  expect_error<fc::InvalidArgument>(
      [&] {
        world.run([&](fc::Communicator& comm) {
          fc::launch<Overrun>(comm, comm.rank() + 1, {fc::symmetric<float>(comm, "big", 16)});
        });
      },
      {"does not match across ranks", "launch of kernel 'overrun' with grid 1",
       "launch of kernel 'overrun' with grid 2"});
  fc::emu::World other({.world_size = 2, .device = {}, .timeout_s = 10});
  expect_error<fc::InvalidArgument>(
      [&] {
        other.run(
            [&](fc::Communicator& comm) { fc::symmetric<float>(comm, "sized", 4 + comm.rank()); });
      },
      {"does not match across ranks", "symmetric 'sized' 16 bytes"});
  fc::emu::World third({.world_size = 1, .device = {}, .timeout_s = 10});
  third.run([&](fc::Communicator& comm) {
    const auto b = fc::symmetric<float>(comm, "b", 4);
    std::vector<float> host(8);
    expect_error<fc::InvalidArgument>([&] { fc::upload(comm, b, 2, host.data(), 3); },
                                      {"upload: elements [2, 5) are outside"});
    expect_error<fc::InvalidArgument>([&] { fc::download(comm, b, -1, host.data(), 1); },
                                      {"download: elements [-1, 0) are outside"});
    expect_error<fc::InvalidArgument>([&] { fc::signals(comm, "none", 0); },
                                      {"signals 'none': count 0"});
    expect_error<fc::InvalidArgument>([&] { fc::launch<Overrun>(comm, 0, {b}); },
                                      {"grid 0 is outside"});
    EXPECT_GE(fc::max_grid<Overrun>(comm), 1);
  });
}

/// A backend that runs no user kernels, as mpi/ is.
class NoKernels final : public fc::Backend {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  void barrier() override {}
  void embedding_alltoall(const fc::EmbeddingAllToAllArgs&, fc::Mode) override {}
  void gemv_allreduce(const fc::GemvAllReduceArgs&, fc::Mode) override {}
  void gemm_alltoall(const fc::GemmAllToAllArgs&, fc::Mode) override {}
  void all_reduce(const fc::AllReduceArgs&) override {}
  void all_to_allv(const fc::AllToAllvArgs&) override {}
  void reduce_scatter(const fc::ReduceScatterArgs&) override {}
  void all_gather(const fc::AllGatherArgs&) override {}
  void broadcast(const fc::BroadcastArgs&) override {}
};

TEST(KernelApi, ABackendWithoutKernelsSaysSo) {
  fc::Communicator comm(std::make_shared<NoKernels>());
  expect_error<fc::UnsupportedError>(
      [&] { fc::symmetric<float>(comm, "x", 1); },
      {"symmetric: this Communicator's backend runs no user kernels"});
  expect_error<fc::UnsupportedError>([&] { fc::launch<Overrun>(comm, 1, {}); },
                                     {"launch: this Communicator's backend runs no user kernels"});
}

}  // namespace
