// The emulator in virtual time (docs/simulation.md, "Virtual time"): exact times of tiny
// hand-computed kernels (a put, a chain of signals, workgroups sharing a compute unit, kernel
// launches, tile claiming), the same times whatever the fuzzing seed and host threads, bit-exact
// data, and presets rejected by name.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "emu/runtime.hpp"
#include "emu/state.hpp"
#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"

namespace fc = fusedcoll;
using fc::emu::Cmp;
using fc::emu::SignalOp;
using fc::emu::WgContext;
using fc::emu::WgTask;
using fc::emu::World;
using fc::emu::WorldOptions;

namespace {

/// A machine whose costs are round numbers: each compute unit moves 1 GB/s (a copy of 500 bytes,
/// 1000 bytes read plus written, takes 1 us), links carry 1 GB/s (1000 bytes: 1 us) with 2 us of
/// latency, a launch takes 5 us. Each device has its own memory (the node's is the sum) and
/// issuing a put costs nothing, unless `node_gbps` / `put_us` say otherwise.
fc::model::Preset round_preset(int cus, double node_gbps = 0, double put_us = 0) {
  fc::model::Preset p;
  p.name = "round";
  p.origin = "emu_vtime_test";
  p.device.compute_units = cus;
  p.device.resident_wgs_per_cu = 4;
  p.device.cu_gflops = 1;
  p.device.memory_gbps = cus;  // 1 GB/s per compute unit
  p.device.launch_us = 5;
  p.device.node_memory_gbps = node_gbps > 0 ? node_gbps : 64.0 * cus;
  p.links.gpus_per_node = 64;
  p.links.peer_topology = fc::model::PeerTopology::mesh;
  p.links.peer_gbps = 1;
  p.links.peer_us = 2;
  p.links.nic_gbps = 1;
  p.links.nic_us = 2;
  p.links.put_us = put_us;
  p.efficiency.fill(1);
  return p;
}

WorldOptions virtual_world(int size, int cus, double node_gbps = 0, double put_us = 0) {
  WorldOptions o;
  o.world_size = size;
  o.timeout_s = 20;
  o.clock = fc::emu::ClockKind::virtual_time;
  o.model = std::make_shared<const fc::model::Preset>(round_preset(cus, node_gbps, put_us));
  return o;
}

fc::emu::Rank& rank_of(World& world, const fc::Communicator& comm) {
  return *world.state().ranks[comm.rank()];
}

/// Every rank's virtual clock after `run`; they agree after the closing barrier.
double finish(World& world) {
  world.run([](fc::Communicator& comm) { fc::barrier(comm); });
  const double t = world.virtual_seconds(0);
  for (int r = 1; r < world.size(); ++r) EXPECT_EQ(world.virtual_seconds(r), t);
  return t;
}

TEST(EmuVirtualTime, OnePut) {
  World world(virtual_world(2, 1));
  std::vector<char> got(1000);
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const fc::emu::SymBuffer box = rk.alloc(1000, "box");
    const int slot = rk.slots("arrived", 1);
    if (comm.rank() == 0) {
      const std::vector<char> data(1000, 'x');
      rk.launch("put", 1, [&](WgContext& wg) -> WgTask {
        wg.put_signal(1, box, 0, data.data(), data.size(), slot, SignalOp::add, 1);
        co_return;
      });
    } else {
      const std::uint64_t target = rk.expect(slot, 1);
      rk.launch("wait", 1, [&](WgContext& wg) -> WgTask {
        co_await wg.wait_until(slot, Cmp::ge, target);
        std::memcpy(got.data(), wg.read(box, 0, 1000), 1000);
      });
    }
  });
  EXPECT_EQ(got, std::vector<char>(1000, 'x'));
  // Launch 5 us; 1000 bytes leave in 1 us and land 2 us later; the signal follows them.
  EXPECT_DOUBLE_EQ(world.virtual_seconds(0), 8e-6);  // a kernel ends when its puts have landed
  EXPECT_DOUBLE_EQ(world.virtual_seconds(1), 8e-6);
  EXPECT_DOUBLE_EQ(finish(world), 8e-6);
}

/// Each rank's virtual clock after a run.
std::vector<double> clocks_of(const World& world) {
  std::vector<double> t;
  for (int r = 0; r < world.size(); ++r) t.push_back(world.virtual_seconds(r));
  return t;
}

/// `nodes` nodes of `gpus_per_node` devices with `nics` NICs each (0: one per device) and the
/// network stack's CPU cost `nic_cpu_gbps` (0: none): every (sender, receiver) of `puts` sends 1000 bytes
/// with a signal, in one kernel per rank, in the order given; a rank first copies `copy_bytes[r]`
/// bytes on its compute unit (1 us per 500; none where empty), then puts, then waits for every
/// put to it. The NICs carry `nic_gbps`; `ranks` (0: every device of the nodes) may leave the last
/// node filled in part. Returns every rank's clock after the run.
std::vector<double> run_puts(int gpus_per_node, int nics, double nic_cpu_gbps,
                             const std::vector<std::pair<int, int>>& puts,
                             std::vector<std::int64_t> copy_bytes = {}, double nic_gbps = 1,
                             int nodes = 2, int ranks = 0) {
  WorldOptions o = virtual_world(ranks > 0 ? ranks : nodes * gpus_per_node, 1);
  auto p = std::make_shared<fc::model::Preset>(*o.model);
  p->links.gpus_per_node = gpus_per_node;
  p->links.nics_per_node = nics;
  p->links.nic_cpu_gbps = nic_cpu_gbps;
  p->links.nic_gbps = nic_gbps;
  o.model = p;
  copy_bytes.resize(static_cast<std::size_t>(o.world_size), 0);
  World world(o);
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const fc::emu::SymBuffer box = rk.alloc(1000, "box");
    const int slot = rk.slots("arrived", 1);
    const int r = comm.rank();
    const auto incoming =
        std::count_if(puts.begin(), puts.end(), [&](auto pr) { return pr.second == r; });
    const std::vector<char> data(1000, 'x');
    std::vector<char> a(static_cast<std::size_t>(copy_bytes[r]), 'a'), b(a.size());
    const std::uint64_t target = incoming ? rk.expect(slot, std::uint64_t(incoming)) : 0;
    rk.launch("put", 1, [&](WgContext& wg) -> WgTask {
      if (!a.empty())
        wg.compute("copy", {fc::model::copy(std::int64_t(a.size()))},
                   [&] { std::memcpy(b.data(), a.data(), a.size()); });
      for (auto [src, dst] : puts)
        if (src == r) wg.put_signal(dst, box, 0, data.data(), data.size(), slot, SignalOp::add, 1);
      if (incoming) co_await wg.wait_until(slot, Cmp::ge, target);
      co_return;
    });
    EXPECT_EQ(a, b);
  });
  return clocks_of(world);
}

/// Each rank of `senders` (on node 0) puts to its counterpart on node 1 (rank + gpus_per_node),
/// at the same time.
std::vector<double> across_nodes(int gpus_per_node, int nics, const std::vector<int>& senders) {
  std::vector<std::pair<int, int>> puts;
  for (int s : senders) puts.emplace_back(s, s + gpus_per_node);
  return run_puts(gpus_per_node, nics, 0, puts);
}

