#pragma once
// Tracing (FUSEDCOLL_TRACE; docs/emulator.md, "Debugging"; emu/trace.cpp): a Chrome/Perfetto trace
// with one process per device and one track per compute unit, plus one for the device's link.
// Events are recorded only when `World::State::tracing` is on; callers test it first, so that a
// run without tracing never reads the clock for it.

#include <chrono>
#include <cstddef>
#include <string>

#include "emu/scheduler.hpp"
#include "fusedcoll/detail/chrome_trace.hpp"

namespace fusedcoll::emu::impl {

/// Trace tracks (tid) after a device's compute units: its kernels (virtual time), its link (wall
/// clock, and the switch port in virtual time; kLinkTrack + 1 + destination for a mesh link) and
/// its NIC (virtual time).
inline constexpr int kKernelTrack = 900;
inline constexpr int kLinkTrack = 1000;
inline constexpr int kNicTrack = 1999;

using TraceEvent = fusedcoll::detail::TraceEvent;

inline double micros_since(std::chrono::steady_clock::time_point origin,
                           std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t - origin).count();
}

/// A signal from `wg` to `peer`'s `slot`, issued now (wall clock) or at its virtual clock.
void trace_signal(WgState& wg, int peer, int slot);
/// `bytes` to `peer` occupying `dev`'s link for `seconds` from `begin`.
void trace_link(Device& dev, int peer, std::size_t bytes,
                std::chrono::steady_clock::time_point begin, double seconds);

}  // namespace fusedcoll::emu::impl
