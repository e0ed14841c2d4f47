#pragma once
// Virtual time (WorldOptions::clock = virtual_time; docs/simulation.md, "Virtual time";
// emu/vtime.cpp): the emulator as a discrete-event simulation of the cost model's machine.
//
// Every workgroup carries a virtual clock (seconds), every rank's host thread too. One driver
// thread runs every workgroup, one resumption at a time, always the pending one with the smallest
// virtual time (ties by the time it was ready, workgroup id, rank, launch), and only while every host thread is blocked
// (in a launch, a rendezvous, or done with `World::run`): then nothing can still appear with an
// earlier time, so each resource (a compute unit, a link) is granted in virtual-time order.
// Nothing here reads the host's clock or depends on its threads, so virtual times are a function
// of the model and the plan alone. A host thread is itself an event: it resumes when the driver
// reaches its kernel's end, and runs (alone) until it blocks again.

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <queue>
#include <thread>
#include <utility>
#include <vector>

#include "emu/scheduler.hpp"
#include "fusedcoll/model.hpp"

namespace fusedcoll::emu::impl {

/// The busy stretches of one resource (a compute unit, a link). A request is granted the earliest
/// free stretch of its length at or after the time it is ready: requests come in (nearly)
/// virtual-time order, but a workgroup runs from one wait to the next in one go, so a request may
/// arrive after a later one of another workgroup; filling the gap it left keeps the resource's
/// utilisation what it would be on the device.
class Calendar {
 public:
  /// Books `duration` seconds at the earliest free stretch starting at or after `ready`; returns
  /// its start.
  double book(double ready, double duration);
  /// The start `book(ready, duration)` would return, without booking.
  double fit(double ready, double duration) const;
  /// The earliest time at or after `t` at which the resource is not busy.
  double free_from(double t) const;
  /// Forgets the stretches that end at or before `t` (no request can be ready before it).
  void forget_before(double t);

 private:
  std::map<double, double> busy_;  // start -> end; disjoint
};

/// One pending resumption: a workgroup, or a host thread at its kernel's end.
struct Event {
  double t = 0;
  /// When the workgroup was ready: `t`, or earlier for a claim deferred to its compute unit's
  /// free time. Of the claims a unit takes at one time, the one waiting longest goes first.
  double since = 0;
  bool host = false;
  int rank = 0;
  std::uint64_t launch = 0;
  int wg = 0;
  WgState* state = nullptr;
  bool operator>(const Event& o) const {
    if (t != o.t) return t > o.t;
    if (host != o.host) return !host;  // hosts first
    if (since != o.since) return since > o.since;
    // At one instant the devices' workgroups take turns (workgroup 0 of every device, then 1,
    // ...), so that a resource devices share (a NIC, a `shared` node's memory) is granted to
    // them in turn, as the hardware shares it, not to one device's whole kernel first.
    if (wg != o.wg) return wg > o.wg;
    if (rank != o.rank) return rank > o.rank;
    return launch > o.launch;
  }
};

/// The device side of one rank's machine: its compute units and its egress links.
struct VirtualDevice {
  std::vector<Calendar> cus;
  std::vector<Calendar> peer_links;  // mesh: one per destination; switched: [0] is the port;
                                     // shared: none (VirtualTime::node_links)
  int nic = 0;  // its NIC in VirtualTime::nics (`model::Links::nic_of`)
  std::vector<double> slot_time;  // when each signal slot reached its value
  std::vector<char> slot_remote;  // whether the update that set slot_time came from another device
  /// Where the node's memory is shared (`model::shares_node_memory`): the devices of this run on
  /// the node, among which it is split evenly; 0 where each device has its own.
  int node_share = 0;
};

struct VirtualTime {
  VirtualTime(World::State& world, model::Preset preset);
  ~VirtualTime();

  World::State& world;
  const model::Preset preset;

