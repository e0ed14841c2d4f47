#pragma once
// Protocol checking (docs/emulator.md, "Protocol checking"; emu/protocol.cpp): the records of
// every put into a device's memory and the signals that publish them, and the checks each put,
// signal and mailbox read runs when `World::State::check_protocol` is on.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "emu/runtime.hpp"

namespace fusedcoll::emu::impl {

struct Device;

/// The latest put into each byte range of a device's memory, and the signals its writer sent
/// after it.
struct PutRecord {
  std::size_t end = 0;         // one past the last byte; the map key is the first
  std::uint64_t op_epoch = 0;  // the writer's op call (Rank::begin_op count)
  std::uint64_t phase = 0;     // the writer's rendezvous count at its kernel's launch
  int src_rank = 0;
  std::uint64_t src_launch = 0;  // the writer's kernel (launch index on src_rank)
  int src_wg = 0;
  std::string src_kernel;
  std::uint64_t serial = 0;
  // Signals to this device the writer sent after the put: (slot, slot value right after it).
  // Observing any of them at that value or more proves the put complete. A few suffice: kernels
  // signal right after the put they publish.
  static constexpr int kMaxCovers = 4;
  int covers = 0;
  std::pair<int, std::uint64_t> cover[kMaxCovers];
};

/// The puts into one device's memory, per symmetric buffer id (-1: zero-copy stores, keyed by
/// address). Intervals never overlap: a new put replaces what it overwrites.
struct ProtocolState {
  std::mutex mu;
  std::map<int, std::map<std::size_t, PutRecord>> puts;
  std::uint64_t next_serial = 0;
};

/// A put of this workgroup not yet covered by enough signals.
struct PendingPut {
  int peer = 0;
  int buffer = 0;
  std::size_t begin = 0;
  std::uint64_t serial = 0;
  int signals = 0;  // signals to `peer` this WG sent since the put
};

// Each is called only when `World::State::check_protocol` is on.
/// Records a put (buffer >= 0) or zero-copy store (buffer -1, begin = address) into `peer`'s
/// memory; throws ProtocolError if a put of the same call and phase wrote any of these bytes.
void protocol_put(WgState* wg, int peer, int buffer, std::size_t begin, std::size_t bytes);
/// The puts a signal from this workgroup to `peer` will cover: its earlier puts to `peer` (each
/// stays listed for PutRecord::kMaxCovers signals). Taken when the signal is issued; credited by
/// `protocol_apply_signal` when it lands, which with the link model is later, on another thread.
std::vector<PendingPut> protocol_covers(WgState* wg, int peer);
/// Applies a signal to `dst`'s slot and credits it to `covered`, atomically with respect to
/// readers' checks. Returns the slot's value right after the update.
std::uint64_t protocol_apply_signal(Device& dst, int slot, SignalOp op, std::uint64_t value,
                                    const std::vector<PendingPut>& covered);
/// Throws ProtocolError unless every byte read was put in this call and published to this WG.
void protocol_read(WgState* wg, SymBuffer b, std::size_t offset, std::size_t bytes);
/// Notes that this workgroup saw `slot` at `value` (acquire).
void protocol_observe(WgState* wg, int slot, std::uint64_t value);

}  // namespace fusedcoll::emu::impl
