// The emulator runtime: devices as oneTBB arenas, workgroups as coroutines run as arena tasks,
// signal slots with waiter lists, collective rendezvous, the watchdog that turns a hang into a
// report, schedule fuzzing and tracing.
//
// Why coroutines and not `tbb::task::suspend`: a suspended workgroup must not hold a thread
// (8 devices x 4 compute units run on 2 cores), and oneTBB's resumable tasks switch stacks with
// swapcontext, which ThreadSanitizer cannot follow (it crashes). A C++20 coroutine suspends by
// returning, so waiting costs no thread and the sanitizers see ordinary code.

#include "emu/runtime.hpp"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "emu/state.hpp"
#include "fusedcoll/env.hpp"

namespace fusedcoll::emu {

using Clock = std::chrono::steady_clock;

const char* to_string(Cmp c) noexcept {
  switch (c) {
    case Cmp::eq: return "==";
    case Cmp::ne: return "!=";
    case Cmp::gt: return ">";
    case Cmp::ge: return ">=";
    case Cmp::lt: return "<";
    case Cmp::le: return "<=";
  }
  return "?";
}

namespace {

bool satisfied(std::uint64_t current, Cmp cmp, std::uint64_t value) {
  switch (cmp) {
    case Cmp::eq: return current == value;
    case Cmp::ne: return current != value;
    case Cmp::gt: return current > value;
    case Cmp::ge: return current >= value;
    case Cmp::lt: return current < value;
    case Cmp::le: return current <= value;
  }
  return false;
}

double micros_since(Clock::time_point origin, Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t - origin).count();
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// Scheduling

namespace impl {

void run_wg(WgState* wg);

// The functor oneTBB stores and runs. It only carries the pointer: oneTBB's task hand-off happens
// inside the uninstrumented libtbb, so ThreadSanitizer cannot see it; tests/tsan.supp silences
// exactly this frame, and `run_wg` re-establishes the ordering with its own acquire.
struct Trampoline {
  WgState* wg;
  [[gnu::noinline]] void operator()() const { run_wg(wg); }
};

void schedule(WgState* wg) {
  // Read everything needed from `wg` before the release: once it is published the workgroup may
  // run, finish, and (with its kernel) be destroyed, and the only edge ThreadSanitizer sees from
  // here to there is this release/acquire pair (the oneTBB hand-off is invisible to it).
  tbb::task_arena& arena = wg->kernel->device->arena;
  wg->handoff.fetch_add(1, std::memory_order_release);
  arena.enqueue(Trampoline{wg});
}

void run_wg(WgState* wg) {
  wg->handoff.load(std::memory_order_acquire);
  Kernel& k = *wg->kernel;
  wg->cu = tbb::this_task_arena::current_thread_index();
  if (!wg->started) {
    wg->started = true;
    wg->resident_since = Clock::now();
    try {
      wg->task = k.body(wg->ctx);
    } catch (...) {
      k.finish(wg, std::current_exception());
      return;
    }
    wg->task.handle().promise().state = wg;
  }
  // After resume() returns the workgroup may already run elsewhere or be finished: touch nothing.
  wg->task.handle().resume();
}

std::exception_ptr clone_error(std::exception_ptr e, const std::string& prefix) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return make_error(err.code(), prefix + err.what());
  } catch (const std::exception& err) {
    return std::make_exception_ptr(std::runtime_error(prefix + err.what()));
  } catch (...) {
    return std::make_exception_ptr(std::runtime_error(prefix + "unknown exception"));
  }
}

void Kernel::finish(WgState* wg, std::exception_ptr wg_error) {
  World::State& world = *device->world;
  if (wg_error) {
    world.abort_from(wg_error, fusedcoll::detail::make_string("rank ", device->rank, " kernel '", name, "' WG ",
                                                wg->id));
  }
  trace_end(wg, "wg", wg->resident_since);
  int completed = 1;
  std::vector<WgState*> to_start;
  {
    std::lock_guard lock(device->wait_mu);
    wg->finished = true;
    while (next < num_wgs) {
      WgState* n = wgs[order[next++]].get();
      if (world.aborted.load(std::memory_order_acquire)) {
        ++completed;  // never started: counts as done so the launch can return
        continue;
      }
      to_start.push_back(n);
      break;
    }
  }
  for (WgState* n : to_start) schedule(n);
  std::lock_guard lock(done_mu);
  if (wg_error && !error) error = clone_error(wg_error, "");
  finished += completed;
  if (finished == num_wgs) done_cv.notify_all();
}

void Kernel::trace_end(WgState* wg, const char* what, Clock::time_point start) {
  World::State& world = *device->world;
  if (!world.tracing) return;
  TraceEvent e;
  e.name = fusedcoll::detail::make_string(name, " ", what, " ", wg->id);
  e.category = what;
  e.pid = device->rank;
  e.tid = std::max(wg->cu, 0);
  e.ts_us = micros_since(world.origin, start);
  e.dur_us = micros_since(start, Clock::now());
  world.record(std::move(e));
}

}  // namespace impl

