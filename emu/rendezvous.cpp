// The rendezvous of collective host calls: every rank's n-th call meets every other rank's n-th
// call (the hidden collective behind `enter`, allocation and barriers), exchanges a payload and
// checks that all ranks called the same thing. A rank that never arrives makes the others time out
// with a report naming it.

#include <algorithm>
#include <chrono>
#include <mutex>

#include "emu/state.hpp"
#include "emu/vtime.hpp"

namespace fusedcoll::emu {

using Clock = std::chrono::steady_clock;

std::vector<const void*> Rank::exchange(const std::string& key, const void* payload) {
  auto& w = world_;
  const std::uint64_t seq = w.rendezvous_seq[rank_]++;
  std::unique_lock lock(w.rendezvous_mu);
  auto& e = w.rendezvous[seq];
  if (e.keys.empty()) {
    e.keys.assign(w.size, "");
    e.payloads.assign(w.size, nullptr);
    e.arrived_mask.assign(w.size, false);
  }
  e.keys[rank_] = key;
  e.payloads[rank_] = payload;
  e.arrived_mask[rank_] = true;
  ++e.arrived;
  if (impl::VirtualTime* vt = w.vt.get()) {
    // A rendezvous is a barrier in virtual time too: everyone leaves at the latest arrival. The
    // last to arrive wakes the others as running at once, before any of them can block again,
    // so that the driver never sees a moment with all host threads blocked that is not one.
    std::lock_guard vlock(vt->mu);
    if (e.arrived == w.size) {
      double latest = 0;
      for (int r = 0; r < w.size; ++r) latest = std::max(latest, vt->clock[r]);
      for (int r = 0; r < w.size; ++r) {
        vt->clock[r] = latest;
        vt->unblock(r);
      }
    } else {
      vt->block(rank_);
    }
  }
  w.rendezvous_cv.notify_all();
  const auto start = Clock::now();
  const auto limit = std::chrono::duration<double>(w.timeout_s);
  auto run_again = [&] {  // leaving the wait early (failure): this host thread runs again
    if (!w.vt) return;
    std::lock_guard vlock(w.vt->mu);
    w.vt->unblock(rank_);
  };
  while (e.arrived < w.size) {
    if (w.aborted.load(std::memory_order_acquire)) {
      lock.unlock();
      run_again();
      w.throw_abort();
    }
    if (Clock::now() - start > limit) {
      std::string missing;
      for (int r = 0; r < w.size; ++r)
        if (!e.arrived_mask[r]) missing += std::to_string(r) + " ";
      lock.unlock();
      run_again();
      w.abort(true, w.report(fusedcoll::detail::make_string(
                        "fusedcoll emu: timeout: rank ", rank_, " waited more than ", w.timeout_s,
                        " s in collective call #", seq, " ('", key, "') for ranks { ", missing,
                        "} that never entered it. Blocked:")));
      w.throw_abort();
    }
    w.rendezvous_cv.wait_for(lock, std::chrono::milliseconds(5));
  }
  std::vector<const void*> out = e.payloads;
  std::vector<std::string> keys = e.keys;
  if (++e.departed == w.size) w.rendezvous.erase(seq);
  lock.unlock();
  for (int r = 1; r < w.size; ++r)
    FC_ENFORCE(keys[r] == keys[0], "collective call #", seq,
               " does not match across ranks: rank 0 "
               "called '",
               keys[0], "' but rank ", r, " called '", keys[r], "'");
  return out;
}

void Rank::barrier(const std::string& key) { exchange("barrier " + key, nullptr); }

}  // namespace fusedcoll::emu
