// Tracing (FUSEDCOLL_TRACE): events are collected in memory while the world runs and written as
// one Chrome/Perfetto JSON file when it is destroyed.

#include "emu/trace.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "emu/state.hpp"

namespace fusedcoll::emu {

using Clock = std::chrono::steady_clock;

namespace impl {

void Kernel::trace_end(WgState* wg, const char* what, Clock::time_point start) {
  World::State& world = *device->world;
  if (!world.tracing || world.vt) return;  // virtual time records its own spans (emu/vtime.cpp)
  TraceEvent e;
  e.name = fusedcoll::detail::make_string(name, " ", what, " ", wg->id);
  e.category = what;
  e.pid = device->rank;
  e.tid = std::max(wg->cu, 0);
  e.ts_us = micros_since(world.origin, start);
  e.dur_us = micros_since(start, Clock::now());
  world.record(std::move(e));
}

void trace_signal(WgState& wg, int peer, int slot) {
  World::State& world = *wg.kernel->device->world;
  TraceEvent e;
  e.name = fusedcoll::detail::make_string("signal r", peer, " slot ", slot);
  e.category = "signal";
  e.pid = wg.kernel->device->rank;
  e.tid = std::max(wg.cu, 0);
  e.ts_us = world.vt ? wg.vclock * 1e6 : micros_since(world.origin, Clock::now());
  e.dur_us = 0.5;
  world.record(std::move(e));
}

void trace_link(Device& dev, int peer, std::size_t bytes, Clock::time_point begin, double seconds) {
  World::State& world = *dev.world;
  TraceEvent e;
  e.name = fusedcoll::detail::make_string("link to r", peer, " ", bytes, " B");
  e.category = "link";
  e.pid = dev.rank;
  e.tid = kLinkTrack;
  e.ts_us = micros_since(world.origin, begin);
  e.dur_us = seconds * 1e6;
  world.record(std::move(e));
}

}  // namespace impl

void World::State::record(impl::TraceEvent e) {
  std::lock_guard lock(trace_mu);
  trace.push_back(std::move(e));
}

namespace {

std::string track_name(int tid) {
  if (tid == impl::kKernelTrack) return "kernels";
  if (tid == impl::kNicTrack) return "NIC";
  if (tid == impl::kLinkTrack) return "link";
  if (tid > impl::kLinkTrack) return "link to r" + std::to_string(tid - impl::kLinkTrack - 1);
  return "CU " + std::to_string(tid);
}

}  // namespace

void World::State::write_trace() {
  // A track per arena slot that ran work (oneTBB numbers the slots of a C-thread arena from 0 to
  // C, so which slots appear depends on which threads joined).
  std::set<std::pair<int, int>> used;
  for (const auto& e : trace) used.insert({e.pid, e.tid});
  std::vector<fusedcoll::detail::TraceName> processes, tracks;
  for (int r = 0; r < size; ++r) processes.push_back({r, 0, "device " + std::to_string(r)});
  for (const auto& [pid, tid] : used) tracks.push_back({pid, tid, track_name(tid)});
  fusedcoll::detail::write_chrome_trace(trace_path, processes, tracks, trace);
}

}  // namespace fusedcoll::emu