void WgTask::promise_type::FinalAwaiter::await_suspend(
    std::coroutine_handle<promise_type> h) noexcept {
  impl::WgState* wg = h.promise().state;
  wg->kernel->finish(wg, h.promise().error);
}

// ----------------------------------------------------------------------------------------------
// Waiting and signalling

bool WaitAwaiter::await_ready() const {
  auto& dev = *wg->kernel->device;
  return satisfied(dev.slots[slot].load(std::memory_order_acquire), cmp, value);
}

bool WaitAwaiter::await_suspend(std::coroutine_handle<>) {
  auto& dev = *wg->kernel->device;
  std::lock_guard lock(dev.wait_mu);
  if (dev.world->aborted.load(std::memory_order_acquire)) return false;
  if (satisfied(dev.slots[slot].load(std::memory_order_acquire), cmp, value)) return false;
  wg->waiting = true;
  wg->wait_slot = slot;
  wg->wait_cmp = cmp;
  wg->wait_value = value;
  wg->wait_since = Clock::now();
  dev.waiters.push_back(wg);
  return true;  // from here on another thread may resume us: touch nothing
}

void WaitAwaiter::await_resume() const {
  auto& dev = *wg->kernel->device;
  auto& world = *dev.world;
  if (world.aborted.load(std::memory_order_acquire)) world.throw_abort();
  // What the workgroup observed is at least what satisfied it (slots only grow under the
  // cumulative protocol); reading it again here covers every path out of the wait.
  if (world.check_protocol)
    impl::protocol_observe(wg, slot, dev.slots[slot].load(std::memory_order_acquire));
  if (wg->waited) {
    wg->waited = false;
    wg->kernel->trace_end(wg, "wait", wg->wait_since);
  }
}

namespace impl {

void Device::wake_satisfied() {
  std::vector<WgState*> ready;
  {
    std::lock_guard lock(wait_mu);
    auto keep = waiters.begin();
    for (WgState* w : waiters) {
      if (satisfied(slots[w->wait_slot].load(std::memory_order_acquire), w->wait_cmp,
                    w->wait_value)) {
        w->waiting = false;
        w->waited = true;
        ready.push_back(w);
      } else {
        *keep++ = w;
      }
    }
    waiters.erase(keep, waiters.end());
  }
  for (WgState* w : ready) schedule(w);
}

void Device::wake_all() {
  std::vector<WgState*> ready;
  {
    std::lock_guard lock(wait_mu);
    for (WgState* w : waiters) w->waiting = false;
    ready.swap(waiters);
  }
  for (WgState* w : ready) schedule(w);
}

}  // namespace impl

namespace impl {

std::uint64_t deliver_signal(World::State& world, int src, int peer, int slot, SignalOp op,
                             std::uint64_t value, const std::vector<PendingPut>& covered) {
  auto& dev = *world.devices[peer];
  std::uint64_t after = value;
  if (world.check_protocol) after = protocol_apply_signal(dev, slot, op, value, covered);
  else if (op == SignalOp::set) dev.slots[slot].store(value, std::memory_order_release);
  else after = dev.slots[slot].fetch_add(value, std::memory_order_acq_rel) + value;
  dev.senders[slot].fetch_or(std::uint64_t{1} << (src % 64), std::memory_order_relaxed);
  dev.wake_satisfied();
  return after;
}

}  // namespace impl

