#pragma once
// The link model (docs/emulator.md, "Link model"; emu/link.cpp): each device's egress link. Puts
// and stores to peers occupy it back to back at the modelled bandwidth; a signal lands one latency
// after everything its device issued before it has left. The bytes themselves are copied at issue:
// under the protocol nobody may read them before the signal, so only the signal's landing time is
// observable, and the link's engine thread delivers it then.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "emu/protocol.hpp"
#include "emu/runtime.hpp"
#include "emu/scheduler.hpp"

namespace fusedcoll::emu::impl {

/// A signal in flight on a link.
struct LinkSignal {
  std::chrono::steady_clock::time_point due;
  int peer = 0;
  int slot = 0;
  SignalOp op = SignalOp::add;
  std::uint64_t value = 0;
  std::vector<PendingPut> covered;
};

/// A device's egress link (link model on).
struct Link {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<LinkSignal> in_flight;  // due times never decrease: the link is FIFO
  std::chrono::steady_clock::time_point free_at{};
  bool stopping = false;
  std::thread engine;
};

/// Books `bytes` to `peer` on `dev`'s link: they leave after everything booked before, at the
/// modelled bandwidth.
void book_link(Device& dev, int peer, std::size_t bytes);

/// Counts `bytes` to `peer` as sent and, with the link model on, books them on the workgroup's
/// device link. Local writes cross no link. Inline: every put and store passes here.
inline void occupy_link(WgState& wg, int peer, std::size_t bytes) {
  Device& dev = *wg.kernel->device;
  if (peer == dev.rank) return;
  dev.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  if (dev.link) book_link(dev, peer, bytes);
}

/// Queues a signal from `dev` to `peer` on `dev`'s link: it lands (emu/memory.cpp,
/// `deliver_signal`) one latency after everything booked before it has left.
void post_on_link(Device& dev, int peer, int slot, SignalOp op, std::uint64_t value,
                  std::vector<PendingPut> covered);

/// Gives every device a link and starts its engine thread (link model on), and stops and joins
/// them.
void start_links(World::State& world);
void stop_links(World::State& world);

}  // namespace fusedcoll::emu::impl
