// Failure and the watchdog: how one failure aborts every wait of the world, and how a hang becomes
// a report. The watchdog checks every 5 ms whether any workgroup has waited longer than the
// timeout; the report lists every blocked workgroup (slot, target, current value, who did and did
// not signal it), the workgroups that never became resident, and what each host thread was doing.

#include <chrono>
#include <exception>
#include <mutex>
#include <sstream>

#include "emu/state.hpp"
#include "fusedcoll/detail/spmd.hpp"

namespace fusedcoll::emu {

using Clock = std::chrono::steady_clock;

// ----------------------------------------------------------------------------------------------
// Failure

void World::State::abort_from(std::exception_ptr error, const std::string& where) {
  std::string what = "unknown exception";
  bool timeout = false;
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    what = e.what();
    timeout = true;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  abort(timeout, timeout ? what : fusedcoll::detail::make_string(where, " failed: ", what));
}

void World::State::abort(bool is_timeout, const std::string& reason) {
  {
    std::lock_guard lock(abort_mu);
    if (aborted.load(std::memory_order_acquire)) return;
    abort_is_timeout = is_timeout;
    abort_reason = reason;
    aborted.store(true, std::memory_order_release);
  }
  for (auto& d : devices) d->wake_all();
  rendezvous_cv.notify_all();
}

void World::State::throw_abort() {
  std::string reason;
  bool timeout;
  {
    std::lock_guard lock(abort_mu);
    reason = abort_reason;
    timeout = abort_is_timeout;
  }
  if (timeout) throw TimeoutError(reason);
  throw fusedcoll::detail::SecondaryError<BackendError>(kAbortPrefix + reason);
}

// ----------------------------------------------------------------------------------------------
// Reports

void Rank::set_activity(const std::string& what) {
  std::lock_guard lock(world_.activity_mu);
  world_.activity[rank_] = what;
}

std::string World::State::report(const std::string& headline) {
  std::ostringstream os;
  os << headline << "\n";
  bool any = false;
  for (auto& d : devices) {
    std::lock_guard lock(d->wait_mu);
    for (impl::WgState* w : d->waiters) {
      any = true;
      const std::uint64_t cur = d->slots[w->wait_slot].load(std::memory_order_acquire);
      const std::uint64_t senders = d->senders[w->wait_slot].load(std::memory_order_relaxed);
      os << "  rank " << d->rank << " kernel '" << w->kernel->name << "' WG " << w->id
         << " waits for slot " << w->wait_slot << slot_name(d->rank, w->wait_slot) << " "
         << to_string(w->wait_cmp) << " " << w->wait_value << ", current value " << cur << " (for "
         << std::chrono::duration<double>(Clock::now() - w->wait_since).count()
         << " s); signalled by ranks {";
      std::string never;
      for (int r = 0; r < size; ++r) {
        if (senders >> (r % 64) & 1)
          os << r << " ";
        else
          never += std::to_string(r) + " ";
      }
      os << "}, never by {" << never << "}\n";
    }
    if (d->current != nullptr) {
      impl::Kernel& k = *d->current;
      std::string pending;
      for (int i = k.next; i < k.num_wgs; ++i) pending += std::to_string(k.order[i]) + " ";
      if (!pending.empty())
        os << "  rank " << d->rank << " kernel '" << k.name << "': WGs { " << pending
           << "} never became resident (max_resident_wgs " << max_resident << ")\n";
    }
  }
  if (!any) os << "  (no workgroup is waiting)\n";
  os << "host threads:\n";
  std::lock_guard lock(activity_mu);
  for (int r = 0; r < size; ++r) os << "  rank " << r << ": " << activity[r] << "\n";
  return os.str();
}

std::string World::State::slot_name(int rank, int slot) {
  std::lock_guard lock(slots_mu);
  for (const auto& [key, range] : slot_keys[rank])
    if (slot >= range.first && slot < range.first + range.second)
      return fusedcoll::detail::make_string(" ('", key, "'[", slot - range.first, "])");
  return "";
}

// ----------------------------------------------------------------------------------------------
// Watchdog

void World::State::watch() {
  std::unique_lock lock(watch_mu);
  while (!stopping) {
    watch_cv.wait_for(lock, std::chrono::milliseconds(5));
    if (stopping || aborted.load(std::memory_order_acquire)) continue;
    const auto now = Clock::now();
    const auto limit = std::chrono::duration<double>(timeout_s);
    bool expired = false;
    for (auto& d : devices) {
      std::lock_guard dl(d->wait_mu);
      for (impl::WgState* w : d->waiters)
        if (now - w->wait_since > limit) expired = true;
    }
    if (expired) {
      lock.unlock();
      abort(true, report(fusedcoll::detail::make_string(
                      "fusedcoll emu: timeout: a workgroup waited more than ", timeout_s,
                      " s (FUSEDCOLL_TIMEOUT). Blocked:")));
      lock.lock();
    }
  }
}

}  // namespace fusedcoll::emu