void World::State::run_link(impl::Device& dev) {
  impl::Link& link = *dev.link;
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
    impl::LinkSignal s = std::move(link.in_flight.front());
    link.in_flight.pop_front();
    lock.unlock();
    impl::deliver_signal(*this, dev.rank, s.peer, s.slot, s.op, s.value, s.covered);
    lock.lock();
  }
}

namespace {

/// Counts `bytes` to `peer` as sent and books them on the workgroup's device link: they leave
/// after everything booked before, at the modelled bandwidth. Local writes cross no link.
void occupy_link(impl::WgState& wg, int peer, std::size_t bytes) {
  auto& dev = *wg.kernel->device;
  if (peer == dev.rank) return;
  dev.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  if (!dev.link) return;
  auto& world = *dev.world;
  const double seconds = world.link_gbps > 0 ? double(bytes) / (world.link_gbps * 1e9) : 0.0;
  Clock::time_point begin;
  {
    std::lock_guard lock(dev.link->mu);
    begin = std::max(Clock::now(), dev.link->free_at);
    dev.link->free_at = begin + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(seconds));
  }
  if (world.tracing) {
    impl::TraceEvent e;
    e.name = fusedcoll::detail::make_string("link to r", peer, " ", bytes, " B");
    e.category = "link";
    e.pid = dev.rank;
    e.tid = impl::kLinkTrack;
    e.ts_us = micros_since(world.origin, begin);
    e.dur_us = seconds * 1e6;
    world.record(std::move(e));
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// WgContext

int WgContext::rank() const noexcept { return s_->kernel->device->rank; }
int WgContext::world_size() const noexcept { return s_->kernel->device->world->size; }
int WgContext::wg() const noexcept { return s_->id; }
int WgContext::num_wgs() const noexcept { return s_->kernel->num_wgs; }

std::byte* WgContext::local(SymBuffer b) const {
  return s_->kernel->device->world->buffer(b, rank());
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
  occupy_link(*s_, peer, bytes);
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
  occupy_link(*s_, peer, bytes);
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
  impl::Link* link = peer == rank() ? nullptr : world.devices[rank()]->link.get();
  if (link) {
    {
      std::lock_guard lock(link->mu);
      const auto now = Clock::now();
      const auto due = std::max(now, link->free_at) +
                       std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double, std::micro>(world.link_latency_us));
      link->in_flight.push_back({due, peer, slot, op, value, std::move(covered)});
    }
    link->cv.notify_one();
  } else {
    impl::deliver_signal(world, rank(), peer, slot, op, value, covered);
  }
  if (world.tracing) {
    impl::TraceEvent e;
    e.name = fusedcoll::detail::make_string("signal r", peer, " slot ", slot);
    e.category = "signal";
    e.pid = rank();
    e.tid = std::max(s_->cu, 0);
    e.ts_us = micros_since(world.origin, Clock::now());
    e.dur_us = 0.5;
    world.record(std::move(e));
  }
}

void WgContext::put_signal(int peer, SymBuffer dst, std::size_t offset, const void* src,
                           std::size_t bytes, int slot, SignalOp op, std::uint64_t value) {
  put(peer, dst, offset, src, bytes);
  signal(peer, slot, op, value);
}

WaitAwaiter WgContext::wait_until(int slot, Cmp cmp, std::uint64_t value) {
  FC_CHECK_INTERNAL(slot >= 0 && slot < kSlotsPerDevice, "wait on slot ", slot);
  return WaitAwaiter{s_, slot, cmp, value};
}

std::uint64_t WgContext::add_local(int slot, std::uint64_t value) {
  FC_CHECK_INTERNAL(slot >= 0 && slot < kSlotsPerDevice, "add_local on slot ", slot);
  auto& world = *s_->kernel->device->world;
  std::vector<impl::PendingPut> covered;
  if (world.check_protocol) covered = impl::protocol_covers(s_, rank());
  const std::uint64_t now =
      impl::deliver_signal(world, rank(), rank(), slot, SignalOp::add, value, covered);
  if (world.check_protocol) impl::protocol_observe(s_, slot, now);
  return now;
}

std::uint64_t WgContext::signal_value(int slot) const {
  auto& dev = *s_->kernel->device;
  const std::uint64_t v = dev.slots[slot].load(std::memory_order_acquire);
  if (dev.world->check_protocol) impl::protocol_observe(s_, slot, v);
  return v;
}

void WgContext::compute(const char* what, const std::function<void()>& f) {
  auto& world = *s_->kernel->device->world;
  const auto start = Clock::now();
  f();
  if (world.tracing) s_->kernel->trace_end(s_, what, start);
}

// ----------------------------------------------------------------------------------------------
// World::State

World::State::State(const WorldOptions& o) : options(o) {
  enforce_env();
  FC_ENFORCE(o.world_size >= 1 && o.world_size <= 64, "emu world_size ", o.world_size,
             " is outside [1, 64]");
  FC_ENFORCE(o.device.compute_units >= 1 && o.device.compute_units <= 64,
             "compute_units ", o.device.compute_units, " is outside [1, 64]");
  FC_ENFORCE(o.device.max_resident_wgs >= 0, "max_resident_wgs is negative");
  size = o.world_size;
  compute_units = o.device.compute_units;
  max_resident = o.device.max_resident_wgs > 0 ? o.device.max_resident_wgs : 4 * compute_units;
  timeout_s = o.timeout_s > 0 ? o.timeout_s : env().timeout_s;
  fuzz_seed = o.fuzz_seed != 0 ? o.fuzz_seed : env().fuzz_seed;
  check_protocol = o.check_protocol || env().check_protocol;
  FC_ENFORCE(o.link_gbps >= 0 && o.link_gbps <= 1e6, "link_gbps ", o.link_gbps,
             " is outside [0, 1e6]");
  FC_ENFORCE(o.link_latency_us >= 0 && o.link_latency_us <= 1e6, "link_latency_us ",
             o.link_latency_us, " is outside [0, 1e6]");
  link_gbps = o.link_gbps > 0 ? o.link_gbps : env().link_gbps;
  link_latency_us = o.link_latency_us > 0 ? o.link_latency_us : env().link_latency_us;
  trace_path = env().trace_path;
  tracing = !trace_path.empty();
  origin = Clock::now();
  // Every device gets its compute units as real threads (they idle when nothing is runnable).
  parallelism = std::make_unique<tbb::global_control>(
      tbb::global_control::max_allowed_parallelism,
      static_cast<std::size_t>(size * compute_units + 1));
  for (int r = 0; r < size; ++r) devices.push_back(std::make_unique<impl::Device>(this, r));
  activity.assign(size, "not started");
  rendezvous_seq.assign(size, 0);
  allocs_done.assign(size, 0);
  slot_keys.resize(size);
  next_slot.assign(size, 0);
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<Rank>(*this, r));
  if (link_model())
    for (auto& d : devices) {
      d->link = std::make_unique<impl::Link>();
      d->link->engine = std::thread([this, dev = d.get()] { run_link(*dev); });
    }
  watchdog = std::thread([this] { watch(); });
}

