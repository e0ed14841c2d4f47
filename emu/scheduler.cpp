// Kernel execution and waits: devices as oneTBB arenas, workgroups as coroutines run as arena
// tasks, residency (at most max_resident_wgs started and unfinished), waits on signal slots and the
// wake-ups that resume them, kernel launch and completion.
//
// Why coroutines and not `tbb::task::suspend`: a suspended workgroup must not hold a thread
// (8 devices x 4 compute units run on 2 cores), and oneTBB's resumable tasks switch stacks with
// swapcontext, which ThreadSanitizer cannot follow (it crashes). A C++20 coroutine suspends by
// returning, so waiting costs no thread and the sanitizers see ordinary code.

#include "emu/scheduler.hpp"

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <mutex>
#include <numeric>

#include "emu/link.hpp"
#include "emu/state.hpp"
#include "emu/vtime.hpp"

namespace fusedcoll::emu {

using Clock = std::chrono::steady_clock;

namespace {

bool satisfied(std::uint64_t current, Cmp cmp, std::uint64_t value) {
  return fusedcoll::satisfies(current, cmp, value);
}

/// The cost model's terms of a user kernel's compute span (fusedcoll/kernel.hpp's `Cost`).
model::Work work_of(const CostTerm& t) {
  switch (t.kind) {
    case CostTerm::Kind::gemm:
      return model::gemm(t.a, t.b, t.c, t.first_touch);
    case CostTerm::Kind::gemv:
      return model::gemv(t.a, t.b, t.c);
    case CostTerm::Kind::reduce:
      return model::reduce(t.a, t.b);
    case CostTerm::Kind::copy:
      return model::copy(t.a);
  }
  return model::copy(0);
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// Scheduling

namespace impl {

// The functor oneTBB stores and runs. It only carries the pointer: oneTBB's task hand-off happens
// inside the uninstrumented libtbb, so ThreadSanitizer cannot see it; tests/tsan.supp silences
// exactly this frame, and `run_wg` re-establishes the ordering with its own acquire.
struct Trampoline {
  WgState* wg;
  [[gnu::noinline]] void operator()() const { run_wg(wg); }
};

void schedule(WgState* wg) {
  if (VirtualTime* vt = wg->kernel->device->world->vt.get()) {
    vt->push(wg, wg->vclock);
    return;
  }
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
  wg->cu = k.device->world->vt ? wg->vcu : tbb::this_task_arena::current_thread_index();
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

void Kernel::finish(WgState* wg, std::exception_ptr wg_error) {
  World::State& world = *device->world;
  // Read before done_cv: on the wall clock the kernel, and the world, may be gone right after.
  VirtualTime* const vt = world.vt.get();
  if (wg_error) {
    world.abort_from(wg_error, fusedcoll::detail::make_string("rank ", device->rank, " kernel '",
                                                              name, "' WG ", wg->id));
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
  for (WgState* n : to_start) {
    n->vclock = wg->vclock;  // virtual time: it takes the residency this workgroup leaves
    schedule(n);
  }
  bool last = false;
  {
    std::lock_guard lock(done_mu);
    if (wg_error && !error) error = clone_error(wg_error, "");
    finished += completed;
    last = finished == num_wgs;
    if (last) done_cv.notify_all();
  }
  // Virtual time: the launching host thread waits for the driver, not done_cv, so the kernel is
  // still alive here.
  if (vt) vt->wg_finished(*this, wg, last);
}

}  // namespace impl

void WgTask::promise_type::FinalAwaiter::await_suspend(
    std::coroutine_handle<promise_type> h) noexcept {
  impl::WgState* wg = h.promise().state;
  wg->kernel->finish(wg, h.promise().error);
}

// ----------------------------------------------------------------------------------------------
// Waiting

bool WaitAwaiter::await_ready() const {
  auto& dev = *wg->kernel->device;
  // Virtual time: every wait goes back through the driver, so that the workgroup resumes in
  // virtual-time order with the others.
  if (dev.world->vt) return false;
  return satisfied(dev.slots[slot].load(std::memory_order_acquire), cmp, value);
}

bool WaitAwaiter::await_suspend(std::coroutine_handle<>) {
  auto& dev = *wg->kernel->device;
  impl::VirtualTime* vt = dev.world->vt.get();
  std::unique_lock lock(dev.wait_mu);
  if (dev.world->aborted.load(std::memory_order_acquire)) return false;
  if (satisfied(dev.slots[slot].load(std::memory_order_acquire), cmp, value)) {
    if (!vt) return false;
    lock.unlock();
    // Satisfied already: resume when the signal that did it arrived (the driver resumes us only
    // after this coroutine has returned to it).
    vt->push(wg, vt->wake_time(*wg, slot));
    return true;
  }
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

// ----------------------------------------------------------------------------------------------
// Claiming work

bool ClaimAwaiter::await_ready() const { return !wg->kernel->device->world->vt; }

bool ClaimAwaiter::await_suspend(std::coroutine_handle<>) {
  World::State& world = *wg->kernel->device->world;
  if (world.aborted.load(std::memory_order_acquire)) return false;
  // Virtual time: claim when the driver resumes us, in virtual-time order with every other
  // workgroup's claims (the driver defers a claiming workgroup to its compute unit's next free
  // time; emu/vtime.cpp). The driver resumes us only after this coroutine has returned to it.
  wg->claiming = true;
  world.vt->push(wg, wg->vclock);
  return true;
}

std::int64_t ClaimAwaiter::await_resume() const {
  World::State& world = *wg->kernel->device->world;
  wg->claiming = false;
  if (world.aborted.load(std::memory_order_acquire)) world.throw_abort();
  world.fuzz_delay(wg);  // wall clock: vary which workgroup takes which tile
  // Nothing is published through the counter: the tiles' data go to disjoint places and their
  // completion is signalled as before.
  return wg->kernel->claimed.fetch_add(1, std::memory_order_relaxed);
}

namespace impl {

void Device::wake_satisfied() {
  VirtualTime* vt = world->vt.get();
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
  for (WgState* w : ready) {
    if (vt)
      vt->push(w, vt->wake_time(*w, w->wait_slot));  // at the satisfying arrival
    else
      schedule(w);
  }
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

// ----------------------------------------------------------------------------------------------
// Devices

Device::Device(World::State* w, int r)
    : world(w),
      rank(r),
      arena(w->compute_units, 0),
      slots(std::make_unique<std::atomic<std::uint64_t>[]>(kSlotsPerDevice)),
      senders(std::make_unique<std::atomic<std::uint64_t>[]>(kSlotsPerDevice)) {
  arena.initialize();
}

Device::~Device() = default;  // here, where Link is complete

}  // namespace impl

// ----------------------------------------------------------------------------------------------
// The workgroup's view of its kernel

int WgContext::rank() const noexcept { return s_->kernel->device->rank; }
int WgContext::world_size() const noexcept { return s_->kernel->device->world->size; }
int WgContext::wg() const noexcept { return s_->id; }
int WgContext::num_wgs() const noexcept { return s_->kernel->num_wgs; }

WaitAwaiter WgContext::wait_until(int slot, Cmp cmp, std::uint64_t value) {
  FC_CHECK_INTERNAL(slot >= 0 && slot < kSlotsPerDevice, "wait on slot ", slot);
  return WaitAwaiter{s_, slot, cmp, value};
}

ClaimAwaiter WgContext::claim() { return ClaimAwaiter{s_}; }

namespace {

/// The end of a compute span of `wg` doing `work`: its price in virtual time, else its trace event.
void end_span(impl::WgState& wg, const char* what, const model::Work* work, std::size_t n,
              Clock::time_point start) {
  auto& world = *wg.kernel->device->world;
  if (impl::VirtualTime* vt = world.vt.get()) {
    double latency = 0;
    for (std::size_t i = 0; i < n; ++i) latency += model::latency_seconds(vt->preset, work[i]);
    const int share = vt->devices[wg.kernel->device->rank].node_share;
    vt->compute(wg, what,
                model::span_seconds(vt->preset, {work, n}, share, wg.kernel->working_set),
                latency);
  } else if (world.tracing) {
    wg.kernel->trace_end(&wg, what, start);
  }
}

}  // namespace

void WgContext::compute(const char* what, std::initializer_list<model::Work> work,
                        const std::function<void()>& f) {
  const auto start = span_start();
  f();
  end_span(*s_, what, work.begin(), work.size(), start);
}

Clock::time_point WgContext::span_start() const {
  return s_->kernel->device->world->tracing ? Clock::now() : Clock::time_point{};
}

void WgContext::span_end(const char* what, const Cost& cost, Clock::time_point start) {
  model::Work work[Cost::kMaxTerms];
  const int n = cost.count < Cost::kMaxTerms ? cost.count : Cost::kMaxTerms;
  for (int i = 0; i < n; ++i) work[i] = work_of(cost.terms[i]);
  end_span(*s_, what, work, static_cast<std::size_t>(n), start);
}

// ----------------------------------------------------------------------------------------------
// Kernel launch

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
  if (working_set_declared_) {
    std::size_t bytes = working_set_user_;
    for (const auto& [tag, asked] : op_scratch_) bytes += asked;
    k.working_set = static_cast<double>(bytes);
  }
  for (int i = 0; i < num_wgs; ++i) {
    auto s = std::make_unique<impl::WgState>();
    s->kernel = &k;
    s->id = i;
    k.wgs.push_back(std::move(s));
    k.order.push_back(i);
  }
  if (w.fuzz_seed != 0) {
    w.fuzz_kernel(k, rank_);
    // Virtual time fixes the order itself (docs/simulation.md); the seed's delays still perturb
    // the host threads, which must change nothing.
    if (w.vt) std::iota(k.order.begin(), k.order.end(), 0);
  }
  set_activity(
      fusedcoll::detail::make_string("waiting for kernel '", name, "' (", num_wgs, " WGs)"));
  if (num_wgs == 0) {
    if (w.vt) w.vt->run_kernel(rank_, k, 0);
    return;
  }
  const int initial = std::min(num_wgs, w.max_resident);
  std::vector<impl::WgState*> start;
  {
    std::lock_guard lock(dev.wait_mu);
    dev.current = &k;
    k.next = initial;
    for (int i = 0; i < initial; ++i) start.push_back(k.wgs[k.order[i]].get());
  }
  if (w.vt) {
    w.vt->run_kernel(rank_, k, initial);
  } else {
    for (auto* s : start) impl::schedule(s);
    std::unique_lock lock(k.done_mu);
    k.done_cv.wait(lock, [&] { return k.finished == k.num_wgs; });
  }
  {
    std::lock_guard lock(dev.wait_mu);
    dev.current = nullptr;
  }
  if (k.error) std::rethrow_exception(k.error);
}

}  // namespace fusedcoll::emu
