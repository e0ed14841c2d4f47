#pragma once
// Kernel execution (emu/scheduler.cpp): the virtual GPUs (`Device`: an arena, its signal slots and
// the workgroups waiting on them), the kernels running on them and their workgroups. This is where
// a workgroup is started, suspended in a wait, woken by a signal and resumed, and where residency
// is enforced: the emulator's scheduler and the home of its notion of time.

#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "emu/protocol.hpp"
#include "emu/runtime.hpp"
#include "fusedcoll/emu.hpp"

namespace fusedcoll::emu::impl {

struct Device;
struct Kernel;
struct Link;

/// One workgroup of a running kernel.
struct WgState {
  WgState() : ctx(this) {}
  Kernel* kernel = nullptr;
  int id = 0;
  WgContext ctx;
  WgTask task;
  bool started = false;
  bool finished = false;  // guarded by the device's wait_mu
  int cu = -1;            // compute unit (arena slot) that last ran it
  bool claiming = false;  // virtual time: suspended in `claim` (driver thread only)
  std::atomic<std::uint64_t> handoff{0};
  std::chrono::steady_clock::time_point resident_since;
  std::mt19937_64 rng;  // fuzzing decisions of this workgroup (seeded only when fuzzing)
  // Wait state, guarded by the device's wait_mu while registered.
  bool waiting = false;
  bool waited = false;
  int wait_slot = 0;
  Cmp wait_cmp = Cmp::ge;
  std::uint64_t wait_value = 0;
  std::chrono::steady_clock::time_point wait_since;
  // Protocol checking, touched only by the thread running this workgroup.
  std::map<int, std::uint64_t> observed;  // slot -> largest value this WG saw
  std::vector<PendingPut> pending;
  // Virtual time (emu/vtime.hpp), touched only by the thread running this workgroup: its clock
  // (seconds), its compute unit, and per peer when its latest put or store there lands.
  double vclock = 0;
  int vcu = 0;
  // A claim the driver deferred to the compute unit's free time: when the workgroup was ready
  // (its tile's load latency runs from there, `VirtualTime::compute`); -1 otherwise.
  double vclaim_ready = -1;
  std::vector<double> arrivals;
};

/// One kernel launch. Lives on the launching host thread's stack until every WG finished.
struct Kernel {
  Device* device = nullptr;
  std::string name;
  int num_wgs = 0;
  KernelBody body;
  std::uint64_t launch_index = 0;
  std::uint64_t op_epoch = 0;  // protocol checking: the op call and phase this kernel runs in
  std::uint64_t phase = 0;
  std::vector<std::unique_ptr<WgState>> wgs;
  std::vector<int> order;  // start order (shuffled when fuzzing)
  int next = 0;            // next position of `order` to start; guarded by device->wait_mu
  std::atomic<std::int64_t> claimed{0};  // the work queue of `WgContext::claim`
  std::mutex done_mu;
  std::condition_variable done_cv;
  int finished = 0;  // guarded by done_mu
  std::exception_ptr error;
  double vt_start = 0;  // virtual time: first workgroup's start, last one's end (VirtualTime::mu)
  double vt_end = 0;
  /// The bytes the op call that launched it works over on this device (`Rank::
  /// declare_working_set`; 0: undeclared), for the cost model's cache term.
  double working_set = 0;

  /// Called once per workgroup when it ends (normally, by exception, or never started).
  void finish(WgState* wg, std::exception_ptr wg_error);
  /// Records `what` of `wg`, from `start` to now, as a trace span (tracing on; emu/trace.cpp).
  void trace_end(WgState* wg, const char* what, std::chrono::steady_clock::time_point start);
};

/// One virtual GPU.
struct Device {
  Device(World::State* world, int rank);
  ~Device();
  World::State* world;
  int rank;
  tbb::task_arena arena;
  std::unique_ptr<std::atomic<std::uint64_t>[]> slots;
  std::unique_ptr<std::atomic<std::uint64_t>[]> senders;  // bit r: rank r signalled this slot
  std::mutex wait_mu;
  std::vector<WgState*> waiters;             // suspended in wait_until
  Kernel* current = nullptr;                 // the running kernel, for reports
  std::uint64_t launches = 0;                // host thread only
  ProtocolState protocol;                    // puts into this device's memory (checking mode only)
  std::unique_ptr<Link> link;                // egress link (link model only; emu/link.hpp)
  std::atomic<std::uint64_t> bytes_sent{0};  // puts and stores to peers

  /// Resumes the waiters whose condition now holds (after a slot changed).
  void wake_satisfied();
  /// Resumes every waiter (the world aborted: each throws on resumption).
  void wake_all();
};

/// Hands `wg` to its device's arena to be started or resumed (wall clock), or queues it at its
/// virtual clock (virtual time).
void schedule(WgState* wg);
/// Starts or resumes `wg` on the calling thread.
void run_wg(WgState* wg);

}  // namespace fusedcoll::emu::impl