World::State::~State() {
  {
    std::lock_guard lock(watch_mu);
    stopping = true;
  }
  watch_cv.notify_all();
  watchdog.join();
  for (auto& d : devices) {
    if (!d->link) continue;
    {
      std::lock_guard lock(d->link->mu);
      d->link->stopping = true;
    }
    d->link->cv.notify_all();
    d->link->engine.join();
  }
  for (auto& d : devices) d->arena.terminate();
  if (tracing) write_trace();
}

std::byte* World::State::buffer(SymBuffer b, int rank) {
  std::lock_guard lock(mem_mu);
  FC_CHECK_INTERNAL(b.id >= 0 && b.id < static_cast<int>(buffers.size()), "unknown buffer ",
                    b.id);
  return buffers[b.id].memory[rank].get();
}

void World::State::fuzz_delay(impl::WgState* wg) {
  if (fuzz_seed == 0) return;
  const std::uint64_t r = wg->rng();
  if (r % 4 != 0) return;  // a quarter of puts and signals get a delay of up to 200 us
  std::this_thread::sleep_for(std::chrono::microseconds((r >> 8) % 200));
}

void World::State::record(impl::TraceEvent e) {
  std::lock_guard lock(trace_mu);
  trace.push_back(std::move(e));
}

void World::State::write_trace() {
  std::ofstream out(trace_path);
  if (!out) {
    std::fprintf(stderr, "fusedcoll: cannot write trace to '%s'\n", trace_path.c_str());
    return;
  }
  // Microsecond timestamps with fixed decimals: the default 6 significant digits would merge
  // adjacent events after 0.1 s and turn later ones into exponents.
  out << std::fixed << std::setprecision(3) << "{\"traceEvents\":[\n";
  // A track per arena slot that ran work (oneTBB numbers the slots of a C-thread arena from 0 to
  // C, so which slots appear depends on which threads joined).
  std::set<std::pair<int, int>> tracks;
  for (const auto& e : trace) tracks.insert({e.pid, e.tid});
  bool first = true;
  for (int r = 0; r < size; ++r) {
    out << (first ? "" : ",\n") << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << r
        << ",\"args\":{\"name\":\"device " << r << "\"}}";
    first = false;
  }
  for (const auto& [pid, tid] : tracks)
    out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << tid
        << ",\"args\":{\"name\":\""
        << (tid == impl::kLinkTrack ? std::string("link") : "CU " + std::to_string(tid))
        << "\"}}";
  for (const auto& e : trace)
    out << ",\n{\"name\":\"" << e.name << "\",\"cat\":\"" << e.category
        << "\",\"ph\":\"X\",\"pid\":" << e.pid << ",\"tid\":" << e.tid << ",\"ts\":" << e.ts_us
        << ",\"dur\":" << e.dur_us << "}";
  out << "\n]}\n";
}

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
  throw BackendError(kAbortPrefix + reason);
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
         << to_string(w->wait_cmp) << " " << w->wait_value << ", current value " << cur
         << " (for " << std::chrono::duration<double>(Clock::now() - w->wait_since).count()
         << " s); signalled by ranks {";
      std::string never;
      for (int r = 0; r < size; ++r) {
        if (senders >> (r % 64) & 1) os << r << " ";
        else never += std::to_string(r) + " ";
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
      abort(true, report(fusedcoll::detail::make_string("fusedcoll emu: timeout: a workgroup waited more than ",
                                             timeout_s, " s (FUSEDCOLL_TIMEOUT). Blocked:")));
      lock.lock();
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Devices and kernels

namespace impl {

Device::Device(World::State* w, int r)
    : world(w),
      rank(r),
      arena(w->compute_units, 0),
      slots(std::make_unique<std::atomic<std::uint64_t>[]>(kSlotsPerDevice)),
      senders(std::make_unique<std::atomic<std::uint64_t>[]>(kSlotsPerDevice)) {
  arena.initialize();
}

}  // namespace impl

// ----------------------------------------------------------------------------------------------
// Rank

Rank::Rank(World::State& world, int rank) : world_(world), rank_(rank) {
  expected_.assign(kSlotsPerDevice, 0);
}

int Rank::size() const noexcept { return world_.size; }
int Rank::compute_units() const noexcept { return world_.compute_units; }
int Rank::max_resident_wgs() const noexcept { return world_.max_resident; }

void Rank::set_activity(const std::string& what) {
  std::lock_guard lock(world_.activity_mu);
  world_.activity[rank_] = what;
}

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
  w.rendezvous_cv.notify_all();
  const auto start = Clock::now();
  const auto limit = std::chrono::duration<double>(w.timeout_s);
  while (e.arrived < w.size) {
    if (w.aborted.load(std::memory_order_acquire)) {
      lock.unlock();
      w.throw_abort();
    }
    if (Clock::now() - start > limit) {
      std::string missing;
      for (int r = 0; r < w.size; ++r)
        if (!e.arrived_mask[r]) missing += std::to_string(r) + " ";
      lock.unlock();
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
    FC_ENFORCE(keys[r] == keys[0], "collective call #", seq, " does not match across ranks: rank 0 "
               "called '", keys[0], "' but rank ", r, " called '", keys[r], "'");
  return out;
}

void Rank::barrier(const std::string& key) { exchange("barrier " + key, nullptr); }

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
    for (int r = 0; r < w.size; ++r)
      buf.memory.emplace_back(new std::byte[std::max<std::size_t>(bytes, 1)]());
    w.buffers.push_back(std::move(buf));
  }
  return SymBuffer{id, bytes};
}