/// `got` and `want` agree element-wise to a few ULPs (EXPECT_DOUBLE_EQ).
void expect_times(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t r = 0; r < got.size(); ++r) EXPECT_DOUBLE_EQ(got[r], want[r]) << "rank " << r;
}

TEST(EmuVirtualTime, DevicesSharingANicTakeItInTurn) {
  // One NIC per device (the default, and nics_per_node = 2 of 2): both puts leave at 5 us (the
  // launch), take 1 us and land 2 us later, at 8 us; the receivers' waits end then too. An idle
  // device's kernel ends at its launch.
  const std::vector<double> own = {8e-6, 8e-6, 8e-6, 8e-6};
  expect_times(across_nodes(2, 0, {0, 1}), own);
  expect_times(across_nodes(2, 2, {0, 1}), own);
  // One NIC for the node: rank 0's put has it 5-6 us (lands at 8), rank 1's waits for it (6-7 us,
  // lands at 9 us); so do rank 3's wait and the kernel of rank 1, which ends when its put landed.
  expect_times(across_nodes(2, 1, {0, 1}), {8e-6, 9e-6, 8e-6, 9e-6});
  // Four devices on two NICs: device d uses NIC d % 2, so ranks 0 and 2 share NIC 0 (rank 2
  // second, by rank), rank 1 has NIC 1 to itself; rank 3 sends nothing (5 us, its launch).
  expect_times(across_nodes(4, 2, {0, 1, 2}), {8e-6, 8e-6, 9e-6, 5e-6, 8e-6, 8e-6, 9e-6, 5e-6});
}

TEST(EmuVirtualTime, PutsIntoANodeOnOneRailShareItsNic) {
  // Three nodes of 2 devices, one NIC per device. Ranks 2 and 4 (device 0 of nodes 1 and 2) put
  // into rank 0 at once: both enter node 0 through its NIC 0 (their rail), so the first crosses
  // 5-6 and lands at 8, the second waits for that NIC, crosses 6-7 and lands at 9 (incast).
  expect_times(run_puts(2, 0, 0, {{2, 0}, {4, 0}}, {}, 1, 3), {9e-6, 5e-6, 8e-6, 5e-6, 9e-6, 5e-6});
  // Ranks 2 and 3 (devices 0 and 1 of node 1) put into rank 0: different rails, so node 0's
  // NICs 0 and 1 carry them side by side (the node forwards rail 1's bytes to device 0): both
  // land at 8, as the simulator's rail-matched flows do (sim_test).
  expect_times(run_puts(2, 0, 0, {{2, 0}, {3, 0}}, {}, 1, 3), {8e-6, 5e-6, 8e-6, 8e-6, 5e-6, 5e-6});
  // A node filled in part (5 ranks: node 2 has device 0 only) still receives on rail 1: rank 3
  // puts into rank 4 through node 2's NIC 1 while rank 2 puts into it through NIC 0.
  expect_times(run_puts(2, 0, 0, {{2, 4}, {3, 4}}, {}, 1, 3, 5), {5e-6, 5e-6, 8e-6, 8e-6, 8e-6});
  // One NIC per node: every flow into node 0 shares it, whichever device sends.
  expect_times(run_puts(2, 1, 0, {{2, 0}, {5, 1}}, {}, 1, 3), {8e-6, 9e-6, 8e-6, 5e-6, 5e-6, 9e-6});
}

/// Two nodes of 2 devices, one NIC per device, with the network stack's CPU cost `nic_cpu_gbps`.
std::vector<double> puts_across(const std::vector<std::pair<int, int>>& puts, double nic_cpu_gbps,
                                std::vector<std::int64_t> copy_bytes = {}) {
  return run_puts(2, 0, nic_cpu_gbps, puts, std::move(copy_bytes));
}

TEST(EmuVirtualTime, APutAcrossNodesCostsBothCoresTheNetworkStack) {
  // nic_cpu_gbps = 0.5: 1000 bytes keep a core 2 us at each end. Rank 2 puts to rank 0: its core
  // 5-7 us while the bytes cross 5-6; they have left at 7 and land at 9; rank 0's core takes
  // them in from the first byte's arrival, 7-9. Both end at 9 (8 without the cost).
  expect_times(puts_across({{2, 0}}, 0.5), {9e-6, 5e-6, 9e-6, 5e-6});
  expect_times(puts_across({{2, 0}}, 0), {8e-6, 5e-6, 8e-6, 5e-6});
  // The receiver's core computes first (a copy of 2500 bytes, 5-10 us): it takes the bytes in
  // 10-12, so the data is there at 12, not 9 (without the cost: 10, its copy's end).
  expect_times(puts_across({{2, 0}}, 0.5, {2500, 0, 0, 0}), {12e-6, 5e-6, 12e-6, 5e-6});
  expect_times(puts_across({{2, 0}}, 0, {2500, 0, 0, 0}), {10e-6, 5e-6, 8e-6, 5e-6});
  // The sender's core copies first (1500 bytes, 5-8 us): its stack runs 8-10 while the bytes
  // cross 8-9; they have left at 10, land at 12, taken in 10-12. Without the cost: 8-9, at 11.
  expect_times(puts_across({{2, 0}}, 0.5, {0, 0, 1500, 0}), {12e-6, 5e-6, 12e-6, 5e-6});
  expect_times(puts_across({{2, 0}}, 0, {0, 0, 1500, 0}), {11e-6, 5e-6, 11e-6, 5e-6});
  // Inside a node the cost does not apply: OnePut's 8 us.
  expect_times(puts_across({{2, 3}}, 0.5), {5e-6, 5e-6, 8e-6, 8e-6});
}

TEST(EmuVirtualTime, TheSendersNetworkStackRunsWhenItsBytesStartOnTheWire) {
  // A NIC of 0.25 GB/s (1000 bytes: 4 us) and nic_cpu_gbps = 0.5 (2 us a put at each end). Rank 2
  // puts twice to rank 0, across nodes, then once to rank 3 on its own node. The first put's
  // bytes cross 5-9 and the second's queue behind them, 9-13; the sender's stack runs from each
  // one's start on the wire (5-7, 9-11), not at issue, and holds no workgroup: the put to rank 3
  // leaves at 5 (1 us on its link) and lands at 8. Rank 0 takes the bytes in 7-9 and 11-13; the
  // second put lands at 13 + 2 = 15. Booked at issue instead, the stack would hold the workgroup
  // 5-9 and the put to rank 3 would land at 12.
  expect_times(run_puts(2, 0, 0.5, {{2, 0}, {2, 0}, {2, 3}}, {}, 0.25),
               {15e-6, 5e-6, 15e-6, 8e-6});
  // So the stack hides under the wire entirely: without it, the same times.
  expect_times(run_puts(2, 0, 0, {{2, 0}, {2, 0}, {2, 3}}, {}, 0.25), {15e-6, 5e-6, 15e-6, 8e-6});
}