  std::mutex mu;
  std::condition_variable driver_cv;  // the driver: something to run, or stop
  std::condition_variable host_cv;    // host threads: their kernel ended
  std::priority_queue<Event, std::vector<Event>, std::greater<>> pending;
  int active = 0;              // host threads running (not blocked)
  std::vector<char> blocked;   // per rank
  std::vector<char> resumed;   // per rank: its kernel's end was reached
  std::vector<double> clock;   // per rank: the host thread's virtual time
  std::vector<VirtualDevice> devices;
  /// The NICs' egress, per (node, NIC) (`model::Links::nic_of`): the devices sharing one take it
  /// in turn.
  std::vector<Calendar> nics;
  /// The NICs' ingress, numbered likewise: a put across nodes holds its sender's NIC and the NIC
  /// its bytes enter the destination node through (`model::Links::ingress_nic`, the sender's
  /// rail) for the same stretch, so senders on one rail into one node take that NIC in turn.
  std::vector<Calendar> ingress;
  /// `PeerTopology::shared`, per node: the one memory every put inside the node goes through.
  std::vector<Calendar> node_links;
  bool stopping = false;
  std::thread driver;

  /// `World::run` starts with every host thread running.
  void begin_run();
  /// The host thread of `rank` blocks (waits in a rendezvous or a launch, or is done) / runs
  /// again. Both with `mu` held.
  void block(int rank);
  void unblock(int rank);

  /// Queues `wg` to be resumed at `t` (from any thread).
  void push(WgState* wg, double t);
  /// Runs kernel `k` of `rank` in virtual time: launch cost, then its first `initial` workgroups;
  /// returns on the host thread when the driver reached the kernel's end.
  void run_kernel(int rank, Kernel& k, int initial);
  /// A workgroup ended at `t`; the last one queues its host thread at the kernel's end.
  void wg_finished(Kernel& k, WgState* wg, bool last);

  /// `seconds` on workgroup `wg`'s compute unit, from its clock (`model::span_seconds`, the
  /// node's memory share included). The workgroup is done no earlier than `latency` after its
  /// clock (`model::latency_seconds`: its rounds of loads), though its compute unit is free for
  /// others after the span. Advances the clock.
  void compute(WgState& wg, const char* what, double seconds, double latency = 0);
  /// The issuing compute unit's cost of one put, store or signal to `peer` (`put_us`; nothing
  /// to itself): advances the workgroup's clock.
  void issue(WgState& wg, int peer);
  /// `bytes` from `wg`'s device to `peer` (after `issue`): books the link, for at least the
  /// copy's time at the device's share of a shared node memory, and inside a node the issuing
  /// compute unit for `put_cu_share` of that time first (advancing the workgroup's clock);
  /// across nodes the sender's NIC and the receiving node's NIC on the sender's rail (the same
  /// stretch, when both are free), and with `nic_cpu_gbps` a compute unit of the sender from
  /// when the bytes start on the wire and one of `peer` from when they arrive, for the bytes' CPU
  /// time each (`model::nic_cpu_seconds`; the issuing workgroup is not held). Returns the arrival
  /// time.
  double transfer(WgState& wg, int peer, std::size_t bytes, const char* what);
  /// When `wg`, waiting on slot `slot` of its device, resumes once the slot holds what it waits
  /// for: when the slot reached it, plus the hand-over (`model::handover_seconds`) where another
  /// device's signal set it after `wg` was ready to go on.
  double wake_time(const WgState& wg, int slot) const;
  /// Arrival time at `peer` of a signal `wg` issues now (after its earlier transfers to `peer`).
  double signal_arrival(const WgState& wg, int peer) const;

  /// Books `seconds` on whichever compute unit of `rank` can start them first at or after
  /// `from` (the lowest on a tie); returns that unit and the start.
  std::pair<int, double> book_first_free(int rank, double from, double seconds);

  /// The host thread `rank`'s virtual time (locks `mu`).
  double now(int rank);

 private:
  void drive();
};

}  // namespace fusedcoll::emu::impl
