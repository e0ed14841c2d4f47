// Virtual time (emu/vtime.hpp): the driver thread, the resources' calendars, and the costs of a
// workgroup's compute spans, transfers and signals.

#include "emu/vtime.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "emu/state.hpp"
#include "emu/trace.hpp"

namespace fusedcoll::emu::impl {

// ----------------------------------------------------------------------------------------------
// Calendar

double Calendar::book(double ready, double duration) {
  if (!(duration > 0)) return ready;
  const double t = fit(ready, duration);
  // [t, t + duration) is free, so no stretch starts inside it and `it` is the first stretch after
  // it: merge with touching ones, so that a resource kept busy back to back stays one entry.
  auto it = busy_.lower_bound(t);
  double end = t + duration;
  if (it != busy_.end() && it->first == end) {
    end = it->second;
    it = busy_.erase(it);
  }
  if (it != busy_.begin()) {
    auto before = std::prev(it);
    if (before->second == t) {
      before->second = end;
      return t;
    }
  }
  busy_.emplace_hint(it, t, end);
  return t;
}

double Calendar::fit(double ready, double duration) const {
  if (!(duration > 0)) return ready;
  double t = ready;
  auto it = busy_.upper_bound(t);
  if (it != busy_.begin()) {
    auto before = std::prev(it);
    if (before->second > t) t = before->second;
  }
  while (it != busy_.end() && it->first < t + duration) {
    t = std::max(t, it->second);
    ++it;
  }
  return t;
}

double Calendar::free_from(double t) const {
  auto it = busy_.upper_bound(t);  // the first stretch starting after t
  if (it == busy_.begin()) return t;
  const double end = std::prev(it)->second;  // touching stretches are merged: `end` is free
  return end > t ? end : t;
}

void Calendar::forget_before(double t) {
  auto it = busy_.begin();
  while (it != busy_.end() && it->second <= t) it = busy_.erase(it);
}

// ----------------------------------------------------------------------------------------------
// The driver

VirtualTime::VirtualTime(World::State& w, model::Preset p) : world(w), preset(std::move(p)) {
  blocked.assign(world.size, 1);
  resumed.assign(world.size, 0);
  clock.assign(world.size, 0.0);
  devices.resize(world.size);
  const model::PeerTopology topology = preset.links.peer_topology;
  for (auto& d : devices) {
    d.cus.resize(preset.device.compute_units);
    d.peer_links.resize(topology == model::PeerTopology::mesh       ? world.size
                        : topology == model::PeerTopology::switched ? 1
                                                                    : 0);
    d.slot_time.assign(kSlotsPerDevice, 0.0);
    d.slot_remote.assign(kSlotsPerDevice, 0);
  }
  for (int r = 0; r < world.size; ++r) devices[r].nic = preset.links.nic_of(r);
  nics.resize(world.size > 0 ? std::size_t(preset.links.nic_of(world.size - 1)) + 1 : 0);
  // Every NIC of every node with a device of the run (a node filled in part still receives on
  // the rails of its missing devices).
  const int g = preset.links.gpus_per_node;
  ingress.resize(world.size > 0 ? std::size_t((world.size - 1) / g + 1) * preset.links.nics() : 0);
  if (topology == model::PeerTopology::shared)
    node_links.resize(world.size > 0 ? std::size_t((world.size - 1) / g + 1) : 0);
  if (model::shares_node_memory(preset)) {
    for (int r = 0; r < world.size; ++r)
      devices[r].node_share = std::min(g, world.size - r / g * g);  // devices on r's node
  }
  driver = std::thread([this] { drive(); });
}

VirtualTime::~VirtualTime() {
  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  driver_cv.notify_all();
  driver.join();
}

void VirtualTime::begin_run() {
  std::lock_guard lock(mu);
  for (int r = 0; r < world.size; ++r) unblock(r);
}

void VirtualTime::block(int rank) {
  if (blocked[rank]) return;
  blocked[rank] = 1;
  if (--active == 0) driver_cv.notify_one();
}

void VirtualTime::unblock(int rank) {
  if (!blocked[rank]) return;
  blocked[rank] = 0;
  ++active;
}

void VirtualTime::push(WgState* wg, double t) {
  Event e;
  e.t = std::max(t, wg->vclock);
  e.since = e.t;
  e.rank = wg->kernel->device->rank;
  e.launch = wg->kernel->launch_index;
  e.wg = wg->id;
  e.state = wg;
  std::lock_guard lock(mu);
  pending.push(e);
  if (active == 0) driver_cv.notify_one();
}

void VirtualTime::drive() {
  std::unique_lock lock(mu);
  for (;;) {
    driver_cv.wait(lock, [&] { return stopping || (active == 0 && !pending.empty()); });
    if (stopping) return;
    const Event e = pending.top();
    pending.pop();
    if (e.host) {
      // The host thread runs alone from here until it blocks again: whatever it launches starts
      // at or after e.t, so nothing earlier than what is pending can appear meanwhile.
      resumed[e.rank] = 1;
      unblock(e.rank);
      host_cv.notify_all();
      continue;
    }
    WgState* wg = e.state;
    if (wg->claiming) {
      // A workgroup claims its next tile when its compute unit is free: the workgroups resident
      // on one unit take turns on it (`compute`), so the tile goes to the unit that frees first,
      // as a GPU's dispatcher hands the next workgroup to the first free compute unit.
      const double free = devices[e.rank].cus[wg->vcu].free_from(e.t);
      if (free > e.t) {
        Event later = e;
        later.t = free;
        pending.push(later);
        continue;
      }
      wg->vclaim_ready = wg->vclock;
    }
    wg->vclock = std::max(wg->vclock, e.t);
    lock.unlock();
    run_wg(wg);
    lock.lock();
  }
}

void VirtualTime::run_kernel(int rank, Kernel& k, int initial) {
  std::unique_lock lock(mu);
  const double start = clock[rank] + model::launch_seconds(preset);
  k.vt_start = start;
  k.vt_end = start;
  if (k.wgs.empty()) {  // an empty grid still costs its launch
    clock[rank] = start;
    return;
  }
  const int cus = preset.device.compute_units;
  // A resource another device books may still be booked from that device's clock (its kernels
  // start at or after it), which may be earlier than this kernel's start: the NIC the node's
  // devices share, and with a network stack's CPU cost (`nic_cpu_gbps`) this device's compute
  // units, which senders on other nodes book too.
  // Likewise the one memory of a `shared` node, which its other devices' puts book.
  double nic_from = start, world_from = start, node_from = start;
  for (int r = 0; r < world.size; ++r) {
    if (r == rank) continue;
    world_from = std::min(world_from, clock[r]);
    if (devices[r].nic == devices[rank].nic) nic_from = std::min(nic_from, clock[r]);
    if (preset.links.same_node(r, rank)) node_from = std::min(node_from, clock[r]);
  }
  const double cu_from = preset.links.nic_cpu_gbps > 0 ? world_from : start;
  for (auto& cu : devices[rank].cus) cu.forget_before(cu_from);
  for (auto& link : devices[rank].peer_links) link.forget_before(start);
  if (!node_links.empty())
    node_links[std::size_t(rank / preset.links.gpus_per_node)].forget_before(node_from);
  nics[devices[rank].nic].forget_before(nic_from);
  ingress[devices[rank].nic].forget_before(world_from);  // booked by senders on other nodes
  for (auto& wg : k.wgs) {
    wg->vcu = wg->id % cus;
    wg->vclock = start;
    wg->arrivals.assign(world.size, 0.0);
  }
  for (int i = 0; i < initial; ++i) {
    WgState* wg = k.wgs[k.order[i]].get();
    Event e;
    e.t = start;
    e.since = start;
    e.rank = rank;
    e.launch = k.launch_index;
    e.wg = wg->id;
    e.state = wg;
    pending.push(e);
  }
  resumed[rank] = 0;
  block(rank);
  driver_cv.notify_one();
  host_cv.wait(lock, [&] { return resumed[rank] != 0; });
  resumed[rank] = 0;
  clock[rank] = k.vt_end;
  if (world.tracing) {
    TraceEvent ev{k.name, "kernel", rank, kKernelTrack, start * 1e6, (k.vt_end - start) * 1e6};
    lock.unlock();
    world.record(std::move(ev));
  }
}

void VirtualTime::wg_finished(Kernel& k, WgState* wg, bool last) {
  double end = wg->vclock;
  for (double a : wg->arrivals) end = std::max(end, a);  // the kernel ends after its puts landed
  std::lock_guard lock(mu);
  k.vt_end = std::max(k.vt_end, end);
  if (!last) return;
  Event e;
  e.t = k.vt_end;
  e.host = true;
  e.rank = k.device->rank;
  e.launch = k.launch_index;
  pending.push(e);
}

double VirtualTime::now(int rank) {
  std::lock_guard lock(mu);
  return clock[rank];
}

// ----------------------------------------------------------------------------------------------
// Costs (driver thread only: the workgroup calling them is the one running)

void VirtualTime::compute(WgState& wg, const char* what, double seconds, double latency) {
  const int rank = wg.kernel->device->rank;
  const double ready = wg.vclock;
  const double start = devices[rank].cus[wg.vcu].book(ready, seconds);
  // A latency-bound workgroup waits on its loads past its share of the unit, which the other
  // workgroups resident there use meanwhile; its loads were in flight while it waited for its
  // turn on the unit (a claim deferred to the unit's free time, or a gap it fills).
  const double from = wg.vclaim_ready >= 0 ? std::min(wg.vclaim_ready, ready) : ready;
  wg.vclaim_ready = -1;
  wg.vclock = std::max(start + seconds, from + latency);
  if (world.tracing && seconds > 0) {
    world.record({fusedcoll::detail::make_string(wg.kernel->name, " ", what, " ", wg.id), what, rank,
                  wg.vcu, start * 1e6, seconds * 1e6});
  }
}

void VirtualTime::issue(WgState& wg, int peer) {
  wg.vclaim_ready = -1;
  const int src = wg.kernel->device->rank;
  const double seconds = model::issue_seconds(preset, src, peer);
  if (!(seconds > 0)) return;
  wg.vclock = devices[src].cus[wg.vcu].book(wg.vclock, seconds) + seconds;
}

double VirtualTime::transfer(WgState& wg, int peer, std::size_t bytes, const char* what) {
  const int src = wg.kernel->device->rank;
  const model::Links& l = preset.links;
  VirtualDevice& dev = devices[src];
  const bool near = l.same_node(src, peer);
  const double latency = (near ? l.peer_us : l.nic_us) * 1e-6;
  // Inside a node: the pair's mesh link, the device's switch port, or the node's one memory.
  Calendar& link = !near ? nics[dev.nic]
                   : l.peer_topology == model::PeerTopology::mesh     ? dev.peer_links[peer]
                   : l.peer_topology == model::PeerTopology::switched ? dev.peer_links[0]
                                                                      : node_links[std::size_t(
                                                                            src / l.gpus_per_node)];
  double seconds = near ? model::peer_seconds(preset, std::int64_t(bytes))
                        : double(bytes) / (l.nic_gbps * 1e9);
  if (near && dev.node_share > 0 && l.peer_topology != model::PeerTopology::shared &&
      !model::in_cache(preset, wg.kernel->working_set, dev.node_share)) {
    // A put between devices sharing the node's memory is a copy through it (read + written), at
    // the device's share of it. A `shared` node's puts are that copy already, at the whole
    // memory, and its one calendar takes them in turn: a share on top would count it twice.
    // Where the kernel's working set stays in the cache, it is a copy through the cache, which
    // the link's own rate prices.
    seconds = std::max(seconds, dev.node_share * model::node_memory_seconds(
                                                     preset, model::copy(std::int64_t(bytes))));
  }
  double ready = wg.vclock;
  if (near && l.put_cu_share > 0) {
    // The issuing compute unit moves (that share of) the bytes itself: it is busy meanwhile, and
    // the bytes leave from when it starts.
    const double busy = seconds * l.put_cu_share;
    ready = dev.cus[wg.vcu].book(wg.vclock, busy);
    wg.vclock = ready + busy;
    if (world.tracing && busy > 0) {
      world.record({fusedcoll::detail::make_string(wg.kernel->name, " ", what, " to r", peer, " ",
                                                   wg.id),
                    what, src, wg.vcu, ready * 1e6, busy * 1e6});
    }
  }
  // Across nodes the bytes also hold the NIC they enter the destination node through, the one of
  // the sender's rail, for the same stretch (docs/simulation.md, "The receiver's NIC"): the
  // earliest stretch at or after `ready` that both have free.
  double start = ready;
  if (near) {
    start = link.book(ready, seconds);
  } else {
    Calendar& in = ingress[std::size_t(l.ingress_nic(src, peer))];
    for (;;) {
      const double out_at = link.fit(start, seconds);
      start = in.fit(out_at, seconds);
      if (start == out_at) break;
    }
    link.book(start, seconds);
    in.book(start, seconds);
  }
  double arrival = start + seconds + latency;
  // Across nodes, the host's network stack (`nic_cpu_gbps`): the sender's kernel copies the bytes
  // into the socket and runs the protocol while they stream out, from when they start on the wire
  // (a deep NIC queue holds them, not the issuing workgroup), on whichever of its compute units
  // can start first; they have left no earlier than it is done. The receiver's does the same as
  // they stream in, from the first byte's arrival. The data lands at the later of the ends.
  const double cpu = near ? 0.0 : model::nic_cpu_seconds(preset, src, peer, std::int64_t(bytes));
  if (cpu > 0) {
    const auto [out_cu, out_at] = book_first_free(src, start, cpu);
    arrival = std::max(arrival, out_at + cpu + latency);
    const auto [in_cu, in_at] = book_first_free(peer, start + latency, cpu);
    arrival = std::max(arrival, in_at + cpu);
    if (world.tracing) {
      world.record({fusedcoll::detail::make_string(wg.kernel->name, " ", what, " tcp to r", peer,
                                                   " ", wg.id),
                    what, src, out_cu, out_at * 1e6, cpu * 1e6});
      world.record({fusedcoll::detail::make_string(wg.kernel->name, " ", what, " tcp from r", src,
                                                   " ", wg.id),
                    what, peer, in_cu, in_at * 1e6, cpu * 1e6});
    }
  }
  wg.arrivals[peer] = std::max(wg.arrivals[peer], arrival);
  if (world.tracing && seconds > 0) {
    const int track = !near                       ? kNicTrack
                      : dev.peer_links.size() <= 1 ? kLinkTrack  // the switch port, the memory
                                                   : kLinkTrack + 1 + peer;
    world.record({fusedcoll::detail::make_string(what, " to r", peer, " ", bytes, " B"), "link",
                  src, track, start * 1e6, seconds * 1e6});
  }
  return arrival;
}

std::pair<int, double> VirtualTime::book_first_free(int rank, double from, double seconds) {
  auto& cus = devices[rank].cus;
  std::size_t best = 0;
  double best_at = cus[0].fit(from, seconds);
  for (std::size_t c = 1; c < cus.size(); ++c) {
    const double at = cus[c].fit(from, seconds);
    if (at < best_at) best = c, best_at = at;
  }
  cus[best].book(best_at, seconds);
  return {int(best), best_at};
}

double VirtualTime::wake_time(const WgState& wg, int slot) const {
  const VirtualDevice& dev = devices[wg.kernel->device->rank];
  const double t = dev.slot_time[slot];
  if (dev.slot_remote[slot] && t > wg.vclock) return t + model::handover_seconds(preset);
  return t;
}

double VirtualTime::signal_arrival(const WgState& wg, int peer) const {
  const int src = wg.kernel->device->rank;
  if (peer == src) return wg.vclock;
  const model::Links& l = preset.links;
  const double latency = (l.same_node(src, peer) ? l.peer_us : l.nic_us) * 1e-6;
  return std::max(wg.vclock + latency, wg.arrivals[peer]);
}

}  // namespace fusedcoll::emu::impl