/// Rank 0 puts 1000 bytes with a signal to rank 1 (the OnePut kernel), then copies `copy_bytes`
/// on its compute unit (none: 0); returns rank `clock_of`'s clock.
double put_world(const WorldOptions& o, std::int64_t copy_bytes, int clock_of) {
  World world(o);
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const fc::emu::SymBuffer box = rk.alloc(1000, "box");
    const int slot = rk.slots("arrived", 1);
    const std::vector<char> data(1000, 'x');
    std::vector<char> a(static_cast<std::size_t>(copy_bytes), 'a'), b(a.size());
    const std::uint64_t target = comm.rank() == 1 ? rk.expect(slot, 1) : 0;
    rk.launch("put", 1, [&](WgContext& wg) -> WgTask {
      if (comm.rank() == 0) {
        wg.put_signal(1, box, 0, data.data(), data.size(), slot, SignalOp::add, 1);
        if (copy_bytes > 0)
          wg.compute("copy", {fc::model::copy(copy_bytes)},
                     [&] { std::memcpy(b.data(), a.data(), a.size()); });
      } else {
        co_await wg.wait_until(slot, Cmp::ge, target);
      }
    });
    if (comm.rank() == 0) {
      EXPECT_EQ(a, b);
    }
  });
  return world.virtual_seconds(clock_of);
}

/// OnePut; rank 1's clock.
double one_put(const WorldOptions& o) { return put_world(o, 0, 1); }

TEST(EmuVirtualTime, IssuingAPutCostsTheComputeUnit) {
  // put_us = 1: the put is issued 5-6 us, leaves 6-7 us and lands at 9 us; the signal is issued
  // 6-7 us and lands at max(7 + 2, 9) = 9 us.
  EXPECT_DOUBLE_EQ(one_put(virtual_world(2, 1, 0, 1)), 9e-6);
  // put_us = 3: issued 5-8, on the link 8-9, lands at 11; the signal, issued 8-11, at 13.
  EXPECT_DOUBLE_EQ(one_put(virtual_world(2, 1, 0, 3)), 13e-6);
}

TEST(EmuVirtualTime, APutThroughSharedNodeMemoryIsACopy) {
  // The node's memory at 1 GB/s, below its devices' 64, split between the run's 2 devices: the
  // put's copy (1000 bytes read and 1000 written) at 0.5 GB/s holds the link 5-9 us instead of
  // 5-6 us; it lands at 11 us, not 8.
  EXPECT_DOUBLE_EQ(one_put(virtual_world(2, 1, 1)), 11e-6);
  EXPECT_DOUBLE_EQ(one_put(virtual_world(2, 1)), 8e-6);  // private memories: OnePut's 8 us
}

/// One node of `size` devices, peers reached as `topology` (the switch port at 1 GB/s; the node's
/// memory at `node_gbps`, by default 8 GB/s, so a `shared` node's put of 1000 bytes, 2000 read +
/// written, holds it 0.25 us); workgroup w of rank r puts 1000 bytes to each of `puts[r][w]`, at
/// the launch (5 us), in that order, signalling nothing. Every rank's clock.
std::vector<double> node_puts(fc::model::PeerTopology topology,
                              const std::vector<std::vector<std::vector<int>>>& puts,
                              double node_gbps = 8) {
  const int size = static_cast<int>(puts.size());
  WorldOptions o = virtual_world(size, 1, node_gbps);
  auto p = std::make_shared<fc::model::Preset>(*o.model);
  p->links.gpus_per_node = size;
  p->links.peer_topology = topology;
  o.model = p;
  World world(o);
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const fc::emu::SymBuffer box = rk.alloc(1000 * std::size_t(size), "box");
    const int r = comm.rank();
    const std::vector<char> data(1000, char('a' + r));
    const auto& mine = puts[std::size_t(r)];
    rk.launch("put", std::max<int>(1, int(mine.size())), [&](WgContext& wg) -> WgTask {
      if (wg.wg() < mine.size())
        for (int q : mine[wg.wg()]) wg.put(q, box, 1000 * std::size_t(r), data.data(), 1000);
      co_return;
    });
  });
  return clocks_of(world);
}

TEST(EmuVirtualTime, PutsInsideASharedNodeTakeItsOneMemoryInTurn) {
  using T = fc::model::PeerTopology;
  // Rank 0 alone puts to ranks 1, 2, 3. Through the node's one memory each put takes 0.25 us:
  // 5-5.25, 5.25-5.5, 5.5-5.75, landing 2 us later; rank 0's kernel ends when the last landed,
  // at 7.75 us. Through its own switch port at 1 GB/s they take 1 us each: 8, 9, 10 us. The
  // others' kernels end at their launch.
  expect_times(node_puts(T::shared, {{{1, 2, 3}}, {}, {}, {}}), {7.75e-6, 5e-6, 5e-6, 5e-6});
  expect_times(node_puts(T::switched, {{{1, 2, 3}}, {}, {}, {}}), {10e-6, 5e-6, 5e-6, 5e-6});
  // Every rank puts to the next at once: the one memory takes them in turn (5-5.25 for rank 0,
  // ..., 5.75-6 for rank 3), so the four together take what four ports do side by side.
  expect_times(node_puts(T::shared, {{{1}}, {{2}}, {{3}}, {{0}}}),
               {7.25e-6, 7.5e-6, 7.75e-6, 8e-6});
  expect_times(node_puts(T::switched, {{{1}}, {{2}}, {{3}}, {{0}}}), {8e-6, 8e-6, 8e-6, 8e-6});
}

TEST(EmuVirtualTime, ASharedNodesPutsTakeItsWholeMemoryNotADevicesShare) {
  using T = fc::model::PeerTopology;
  // The node's memory at 2 GB/s, below its 4 devices' 4 x 1 GB/s: the devices' compute spans get
  // a quarter each, but the puts of a `shared` node already take the one memory in turn on its
  // calendar, so a put of 1000 bytes (2000 read + written) holds it 1 us, not the 4 us of a
  // device's quarter. Rank 0 alone puts to ranks 1, 2, 3: 5-6, 6-7, 7-8 us, the last landing at
  // 10 us (a quarter each: 5-9, 9-13, 13-17, landing at 19).
  expect_times(node_puts(T::shared, {{{1, 2, 3}}, {}, {}, {}}, 2), {10e-6, 5e-6, 5e-6, 5e-6});
  // A mesh's links are the devices' own, whose copies do take a quarter of the memory each: 4 us
  // a put, side by side on rank 0's three links, landing at 11 us.
  expect_times(node_puts(T::mesh, {{{1, 2, 3}}, {}, {}, {}}, 2), {11e-6, 5e-6, 5e-6, 5e-6});
}

TEST(EmuVirtualTime, AtOneInstantTheDevicesWorkgroupsTakeTurns) {
  // Ranks 0 and 1 of a shared node, two workgroups each putting to the other, all at 5 us: the
  // memory goes to workgroup 0 of rank 0 (5-5.25), of rank 1 (5.25-5.5), then workgroup 1 of each
  // (5.5-5.75, 5.75-6): rank 0's puts land at 7.25 and 7.75, rank 1's at 7.5 and 8. Were one
  // device's kernel served first, rank 0's would land at 7.25 and 7.5.
  expect_times(node_puts(fc::model::PeerTopology::shared, {{{1}, {1}}, {{0}, {0}}}),
               {7.75e-6, 8e-6});
}

