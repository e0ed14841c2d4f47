// Protocol checking mode (docs/emulator.md, "Protocol checking").
//
// A receiver may read mailbox bytes only after observing a signal that their writer sent after
// putting them. With cumulative add-counters that is decidable exactly: if a signal left slot s
// at value v, the slot only reaches v through that signal, so a workgroup that saw s >= v runs
// after it. Each put therefore records the (slot, value-after) pairs of the signals its writer
// sent to the same device afterwards, and a read checks the reader's observed slot values against
// them.
//
// The signal's update and the crediting of its covers happen under the destination's protocol
// lock, and reads check under the same lock: a reader that observed the update cannot see the
// put still uncovered.

#include <algorithm>
#include <sstream>

#include "emu/state.hpp"

namespace fusedcoll::emu::impl {
namespace {

std::string wg_name(int rank, const std::string& kernel, int wg) {
  return fusedcoll::detail::make_string("rank ", rank, " WG ", wg, " of kernel '", kernel, "'");
}

std::string region_name(World::State& world, int buffer, std::size_t begin, std::size_t end) {
  if (buffer < 0)
    return fusedcoll::detail::make_string("output bytes [", reinterpret_cast<const void*>(begin),
                                          ", +", end - begin, ")");
  return fusedcoll::detail::make_string("bytes [", begin, ", ", end, ") of symmetric buffer ",
                                        world.buffer_name(buffer));
}

/// First record that may overlap [begin, end): the one starting at or before `begin`, if it
/// reaches past it, else the first starting after.
std::map<std::size_t, PutRecord>::iterator first_overlap(std::map<std::size_t, PutRecord>& m,
                                                          std::size_t begin) {
  auto it = m.upper_bound(begin);
  if (it != m.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > begin) return prev;
  }
  return it;
}

}  // namespace

void protocol_put(WgState* wg, int peer, int buffer, std::size_t begin, std::size_t bytes) {
  if (bytes == 0) return;
  Kernel& k = *wg->kernel;
  const int me = k.device->rank;
  const std::size_t end = begin + bytes;
  ProtocolState& ps = k.device->world->devices[peer]->protocol;
  std::lock_guard lock(ps.mu);
  auto& m = ps.puts[buffer];
  auto it = first_overlap(m, begin);
  // Check before changing anything, so that the error leaves the records as they were.
  for (auto i = it; i != m.end() && i->first < end; ++i) {
    const PutRecord& r = i->second;
    if (r.op_epoch == k.op_epoch && r.phase == k.phase)
      throw ProtocolError(fusedcoll::detail::make_string(
          "fusedcoll emu protocol: ", wg_name(me, k.name, wg->id), " ",
          buffer < 0 ? "stored to" : "put to", " rank ", peer, " ",
          region_name(*k.device->world, buffer, begin, end), ", overlapping ",
          region_name(*k.device->world, buffer, std::max(begin, i->first), std::min(end, r.end)),
          " that ", wg_name(r.src_rank, r.src_kernel, r.src_wg),
          " already wrote in the same call: each destination byte may be written once per call "
          "(use disjoint mailbox regions or separate calls)"));
  }
  // Trim the overwritten records, keeping the parts outside [begin, end).
  std::vector<std::pair<std::size_t, PutRecord>> keep;
  while (it != m.end() && it->first < end) {
    if (it->first < begin) {
      PutRecord head = it->second;
      head.end = begin;
      keep.emplace_back(it->first, head);
    }
    if (it->second.end > end) keep.emplace_back(end, it->second);
    it = m.erase(it);
  }
  for (auto& [at, r] : keep) m.emplace(at, std::move(r));
  PutRecord r;
  r.end = end;
  r.op_epoch = k.op_epoch;
  r.phase = k.phase;
  r.src_rank = me;
  r.src_launch = k.launch_index;
  r.src_wg = wg->id;
  r.src_kernel = k.name;
  r.serial = ++ps.next_serial;
  m.emplace(begin, std::move(r));
  // Zero-copy stores go to final outputs that only the host reads, after the kernel: no reader
  // to check, so no signal needs crediting.
  if (buffer >= 0) wg->pending.push_back(PendingPut{peer, buffer, begin, ps.next_serial});
}

