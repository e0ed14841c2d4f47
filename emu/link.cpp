// The link model (docs/emulator.md, "Link model"): one egress link per device, one engine thread
// per link that lands its signals when they are due.

#include "emu/link.hpp"

#include <algorithm>
#include <utility>

#include "emu/state.hpp"
#include "emu/trace.hpp"

namespace fusedcoll::emu::impl {

using Clock = std::chrono::steady_clock;

namespace {

/// The engine of `dev`'s link: delivers each signal when it is due.
void run_link(World::State& world, Device& dev) {
  Link& link = *dev.link;
  std::unique_lock lock(link.mu);
  for (;;) {
    link.cv.wait(lock, [&] { return link.stopping || !link.in_flight.empty(); });
    if (link.stopping) return;
    // Later signals are never due earlier, so the head is the next to land.
    const auto due = link.in_flight.front().due;
    if (Clock::now() < due) {
      link.cv.wait_until(lock, due);
      continue;
    }
    LinkSignal s = std::move(link.in_flight.front());
    link.in_flight.pop_front();
    lock.unlock();
    deliver_signal(world, dev.rank, s.peer, s.slot, s.op, s.value, s.covered);
    lock.lock();
  }
}

}  // namespace

void book_link(Device& dev, int peer, std::size_t bytes) {
  auto& world = *dev.world;
  const double seconds = world.link_gbps > 0 ? double(bytes) / (world.link_gbps * 1e9) : 0.0;
  Clock::time_point begin;
  {
    std::lock_guard lock(dev.link->mu);
    begin = std::max(Clock::now(), dev.link->free_at);
    dev.link->free_at =
        begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  if (world.tracing) trace_link(dev, peer, bytes, begin, seconds);
}

void post_on_link(Device& dev, int peer, int slot, SignalOp op, std::uint64_t value,
                  std::vector<PendingPut> covered) {
  Link& link = *dev.link;
  {
    std::lock_guard lock(link.mu);
    const auto now = Clock::now();
    const auto due = std::max(now, link.free_at) +
                     std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::micro>(dev.world->link_latency_us));
    link.in_flight.push_back({due, peer, slot, op, value, std::move(covered)});
  }
  link.cv.notify_one();
}

void start_links(World::State& world) {
  if (!world.link_model()) return;
  for (auto& d : world.devices) {
    d->link = std::make_unique<Link>();
    d->link->engine = std::thread([&world, dev = d.get()] { run_link(world, *dev); });
  }
}

void stop_links(World::State& world) {
  for (auto& d : world.devices) {
    if (!d->link) continue;
    {
      std::lock_guard lock(d->link->mu);
      d->link->stopping = true;
    }
    d->link->cv.notify_all();
    d->link->engine.join();
  }
}

}  // namespace fusedcoll::emu::impl