/// Rank 0 puts 1000 bytes with a signal to rank 1, then copies 1500 bytes (3 us on its compute
/// unit); rank 0's clock, with `put_cu_share` = `share`.
double put_then_copy(double share) {
  WorldOptions o = virtual_world(2, 1);
  auto p = std::make_shared<fc::model::Preset>(round_preset(1));
  p->links.put_cu_share = share;
  o.model = p;
  return put_world(o, 1500, 0);
}

TEST(EmuVirtualTime, APutTheIssuingComputeUnitCopiesHoldsIt) {
  // Share 0 (a DMA engine): the put is on the link 5-6 us and lands at 8; the copy runs 5-8.
  EXPECT_DOUBLE_EQ(put_then_copy(0), 8e-6);
  // Share 1 (the core copies it): the compute unit is busy 5-6 us with the put, the copy runs
  // 6-9 us; the put still lands at 8.
  EXPECT_DOUBLE_EQ(put_then_copy(1), 9e-6);
  // Share 0.5: busy 5-5.5 us, the copy 5.5-8.5.
  EXPECT_DOUBLE_EQ(put_then_copy(0.5), 8.5e-6);
}

/// Two devices sharing the node's memory (1 GB/s: 0.5 each) and a cache of `cache_mib` at 4 GB/s.
/// In one op call (`begin_op`) each rank declares `declared` bytes as its working set (none where
/// negative) and reserves a scratch of `scratch` bytes; rank 0 copies 500 bytes, then puts 1000
/// bytes with a signal to rank 1, which waits for it. Both ranks' clocks.
std::vector<double> copy_and_put(double cache_mib, long declared, std::size_t scratch) {
  WorldOptions o = virtual_world(2, 1, 1);
  auto p = std::make_shared<fc::model::Preset>(*o.model);
  p->device.cache_mib = cache_mib;
  p->device.cache_gbps = 4;
  o.model = p;
  World world(o);
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const fc::emu::SymBuffer box = rk.alloc(1000, "box");
    const int slot = rk.slots("arrived", 1);
    rk.begin_op();
    if (declared >= 0) rk.declare_working_set(std::size_t(declared));
    if (scratch > 0) rk.scratch("working set", scratch);
    const std::vector<char> data(1000, 'x');
    std::vector<char> a(500, 'a'), b(500);
    if (comm.rank() == 0) {
      rk.launch("copy and put", 1, [&](WgContext& wg) -> WgTask {
        wg.compute("copy", {fc::model::copy(500)}, [&] { std::memcpy(b.data(), a.data(), 500); });
        wg.put_signal(1, box, 0, data.data(), data.size(), slot, SignalOp::add, 1);
        co_return;
      });
      EXPECT_EQ(a, b);
    } else {
      const std::uint64_t target = rk.expect(slot, 1);
      rk.launch("wait", 1, [&](WgContext& wg) -> WgTask {
        co_await wg.wait_until(slot, Cmp::ge, target);
      });
    }
  });
  return clocks_of(world);
}

TEST(EmuVirtualTime, AWorkingSetInTheCacheMovesAtItsRate) {
  // From memory: the copy's 1000 bytes at the device's half of the node's memory, 5-7 us; the
  // put's copy through it (2000 bytes at 0.5 GB/s) holds the link 7-11 us, lands at 13.
  const std::vector<double> memory{13e-6, 13e-6};
  // In the cache (4 GB/s): the copy 5-5.25 us; the put at the link's 1 GB/s, 5.25-6.25, lands
  // at 8.25.
  const std::vector<double> cache{8.25e-6, 8.25e-6};
  expect_times(copy_and_put(1, 1000, 0), cache);
  // 256 KiB declared and 256 KiB of scratch a rank: the two ranks' 1 MiB fit the 1 MiB cache;
  // a byte more does not.
  expect_times(copy_and_put(1, 256 << 10, 256 << 10), cache);
  expect_times(copy_and_put(1, (256 << 10) + 1, 256 << 10), memory);
  expect_times(copy_and_put(1, -1, 256 << 10), memory);  // undeclared: from memory
  expect_times(copy_and_put(0, 1000, 0), memory);        // no cache in the preset
}

/// Every rank copies 500 bytes (1 us on its compute unit) in one kernel; each rank's clock.
std::vector<double> copies_on_every_rank(const WorldOptions& o) {
  World world(o);
  world.run([&](fc::Communicator& comm) {
    std::vector<char> a(500, 'a'), b(500);
    rank_of(world, comm).launch("copy", 1, [&](WgContext& wg) -> WgTask {
      wg.compute("copy", {fc::model::copy(500)}, [&] { std::memcpy(b.data(), a.data(), 500); });
      co_return;
    });
    EXPECT_EQ(a, b);
  });
  return clocks_of(world);
}

TEST(EmuVirtualTime, DevicesSharingNodeMemoryGetEqualShares) {
  // Node memory 1.5 GB/s for the run's 3 devices of 1 GB/s each: 0.5 GB/s each, so each copy's
  // 1000 bytes take 2 us (not its compute unit's 1 us): all end at 7 us.
  for (double t : copies_on_every_rank(virtual_world(3, 1, 1.5))) EXPECT_DOUBLE_EQ(t, 7e-6);
  // 6 GB/s: 2 GB/s each, more than a compute unit moves: 1 us, as with memories of their own.
  for (double t : copies_on_every_rank(virtual_world(3, 1, 6))) EXPECT_DOUBLE_EQ(t, 6e-6);
  // 2.5 GB/s for 2 devices (a world of 2): 1.25 GB/s each, 0.8 us: the compute unit's 1 us.
  for (double t : copies_on_every_rank(virtual_world(2, 1, 2.5))) EXPECT_DOUBLE_EQ(t, 6e-6);
  // The devices' own memories (node = 64 x 1 GB/s).
  for (double t : copies_on_every_rank(virtual_world(3, 1))) EXPECT_DOUBLE_EQ(t, 6e-6);
}

TEST(EmuVirtualTime, ChainOfTwoSignals) {
  World world(virtual_world(3, 1));
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const int slot = rk.slots("token", 1);
    const int me = comm.rank();
    const std::uint64_t target = me > 0 ? rk.expect(slot, 1) : 0;
    rk.launch("relay", 1, [&](WgContext& wg) -> WgTask {
      if (me > 0) co_await wg.wait_until(slot, Cmp::ge, target);
      if (me < 2) wg.signal(me + 1, slot, SignalOp::add, 1);
    });
  });
  // Rank 0 signals at 5 us (its launch); it lands at 7 us on rank 1, whose signal lands at 9 us
  // on rank 2.
  EXPECT_DOUBLE_EQ(world.virtual_seconds(0), 5e-6);
  EXPECT_DOUBLE_EQ(world.virtual_seconds(1), 7e-6);
  EXPECT_DOUBLE_EQ(world.virtual_seconds(2), 9e-6);
  EXPECT_DOUBLE_EQ(finish(world), 9e-6);
}