SymBuffer Rank::scratch(const std::string& tag, std::size_t bytes) {
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
  FC_ENFORCE(next + n <= kSlotsPerDevice, "out of signal slots: '", key, "' needs ", n,
             " more, ", kSlotsPerDevice - next, " left");
  mine[key] = {next, n};
  next += n;
  return next - n;
}

void Rank::begin_op() { ++op_epoch_; }

std::uint64_t Rank::expect(int slot, std::uint64_t count) {
  expected_[slot] += count;
  return expected_[slot];
}

void Rank::launch(const std::string& name, int num_wgs, const KernelBody& body) {
  auto& w = world_;
  if (w.aborted.load(std::memory_order_acquire)) w.throw_abort();
  auto& dev = *w.devices[rank_];
  impl::Kernel k;
  k.device = &dev;
  k.name = name;
  k.num_wgs = num_wgs;
  k.body = body;
  k.launch_index = dev.launches++;
  k.op_epoch = op_epoch_;
  k.phase = w.rendezvous_seq[rank_];
  for (int i = 0; i < num_wgs; ++i) {
    auto s = std::make_unique<impl::WgState>();
    s->kernel = &k;
    s->id = i;
    s->rng.seed(w.fuzz_seed * 0x9E3779B97F4A7C15ull + (std::uint64_t(rank_) << 40) +
                (k.launch_index << 20) + std::uint64_t(i));
    k.wgs.push_back(std::move(s));
    k.order.push_back(i);
  }
  if (w.fuzz_seed != 0) {
    std::mt19937_64 rng(w.fuzz_seed ^ (std::uint64_t(rank_) << 32) ^ k.launch_index);
    std::shuffle(k.order.begin(), k.order.end(), rng);
  }
  set_activity(fusedcoll::detail::make_string("waiting for kernel '", name, "' (", num_wgs, " WGs)"));
  if (num_wgs == 0) return;
  const int initial = std::min(num_wgs, w.max_resident);
  std::vector<impl::WgState*> start;
  {
    std::lock_guard lock(dev.wait_mu);
    dev.current = &k;
    k.next = initial;
    for (int i = 0; i < initial; ++i) start.push_back(k.wgs[k.order[i]].get());
  }
  for (auto* s : start) impl::schedule(s);
  {
    std::unique_lock lock(k.done_mu);
    k.done_cv.wait(lock, [&] { return k.finished == k.num_wgs; });
  }
  {
    std::lock_guard lock(dev.wait_mu);
    dev.current = nullptr;
  }
  if (k.error) std::rethrow_exception(k.error);
}

// ----------------------------------------------------------------------------------------------
// World

World::World(WorldOptions options) : state_(std::make_unique<State>(options)) {}
World::~World() = default;
int World::size() const noexcept { return state_->size; }
const WorldOptions& World::options() const noexcept { return state_->options; }
std::uint64_t World::bytes_sent(int rank) const {
  FC_ENFORCE(rank >= 0 && rank < state_->size, "bytes_sent of rank ", rank, " in a world of ",
             state_->size);
  return state_->devices[rank]->bytes_sent.load(std::memory_order_relaxed);
}

}  // namespace fusedcoll::emu
