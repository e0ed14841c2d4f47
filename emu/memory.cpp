// Memory, puts and slots: symmetric allocation, the device-side data movement of a workgroup
// (put, zero-copy store, mailbox reads) and signal slots (signal, add_local, slot reservation and
// the host's cumulative wait targets). A put is a plain copy, complete on return; a signal is a
// release update of the target slot that wakes the waiters it satisfies.

#include <algorithm>
#include <cstring>
#include <mutex>

#include "emu/link.hpp"
#include "emu/state.hpp"
#include "emu/trace.hpp"
#include "emu/vtime.hpp"

namespace fusedcoll::emu {

using Clock = std::chrono::steady_clock;

namespace impl {

std::uint64_t deliver_signal(World::State& world, int src, int peer, int slot, SignalOp op,
                             std::uint64_t value, const std::vector<PendingPut>& covered,
                             double at) {
  auto& dev = *world.devices[peer];
  if (world.vt) {  // before the wake-up, which resumes the satisfied waiters at this time
    auto& vdev = world.vt->devices[peer];
    if (at >= vdev.slot_time[slot]) {
      vdev.slot_time[slot] = at;
      vdev.slot_remote[slot] = src != peer;
    }
  }
  std::uint64_t after = value;
  if (world.check_protocol)
    after = protocol_apply_signal(dev, slot, op, value, covered);
  else if (op == SignalOp::set)
    dev.slots[slot].store(value, std::memory_order_release);
  else
    after = dev.slots[slot].fetch_add(value, std::memory_order_acq_rel) + value;
  dev.senders[slot].fetch_or(std::uint64_t{1} << (src % 64), std::memory_order_relaxed);
  dev.wake_satisfied();
  return after;
}

}  // namespace impl

// ----------------------------------------------------------------------------------------------
// Device side

std::byte* WgContext::local(SymBuffer b) const {
  return s_->kernel->device->world->buffer(b, rank());
}

void WgContext::check_range(const char* what, int id, std::int64_t size, std::int64_t first,
                            std::int64_t count) const {
  if (first >= 0 && count >= 0 && first <= size && count <= size - first) [[likely]]
    return;
  auto& world = *s_->kernel->device->world;
  throw InvalidArgument(fusedcoll::detail::make_string(
      "rank ", rank(), " kernel '", s_->kernel->name, "' WG ", wg(), ": ", what, " of elements [",
      first, ", ", first + count, ") is outside symmetric buffer ", world.buffer_name(id), " of ",
      size, " elements"));
}

std::byte* WgContext::read(SymBuffer b, std::size_t offset, std::size_t bytes) {
  FC_CHECK_INTERNAL(offset + bytes <= b.bytes, "read of ", bytes, " bytes at offset ", offset,
                    " overruns a symmetric buffer of ", b.bytes, " bytes");
  if (s_->kernel->device->world->check_protocol) impl::protocol_read(s_, b, offset, bytes);
  return local(b) + offset;
}

void WgContext::put(int peer, SymBuffer dst, std::size_t offset, const void* src,
                    std::size_t bytes) {
  auto& world = *s_->kernel->device->world;
  FC_CHECK_INTERNAL(peer >= 0 && peer < world.size, "put to rank ", peer);
  FC_CHECK_INTERNAL(offset + bytes <= dst.bytes, "put of ", bytes, " bytes at offset ", offset,
                    " overruns a symmetric buffer of ", dst.bytes, " bytes");
  world.fuzz_delay(s_);
  // The clock is read only when tracing: at 24 ns a read it is visible on store-heavy kernels.
  if (world.check_protocol) impl::protocol_put(s_, peer, dst.id, offset, bytes);
  impl::occupy_link(*s_, peer, bytes);
  if (world.vt && peer != rank()) {
    world.vt->issue(*s_, peer);
    world.vt->transfer(*s_, peer, bytes, "put");
  }
  const auto start = world.tracing ? Clock::now() : Clock::time_point{};
  if (bytes > 0) std::memcpy(world.buffer(dst, peer) + offset, src, bytes);
  if (world.tracing) s_->kernel->trace_end(s_, "put", start);
}

void WgContext::store(int peer, void* dst, const void* src, std::size_t bytes) {
  auto& world = *s_->kernel->device->world;
  FC_CHECK_INTERNAL(peer >= 0 && peer < world.size, "store to rank ", peer);
  world.fuzz_delay(s_);
  if (world.check_protocol)
    impl::protocol_put(s_, peer, -1, reinterpret_cast<std::uintptr_t>(dst), bytes);
  impl::occupy_link(*s_, peer, bytes);
  if (world.vt && peer != rank()) {
    world.vt->issue(*s_, peer);
    world.vt->transfer(*s_, peer, bytes, "store");
  }
  const auto start = world.tracing ? Clock::now() : Clock::time_point{};
  if (bytes > 0) std::memcpy(dst, src, bytes);
  if (world.tracing) s_->kernel->trace_end(s_, "store", start);
}

void WgContext::signal(int peer, int slot, SignalOp op, std::uint64_t value) {
  auto& world = *s_->kernel->device->world;
  FC_CHECK_INTERNAL(peer >= 0 && peer < world.size, "signal to rank ", peer);
  FC_CHECK_INTERNAL(slot >= 0 && slot < kSlotsPerDevice, "signal slot ", slot);
  world.fuzz_delay(s_);
  std::vector<impl::PendingPut> covered;
  if (world.check_protocol) covered = impl::protocol_covers(s_, peer);
  impl::Device& dev = *world.devices[rank()];
  if (world.vt) world.vt->issue(*s_, peer);
  if (peer != rank() && dev.link)
    impl::post_on_link(dev, peer, slot, op, value, std::move(covered));
  else
    impl::deliver_signal(world, rank(), peer, slot, op, value, covered,
                         world.vt ? world.vt->signal_arrival(*s_, peer) : 0.0);
  if (world.tracing) impl::trace_signal(*s_, peer, slot);
}

void WgContext::put_signal(int peer, SymBuffer dst, std::size_t offset, const void* src,
                           std::size_t bytes, int slot, SignalOp op, std::uint64_t value) {
  put(peer, dst, offset, src, bytes);
  signal(peer, slot, op, value);
}

std::uint64_t WgContext::add_local(int slot, std::uint64_t value) {
  FC_CHECK_INTERNAL(slot >= 0 && slot < kSlotsPerDevice, "add_local on slot ", slot);
  auto& world = *s_->kernel->device->world;
  std::vector<impl::PendingPut> covered;
  if (world.check_protocol) covered = impl::protocol_covers(s_, rank());
  const std::uint64_t now =
      impl::deliver_signal(world, rank(), rank(), slot, SignalOp::add, value, covered, s_->vclock);
  if (world.check_protocol) impl::protocol_observe(s_, slot, now);
  // The add that completes this call's count (the last tile of a slice) tells its workgroup that
  // every other add happened: it goes on from the latest of them. Earlier adds tell it nothing it
  // may act on (the others' adds may still lie ahead in virtual time, behind it in host order).
  if (world.vt && now == world.ranks[rank()]->expected(slot))
    s_->vclock = std::max(s_->vclock, world.vt->devices[rank()].slot_time[slot]);
  return now;
}

std::uint64_t WgContext::signal_value(int slot) const {
  auto& dev = *s_->kernel->device;
  const std::uint64_t v = dev.slots[slot].load(std::memory_order_acquire);
  if (dev.world->check_protocol) impl::protocol_observe(s_, slot, v);
  if (dev.world->vt) s_->vclock = std::max(s_->vclock, dev.world->vt->devices[dev.rank].slot_time[slot]);
  return v;
}

// ----------------------------------------------------------------------------------------------
// Host side: symmetric allocation and slots

std::byte* World::State::buffer(SymBuffer b, int rank) {
  std::lock_guard lock(mem_mu);
  FC_CHECK_INTERNAL(b.id >= 0 && b.id < static_cast<int>(buffers.size()), "unknown buffer ", b.id);
  return buffers[b.id].memory[rank].get();
}

std::string World::State::buffer_name(int id) {
  std::lock_guard lock(mem_mu);
  if (id < 0 || id >= static_cast<int>(buffers.size()))
    return fusedcoll::detail::make_string(id, " (no such buffer)");
  return fusedcoll::detail::make_string(id, " ('", buffers[id].name, "')");
}

SymBuffer Rank::alloc(std::size_t bytes, const std::string& tag) {
  exchange(fusedcoll::detail::make_string("alloc '", tag, "' ", bytes, " bytes"), nullptr);
  // Matching calls (checked by the exchange) make every rank's n-th allocation the same buffer;
  // whichever rank gets there first creates it for all.
  auto& w = world_;
  std::lock_guard lock(w.mem_mu);
  const int id = w.allocs_done[rank_]++;
  if (id == static_cast<int>(w.buffers.size())) {
    World::State::Buffer buf;
    buf.bytes = bytes;
    buf.name = tag;
    for (int r = 0; r < w.size; ++r)
      buf.memory.emplace_back(new std::byte[std::max<std::size_t>(bytes, 1)]());
    w.buffers.push_back(std::move(buf));
  }
  return SymBuffer{id, bytes};
}

std::byte* Rank::local(SymBuffer b) { return world_.buffer(b, rank_); }

SymBuffer Rank::scratch(const std::string& tag, std::size_t bytes) {
  // Only the cost model's cache term reads what a call asked for: a map insertion per scratch
  // request would otherwise cost every collective on the host clock for nothing.
  if (working_set_declared_ && world_.vt) {
    std::size_t& asked = op_scratch_[tag];
    asked = std::max(asked, bytes);
  }
  auto it = scratch_.find(tag);
  if (it != scratch_.end() && it->second.bytes >= bytes) return it->second;
  // Grow geometrically so that a slowly growing shape does not allocate on every call.
  const std::size_t grown = it == scratch_.end() ? 0 : 2 * it->second.bytes;
  const SymBuffer b = alloc(std::max(bytes, grown), tag);
  scratch_[tag] = b;
  return b;
}

int Rank::slots(const std::string& key, int n) {
  auto& w = world_;
  std::lock_guard lock(w.slots_mu);
  auto& mine = w.slot_keys[rank_];
  auto it = mine.find(key);
  if (it != mine.end() && it->second.second >= n) return it->second.first;
  int& next = w.next_slot[rank_];
  FC_ENFORCE(next + n <= kSlotsPerDevice, "out of signal slots: '", key, "' needs ", n, " more, ",
             kSlotsPerDevice - next, " left");
  mine[key] = {next, n};
  next += n;
  return next - n;
}

void Rank::begin_op() {
  ++op_epoch_;
  working_set_declared_ = false;
  working_set_user_ = 0;
  op_scratch_.clear();
}

void Rank::declare_working_set(std::size_t user_bytes) {
  working_set_declared_ = true;
  working_set_user_ = user_bytes;
}

std::uint64_t Rank::expect(int slot, std::uint64_t count) {
  expected_[slot] += count;
  return expected_[slot];
}

}  // namespace fusedcoll::emu