/// Three ranks relay a token, 0 -> 1 -> 2, with a hand-over of `handover_us`; rank 1 first copies
/// `busy_bytes` on its compute unit (1 us per 500), and then adds to a slot of its own and waits
/// for that too. Every rank's clock after the run.
std::vector<double> relay(double handover_us, std::int64_t busy_bytes) {
  WorldOptions o = virtual_world(3, 1);
  auto p = std::make_shared<fc::model::Preset>(*o.model);
  p->device.handover_us = handover_us;
  o.model = p;
  World world(o);
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const int slot = rk.slots("token", 1);
    const int own = rk.slots("own", 1);
    const int me = comm.rank();
    const std::uint64_t target = me > 0 ? rk.expect(slot, 1) : 0;
    const std::uint64_t own_target = rk.expect(own, 1);
    std::vector<char> a(static_cast<std::size_t>(me == 1 ? busy_bytes : 0), 'a'), b(a.size());
    rk.launch("relay", 1, [&](WgContext& wg) -> WgTask {
      if (!a.empty())
        wg.compute("copy", {fc::model::copy(busy_bytes)}, [&] { std::memcpy(b.data(), a.data(), a.size()); });
      if (me > 0) co_await wg.wait_until(slot, Cmp::ge, target);
      wg.add_local(own, 1);
      co_await wg.wait_until(own, Cmp::ge, own_target);
      if (me < 2) wg.signal(me + 1, slot, SignalOp::add, 1);
    });
    EXPECT_EQ(a, b);
  });
  return clocks_of(world);
}

TEST(EmuVirtualTime, AWaitOnAnotherDeviceEndsAHandOverAfterItsSignal) {
  // Ranks sharing cores (handover_us = 3): rank 0 signals at 5 us (its launch), which lands on
  // rank 1 at 7; rank 1 waited, so it runs again at 10 and signals, landing on rank 2 at 12, which
  // runs again at 15. The waits on a rank's own slot (add_local) cost nothing.
  expect_times(relay(3, 0), {5e-6, 10e-6, 15e-6});
  expect_times(relay(0, 0), {5e-6, 7e-6, 9e-6});  // ChainOfTwoSignals
  // Rank 1 busy until 10 us (a copy of 2500 bytes): the token, there since 7, did not keep it
  // waiting, so no hand-over; its signal lands on rank 2 at 12, which waited: 15.
  expect_times(relay(3, 2500), {5e-6, 10e-6, 15e-6});
  expect_times(relay(3, 3000), {5e-6, 11e-6, 16e-6});
}

/// Two workgroups, each copying 500 bytes (1 us on one compute unit), on a device of `cus`.
double two_copies(int cus) {
  World world(virtual_world(1, cus));
  world.run([&](fc::Communicator& comm) {
    std::vector<char> a(2 * 500, 'a'), b(2 * 500);
    rank_of(world, comm).launch("copies", 2, [&](WgContext& wg) -> WgTask {
      const std::size_t at = static_cast<std::size_t>(wg.wg()) * 500;
      wg.compute("copy", {fc::model::copy(500)},
                 [&] { std::memcpy(b.data() + at, a.data() + at, 500); });
      co_return;
    });
    EXPECT_EQ(a, b);
  });
  return world.virtual_seconds(0);
}

TEST(EmuVirtualTime, WorkgroupsOnOneComputeUnitTakeTurns) {
  EXPECT_DOUBLE_EQ(two_copies(1), 7e-6);  // 5 us launch, then one copy after the other
  EXPECT_DOUBLE_EQ(two_copies(2), 6e-6);  // side by side
}

/// One kernel of `grid` workgroups on `cus` compute units claiming tiles that copy 500 bytes per
/// us of `cost_us`; the kernel's end and which workgroup took each tile.
struct Claimed {
  double end = 0;
  std::vector<int> taker;
  bool operator==(const Claimed&) const = default;
};
Claimed claim_tiles(int cus, int grid, const std::vector<int>& cost_us, std::uint64_t seed = 0,
                    int host_threads = 0) {
  WorldOptions o = virtual_world(1, cus);
  o.fuzz_seed = seed;
  if (host_threads > 0) o.device.compute_units = host_threads;
  World world(o);
  Claimed c;
  c.taker.assign(cost_us.size(), -1);
  world.run([&](fc::Communicator& comm) {
    std::vector<char> a(500 * 8, 'a'), b(a.size());
    rank_of(world, comm).launch("claims", grid, [&](WgContext& wg) -> WgTask {
      for (;;) {
        const auto i = static_cast<std::size_t>(co_await wg.claim());
        if (i >= cost_us.size()) break;
        c.taker[i] = wg.wg();
        const auto bytes = static_cast<std::size_t>(500 * cost_us[i]);
        wg.compute("copy", {fc::model::copy(static_cast<std::int64_t>(bytes))},
                   [&] { std::memcpy(b.data(), a.data(), bytes); });
      }
    });
  });
  c.end = world.virtual_seconds(0);
  return c;
}

/// One compute unit, `grid` workgroups claiming `tiles` tiles that each copy 2048 bytes (4096
/// read plus written: 4.096 us of the unit, one round of vector loads), with a round of loads
/// taking `latency_us`; the kernel's end and which workgroup took each tile.
Claimed latency_tiles(int grid, int tiles, double latency_us) {
  WorldOptions o = virtual_world(1, 1);
  auto p = std::make_shared<fc::model::Preset>(*o.model);
  p->device.load_latency_us = latency_us;
  o.model = p;
  World world(o);
  Claimed c;
  c.taker.assign(static_cast<std::size_t>(tiles), -1);
  world.run([&](fc::Communicator& comm) {
    std::vector<char> a(2048, 'a'), b(a.size());
    rank_of(world, comm).launch("latency", grid, [&](WgContext& wg) -> WgTask {
      for (;;) {
        const auto i = co_await wg.claim();
        if (i >= tiles) break;
        c.taker[static_cast<std::size_t>(i)] = wg.wg();
        wg.compute("copy", {fc::model::copy(2048)}, [&] { std::memcpy(b.data(), a.data(), 2048); });
      }
    });
    EXPECT_EQ(a, b);
  });
  c.end = world.virtual_seconds(0);
  return c;
}

TEST(EmuVirtualTime, ALatencyBoundTileHoldsItsWorkgroupNotItsComputeUnit) {
  // A lone tile takes its round of loads, 10 us, though the unit is done with it in 4.096: the
  // kernel ends at 5 + 10 us (the launch, then the tile). Without the term: 5 + 4.096.
  EXPECT_DOUBLE_EQ(latency_tiles(1, 1, 10).end, 15e-6);
  EXPECT_DOUBLE_EQ(latency_tiles(1, 1, 0).end, 9.096e-6);
  // Two workgroups on the unit: WG 0 has it 5-9.096 and waits on its loads until 15; WG 1 has
  // it 9.096-13.192 and, its loads in flight since 5 (it waited for the unit, not idle), is done
  // at 15 too. Held on the unit, the two rounds would end at 25.
  EXPECT_DOUBLE_EQ(latency_tiles(2, 2, 10).end, 15e-6);
  // One workgroup for both tiles: the second round starts when the first is done, 15-25.
  EXPECT_DOUBLE_EQ(latency_tiles(1, 2, 10).end, 25e-6);
  // Four workgroups: the unit's 4 x 4.096 us bound them (5 + 16.384), the loads hide.
  EXPECT_DOUBLE_EQ(latency_tiles(4, 4, 10).end, 21.384e-6);
  // Three workgroups, 4 tiles, 6 us rounds: WG 0 is done at 11 and claims again, but the unit is
  // WG 1's until 13.192; then WG 2, waiting since 5, takes tile 2 before WG 0, and WG 0 takes
  // tile 3 at 17.288 (the longest waiting first, as a dispatcher's queue).
  const Claimed queue = latency_tiles(3, 4, 6);
  EXPECT_DOUBLE_EQ(queue.end, 21.384e-6);
  EXPECT_EQ(queue.taker, (std::vector<int>{0, 1, 2, 0}));
}