std::vector<PendingPut> protocol_covers(WgState* wg, int peer) {
  std::vector<PendingPut> covered;
  std::erase_if(wg->pending, [&](PendingPut& p) {
    if (p.peer != peer) return false;
    covered.push_back(p);
    return ++p.signals == PutRecord::kMaxCovers;
  });
  return covered;
}

std::uint64_t protocol_apply_signal(Device& dst, int slot, SignalOp op, std::uint64_t value,
                                    const std::vector<PendingPut>& covered) {
  ProtocolState& ps = dst.protocol;
  std::lock_guard lock(ps.mu);
  std::uint64_t after = value;
  if (op == SignalOp::set) dst.slots[slot].store(value, std::memory_order_release);
  else after = dst.slots[slot].fetch_add(value, std::memory_order_acq_rel) + value;
  for (const PendingPut& p : covered) {
    auto b = ps.puts.find(p.buffer);
    if (b == ps.puts.end()) continue;
    auto r = b->second.find(p.begin);
    // Overwritten (or trimmed into a new record) since: nothing left to credit.
    if (r == b->second.end() || r->second.serial != p.serial) continue;
    PutRecord& rec = r->second;
    if (rec.covers < PutRecord::kMaxCovers) rec.cover[rec.covers++] = {slot, after};
  }
  return after;
}

void protocol_observe(WgState* wg, int slot, std::uint64_t value) {
  auto [it, fresh] = wg->observed.try_emplace(slot, value);
  if (!fresh) it->second = std::max(it->second, value);
}

void protocol_read(WgState* wg, SymBuffer b, std::size_t offset, std::size_t bytes) {
  if (bytes == 0) return;
  Kernel& k = *wg->kernel;
  const int me = k.device->rank;
  const std::size_t end = offset + bytes;
  ProtocolState& ps = k.device->protocol;
  std::lock_guard lock(ps.mu);
  auto& m = ps.puts[b.id];
  const std::string reader = wg_name(me, k.name, wg->id);
  auto unwritten = [&](std::size_t from, std::size_t to) {
    return ProtocolError(fusedcoll::detail::make_string(
        "fusedcoll emu protocol: ", reader, " read ", region_name(*k.device->world, b.id, from, to),
        " of its mailbox, which no put of this call wrote (stale or never-sent data: wait for the "
        "signal that publishes it)"));
  };
  std::size_t at = offset;
  for (auto it = first_overlap(m, offset); it != m.end() && it->first < end; ++it) {
    const PutRecord& r = it->second;
    if (it->first > at) throw unwritten(at, it->first);
    at = std::min(end, r.end);
    if (r.op_epoch != k.op_epoch) throw unwritten(std::max(offset, it->first), at);
    // A rendezvous since the put orders it before this kernel; so does program order.
    if (r.phase < k.phase) continue;
    if (r.src_rank == me && r.src_launch == k.launch_index && r.src_wg == wg->id) continue;
    bool seen = false;
    for (int c = 0; c < r.covers && !seen; ++c) {
      auto o = wg->observed.find(r.cover[c].first);
      seen = o != wg->observed.end() && o->second >= r.cover[c].second;
    }
    if (seen) continue;
    std::ostringstream why;
    if (r.covers == 0) {
      why << "its writer has not signalled this rank since the put";
    } else {
      why << "it needs one of:";
      for (int c = 0; c < r.covers; ++c) {
        auto o = wg->observed.find(r.cover[c].first);
        why << " slot " << r.cover[c].first << " >= " << r.cover[c].second << " (observed ";
        if (o == wg->observed.end()) why << "never";
        else why << o->second;
        why << ")";
      }
    }
    throw ProtocolError(fusedcoll::detail::make_string(
        "fusedcoll emu protocol: ", reader, " read ",
        region_name(*k.device->world, b.id, std::max(offset, it->first), at), " that ",
        wg_name(r.src_rank, r.src_kernel, r.src_wg),
        " put, without observing a signal that publishes it: ", why.str()));
  }
  if (at < end) throw unwritten(at, end);
}

}  // namespace fusedcoll::emu::impl