TEST(EmuVirtualTime, TheComputeUnitThatFreesFirstTakesTheNextTile) {
  // Tiles of 3, 1 and 1 us on 2 compute units, one workgroup each, after the 5 us launch: WG 1
  // is free at 6 us and takes tile 2 (WG 0 is busy until 8 us). Dealt statically (WG 0: tiles
  // 0 and 2) the kernel would end at 9 us.
  const Claimed first = claim_tiles(2, 2, {3, 1, 1});
  EXPECT_DOUBLE_EQ(first.end, 8e-6);
  EXPECT_EQ(first.taker, (std::vector<int>{0, 1, 1}));
  // Both free at 7 us: the tie goes to the lower workgroup id.
  const Claimed tie = claim_tiles(2, 2, {2, 2, 1});
  EXPECT_DOUBLE_EQ(tie.end, 8e-6);
  EXPECT_EQ(tie.taker, (std::vector<int>{0, 1, 0}));
}

TEST(EmuVirtualTime, WorkgroupsSharingAComputeUnitClaimWhenItIsFree) {
  // WGs 0 and 2 share compute unit 0, WGs 1 and 3 unit 1. Tile 0 (4 us) holds unit 0 from 5 to
  // 9 us, so WG 2 claims nothing before 9 us, and unit 1 runs tiles 1-4 (1 us each) back to back
  // by 9 us, its two workgroups in turn (the one waiting longest first: WG 3, waiting since 5,
  // takes tile 2 at 6 before WG 1, which just finished tile 1). Had WG 2 claimed at once, tile 2
  // would have waited behind tile 0 until 10 us.
  const Claimed c = claim_tiles(2, 4, {4, 1, 1, 1, 1});
  EXPECT_DOUBLE_EQ(c.end, 9e-6);
  EXPECT_EQ(c.taker, (std::vector<int>{0, 1, 3, 1, 3}));
}

TEST(EmuVirtualTime, ClaimsAreTheSameForEverySeedAndHostThreadCount) {
  const std::vector<int> cost = {3, 1, 4, 1, 5, 2, 6, 5, 3, 5, 1, 2};
  const Claimed base = claim_tiles(3, 7, cost);
  for (int taker : base.taker) EXPECT_GE(taker, 0);
  EXPECT_EQ(claim_tiles(3, 7, cost, 7, 1), base);
  EXPECT_EQ(claim_tiles(3, 7, cost, 0, 3), base);
  EXPECT_EQ(claim_tiles(3, 7, cost, 12345, 2), base);
}

TEST(EmuVirtualTime, OnlyTheCountsLastAddLearnsTheOthers) {
  // Three workgroups on three compute units add to one local counter after 3, 1 and 2 us of
  // work. The one whose add completes the count (WG 2, at 7 us) goes on from the latest add
  // (WG 0's, at 8 us); WG 1, whose add came earlier, goes on from its own time (6 us).
  World world(virtual_world(1, 3));
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    const int slot = rk.slots("count", 1);
    const std::uint64_t target = rk.expect(slot, 3);
    std::vector<char> a(4000, 'a'), b(4000);
    auto copy = [&](WgContext& wg, std::size_t bytes) {
      wg.compute("copy", {fc::model::copy(static_cast<std::int64_t>(bytes))},
                 [&] { std::memcpy(b.data(), a.data(), bytes); });
    };
    rk.launch("count", 3, [&](WgContext& wg) -> WgTask {
      const std::size_t before[] = {1500, 500, 1000};  // 3, 1, 2 us
      copy(wg, before[wg.wg()]);
      const bool last = wg.add_local(slot, 1) == target;
      if (wg.wg() == 1) copy(wg, 1750);  // 3.5 us: ends at 9.5 us
      if (last) copy(wg, 500);           // 1 us after the latest add: ends at 9 us
      co_return;
    });
  });
  EXPECT_DOUBLE_EQ(world.virtual_seconds(0), 9.5e-6);
}

TEST(EmuVirtualTime, KernelLaunchesCost) {
  World world(virtual_world(1, 1));
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    rk.launch("empty grid", 0, [](WgContext&) -> WgTask { co_return; });
    rk.launch("one", 1, [](WgContext&) -> WgTask { co_return; });
    rk.launch("two", 1, [](WgContext&) -> WgTask { co_return; });
  });
  EXPECT_DOUBLE_EQ(world.virtual_seconds(0), 15e-6);
}

TEST(EmuVirtualTime, TheAmaxPassCostsItsOwnEfficiency) {
  // A scaled fp8 AllReduce of 4096 values on 2 devices of one compute unit: the amax pass reads
  // 16384 bytes at 1 GB/s (its 4096 operations at 1 GFLOP/s take less), 16.384 us at efficiency
  // 1, twice that at 0.5, before anything else of the call, on both devices alike. No other
  // kernel uses efficiency.amax, so the call's time grows by exactly 16.384 us.
  auto call = [](double amax_efficiency) {
    WorldOptions o = virtual_world(2, 1);
    auto p = std::make_shared<fc::model::Preset>(*o.model);
    p->efficiency[static_cast<int>(fc::model::Kernel::amax)] = amax_efficiency;
    o.model = p;
    World world(o);
    world.run([](fc::Communicator& comm) {
      std::vector<float> send(4096), recv(4096);
      for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(i % 13) - 6.0f;
      fc::AllReduceArgs a{send.data(), recv.data(), 4096, fc::DType::f32, fc::ReduceOp::sum,
                          fc::AllReduceAlgo::direct};
      a.wire.format = fc::WireFormat::fp8_e4m3;
      fc::all_reduce(comm, a);
    });
    return finish(world);
  };
  const double fast = call(1), slow = call(0.5);
  EXPECT_NEAR(slow - fast, 16.384e-6, 1e-12);
}

/// Virtual seconds of one launch whose single workgroup computes one `rows x 10` gemm tile with
/// K = 100 on the round machine, `gemm_pack_rows` set as given.
double one_gemm_tile(std::int64_t rows, int pack_rows) {
  WorldOptions o = virtual_world(1, 1);
  fc::model::Preset p = *o.model;
  p.device.gemm_pack_rows = pack_rows;
  o.model = std::make_shared<const fc::model::Preset>(p);
  World world(o);
  world.run([&](fc::Communicator& comm) {
    auto& rk = rank_of(world, comm);
    std::vector<float> a(static_cast<std::size_t>(rows) * 100, 1.0f), b(100 * 10, 2.0f),
        c(static_cast<std::size_t>(rows) * 10);
    rk.launch("gemm", 1, [&](WgContext& wg) -> WgTask {
      wg.compute("gemm", {fc::model::gemm(rows, 10, 100)}, [&] {
        fc::detail::gemm_tile(a.data(), 100, b.data(), 10, c.data(), 10, rows, 10, 100);
      });
      co_return;
    });
    EXPECT_EQ(c[0], 200.0f);
  });
  return world.virtual_seconds(0);
}

TEST(EmuVirtualTime, PackedGemmTilesCostTheirPanelAndWholeRowBlocks) {
  // The roofline: 2·5·10·100 = 10,000 flops at 1 GFLOP/s (10 us) against 6,200 bytes at 1 GB/s;
  // after the 5 us launch.
  EXPECT_DOUBLE_EQ(one_gemm_tile(5, 0), 15e-6);
  // Packed in blocks of 4 rows: the panel of B (100 x 10 floats) copied, 8,000 bytes at 1 GB/s
  // (8 us), then 8 rows of arithmetic, 16,000 flops (16 us).
  EXPECT_DOUBLE_EQ(one_gemm_tile(5, 4), 29e-6);
  EXPECT_DOUBLE_EQ(one_gemm_tile(8, 4), 29e-6);
  EXPECT_DOUBLE_EQ(one_gemm_tile(1, 4), 21e-6);  // 8 us + 4 rows (8 us) + 5 us
}

TEST(EmuVirtualTime, BarrierMeetsAtTheLatestRank) {
  World world(virtual_world(2, 1));
  world.run([&](fc::Communicator& comm) {
    if (comm.rank() == 1) rank_of(world, comm).launch("k", 1, [](WgContext&) -> WgTask { co_return; });
    fc::barrier(comm);
  });
  EXPECT_DOUBLE_EQ(world.virtual_seconds(0), 5e-6);
  EXPECT_DOUBLE_EQ(world.virtual_seconds(1), 5e-6);
}

// ----------------------------------------------------------------------------------------------
// Every op and collective: bit-exact, with the same virtual times whatever the host does.

struct Outcome {
  std::vector<double> times;  // per call
  std::vector<std::vector<float>> outputs;
  bool operator==(const Outcome&) const = default;
};

/// memcmp of `n` floats that accepts empty (null) vectors.
bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

/// A fixed sequence of calls (each op in each mode, plain and compressed collectives), each
/// timed in virtual time between barriers, its output checked against ref/.
Outcome run_sequence(const std::string& preset, std::uint64_t fuzz_seed, int host_threads,
                     std::shared_ptr<const fc::model::Preset> model = nullptr) {
  constexpr int P = 4;
  WorldOptions o;
  o.world_size = P;
  o.device.compute_units = host_threads;
  o.fuzz_seed = fuzz_seed;
  o.clock = fc::emu::ClockKind::virtual_time;
  o.preset = preset;
  o.model = std::move(model);
  o.device.max_resident_wgs = 8;  // small grids keep the test fast on any preset
  World world(o);
  Outcome out;

  auto timed = [&](const std::function<void(fc::Communicator&)>& call) {
    world.run([&](fc::Communicator& comm) {
      fc::barrier(comm);
      call(comm);
      fc::barrier(comm);
    });
    out.times.push_back(world.virtual_seconds(0));
  };

  // The three operators, every mode.
  fc::GemvProblem gp;
  gp.world_size = P;
  gp.m = 2;
  gp.n = 300;
  gp.k_splits = {64, 32, 0, 96};
  gp.seed = 11;
  fc::EmbeddingProblem ep;
  ep.world_size = P;
  ep.dim = 24;
  ep.table_rows = {50, 60, 70, 80, 90};
  ep.owner = {0, 1, 3, 3, 2};
  ep.batch_sizes = {7, 0, 33, 12};
  ep.min_bag = 0;
  ep.max_bag = 5;
  ep.seed = 12;
  fc::GemmProblem mp;
  mp.world_size = P;
  mp.k = 16;
  mp.n = 40;
  mp.host = {0, 2, 3};
  mp.seed = 13;
  mp.random_routing(20);
  for (fc::Mode mode : {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out}) {
    auto expect = fc::make_world(gp);
    auto ea = fc::args_of(expect);
    fc::ref::gemv_allreduce(ea);
    auto got = fc::make_world(gp);
    auto ga = fc::args_of(got);
    timed([&](fc::Communicator& c) { fc::gemv_allreduce(c, ga[c.rank()], mode); });
    for (int r = 0; r < P; ++r) {
      EXPECT_TRUE(same(expect[r].y, got[r].y)) << "gemv " << fc::to_string(mode);
      out.outputs.push_back(got[r].y);
    }

    auto eexp = fc::make_world(ep);
    auto eea = fc::args_of(eexp);
    fc::ref::embedding_alltoall(eea);
    auto egot = fc::make_world(ep);
    auto ega = fc::args_of(egot);
    timed([&](fc::Communicator& c) { fc::embedding_alltoall(c, ega[c.rank()], mode); });
    for (int r = 0; r < P; ++r) {
      EXPECT_TRUE(same(eexp[r].output, egot[r].output)) << "embedding " << fc::to_string(mode);
      out.outputs.push_back(egot[r].output);
    }

    auto mexp = fc::make_world(mp);
    auto mea = fc::args_of(mexp);
    fc::ref::gemm_alltoall(mea);
    auto mgot = fc::make_world(mp);
    auto mga = fc::args_of(mgot);
    timed([&](fc::Communicator& c) { fc::gemm_alltoall(c, mga[c.rank()], mode); });
    for (int r = 0; r < P; ++r) {
      EXPECT_TRUE(same(mexp[r].output, mgot[r].output)) << "gemm " << fc::to_string(mode);
      out.outputs.push_back(mgot[r].output);
    }
  }

  // AllReduce, plain and compressed, direct, ring and chain.
  const std::int64_t n = 70000;
  std::vector<std::vector<float>> send(P, std::vector<float>(n)), recv(P, std::vector<float>(n));
  for (int r = 0; r < P; ++r)
    for (std::int64_t i = 0; i < n; ++i) send[r][i] = float((i * 7 + r * 13) % 101) * 0.25f - 3;
  for (fc::WireFormat f : {fc::WireFormat::none, fc::WireFormat::f16, fc::WireFormat::fp8_e4m3})
    for (fc::AllReduceAlgo algo :
         {fc::AllReduceAlgo::direct, fc::AllReduceAlgo::ring, fc::AllReduceAlgo::chain}) {
      std::vector<fc::AllReduceArgs> args(P);
      for (int r = 0; r < P; ++r) {
        args[r].send = send[r].data();
        args[r].recv = recv[r].data();
        args[r].count = n;
        args[r].algo = algo;
        args[r].wire.format = f;
      }
      std::vector<std::vector<float>> want(P, std::vector<float>(n));
      std::vector<fc::AllReduceArgs> ref_args = args;
      for (int r = 0; r < P; ++r) ref_args[r].recv = want[r].data();
      fc::ref::all_reduce(ref_args);
      timed([&](fc::Communicator& c) { fc::all_reduce(c, args[c.rank()]); });
      for (int r = 0; r < P; ++r) {
        EXPECT_EQ(std::memcmp(want[r].data(), recv[r].data(), n * 4), 0)
            << "all_reduce " << fc::to_string(f) << " " << fc::to_string(algo);
        out.outputs.push_back(recv[r]);
      }
    }
  return out;
}

/// Virtual seconds of one GemmAllToAll call on one rank: an expert of K = 100 with 32 rows and
/// N = 128, so 4 tiles of 16 x 64 on 2 panels, on the round machine packing in blocks of 4 rows,
/// packing a panel from memory at `cold_gbps`; a cache of `cache_mib` (0: none) at the memory's
/// rate, so that only the packing can tell it.
double gemm_call(fc::Mode mode, double cold_gbps, double cache_mib = 0) {
  WorldOptions o = virtual_world(1, 1);
  fc::model::Preset p = *o.model;
  p.device.gemm_pack_rows = 4;
  p.device.gemm_cold_gbps = cold_gbps;
  p.device.cache_mib = cache_mib;
  p.device.cache_gbps = p.device.memory_gbps;
  o.model = std::make_shared<const fc::model::Preset>(p);
  World world(o);
  fc::GemmProblem mp;
  mp.world_size = 1;
  mp.k = 100;
  mp.n = 128;
  mp.host = {0};
  mp.counts = {32};
  mp.seed = 5;
  auto expect = fc::make_world(mp);
  auto ea = fc::args_of(expect);
  fc::ref::gemm_alltoall(ea);
  auto got = fc::make_world(mp);
  auto ga = fc::args_of(got);
  world.run([&](fc::Communicator& comm) { fc::gemm_alltoall(comm, ga[0], mode); });
  EXPECT_TRUE(same(expect[0].output, got[0].output));
  return world.virtual_seconds(0);
}

TEST(EmuVirtualTime, AGemmKernelPacksEachPanelFromMemoryOnce) {
  // 2 of the 4 tiles are their panel's first: each packs 100 x 64 floats (51,200 bytes read and
  // written) at 0.5 GB/s instead of 1 GB/s, 51.2 us more, on the one compute unit.
  for (fc::Mode mode : {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out}) {
    SCOPED_TRACE(fc::to_string(mode));
    EXPECT_NEAR(gemm_call(mode, 0.5) - gemm_call(mode, 0), 2 * 51.2e-6, 1e-12);
    EXPECT_NEAR(gemm_call(mode, 1) - gemm_call(mode, 0), 0, 1e-12);  // the warm rate
  }
}

TEST(EmuVirtualTime, AGemmKernelWhoseWorkingSetFitsTheCacheFindsItsPanelsThere) {
  // The call's working set (Plan::working_set_bytes): the weights 100 x 128, the 32 rows of A and
  // 32 of output, 80,384 bytes, and in scale_out and unfused the staging and receive areas, 32
  // rows each, 113,152. Within a cache of 0.5 MiB the previous call left the panels there: no
  // first touch from memory. In one of 0.05 MiB (52,429 bytes) they come from memory, 51.2 us each.
  for (fc::Mode mode : {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out}) {
    SCOPED_TRACE(fc::to_string(mode));
    EXPECT_NEAR(gemm_call(mode, 0.5, 0.5) - gemm_call(mode, 0, 0.5), 0, 1e-12);
    EXPECT_NEAR(gemm_call(mode, 0.5, 0.05) - gemm_call(mode, 0, 0.05), 2 * 51.2e-6, 1e-12);
  }
}

TEST(EmuVirtualTime, SameTimesForEverySeedAndHostThreadCount) {
  const Outcome base = run_sequence("mi250x", 0, 1);
  for (double t : base.times) EXPECT_GT(t, 0);
  for (std::size_t i = 1; i < base.times.size(); ++i) EXPECT_GT(base.times[i], base.times[i - 1]);
  EXPECT_EQ(run_sequence("mi250x", 7, 1), base);
  EXPECT_EQ(run_sequence("mi250x", 0, 3), base);
  EXPECT_EQ(run_sequence("mi250x", 12345, 2), base);
}

TEST(EmuVirtualTime, SameTimesAcrossNodesWithNetworkStackCosts) {
  // 2 nodes of 2, one NIC per node shared by both devices, and a network stack that costs both ends' cores: senders book each other's compute units.
  auto p = std::make_shared<fc::model::Preset>(fc::model::load_preset("host"));
  p->links.gpus_per_node = 2;
  p->links.nics_per_node = 1;
  p->links.nic_gbps = 1.2;
  p->links.nic_us = 24;
  p->links.nic_cpu_gbps = 1.5;
  const Outcome base = run_sequence("", 0, 1, p);
  EXPECT_EQ(run_sequence("", 7, 2, p), base);
  EXPECT_EQ(run_sequence("", 12345, 3, p), base);
  auto free_stack = std::make_shared<fc::model::Preset>(*p);
  free_stack->links.nic_cpu_gbps = 0;
  const Outcome without = run_sequence("", 0, 1, free_stack);
  EXPECT_EQ(without.outputs, base.outputs);
  ASSERT_EQ(without.times.size(), base.times.size());
  EXPECT_GT(base.times.back(), without.times.back());  // the cost is charged
}

TEST(EmuVirtualTime, HostPresetBitExactToo) {
  const Outcome a = run_sequence("host", 3, 2);
  EXPECT_EQ(run_sequence("host", 0, 1).times, a.times);
}

// ----------------------------------------------------------------------------------------------
// Bad presets and options

TEST(EmuVirtualTime, BadPresetsAreRejectedByName) {
  auto fails = [](WorldOptions o, const std::string& needle) {
    try {
      World world(o);
      ADD_FAILURE() << "expected InvalidArgument naming " << needle;
    } catch (const fc::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  WorldOptions o;
  o.clock = fc::emu::ClockKind::virtual_time;
  o.preset = "no_such_machine";
  fails(o, "no_such_machine");
  o.preset = "/nonexistent/dir/m.preset";
  fails(o, "/nonexistent/dir/m.preset");
  auto bad = std::make_shared<fc::model::Preset>(round_preset(1));
  bad->links.peer_gbps = -1;
  o.model = bad;
  fails(o, "peer_gbps");
  auto no_amax = std::make_shared<fc::model::Preset>(round_preset(1));
  no_amax->efficiency[static_cast<int>(fc::model::Kernel::amax)] = 0;
  o.model = no_amax;
  fails(o, "efficiency.amax = 0 is out of range");
  auto nics = std::make_shared<fc::model::Preset>(round_preset(1));
  nics->links.gpus_per_node = 2;
  nics->links.nics_per_node = 3;
  o.model = nics;
  fails(o, "links.nics_per_node = 3 is out of range");
  auto cpu = std::make_shared<fc::model::Preset>(round_preset(1));
  cpu->links.nic_cpu_gbps = -2;
  o.model = cpu;
  fails(o, "links.nic_cpu_gbps = -2 is out of range");
}

TEST(EmuVirtualTime, WallClockHasNoVirtualTime) {
  WorldOptions o;
  o.world_size = 1;
  o.clock = fc::emu::ClockKind::wall;
  World world(o);
  EXPECT_FALSE(world.virtual_time());
  EXPECT_THROW((void)world.virtual_seconds(0), fc::InvalidArgument);
}

}  // namespace
