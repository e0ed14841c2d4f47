#pragma once
// Internal state of the emulator (World::State, devices, kernels, workgroups). Only emu/*.cpp
// and white-box tests include this.

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu/runtime.hpp"
#include "fusedcoll/emu.hpp"

namespace fusedcoll::emu {
namespace impl {

struct Device;
struct Kernel;

struct TraceEvent {
  std::string name;
  const char* category = "";
  int pid = 0;
  int tid = 0;
  double ts_us = 0;
  double dur_us = 0;
};

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
  std::atomic<std::uint64_t> handoff{0};
  std::chrono::steady_clock::time_point resident_since;
  std::mt19937_64 rng;  // fuzzing decisions of this workgroup
  // Wait state, guarded by the device's wait_mu while registered.
  bool waiting = false;
  bool waited = false;
  int wait_slot = 0;
  Cmp wait_cmp = Cmp::ge;
  std::uint64_t wait_value = 0;
  std::chrono::steady_clock::time_point wait_since;
};

/// One kernel launch. Lives on the launching host thread's stack until every WG finished.
struct Kernel {
  Device* device = nullptr;
  std::string name;
  int num_wgs = 0;
  KernelBody body;
  std::uint64_t launch_index = 0;
  std::vector<std::unique_ptr<WgState>> wgs;
  std::vector<int> order;  // start order (shuffled when fuzzing)
  int next = 0;            // next position of `order` to start; guarded by device->wait_mu
  std::mutex done_mu;
  std::condition_variable done_cv;
  int finished = 0;  // guarded by done_mu
  std::exception_ptr error;

  /// Called once per workgroup when it ends (normally, by exception, or never started).
  void finish(WgState* wg, std::exception_ptr wg_error);
  void trace_end(WgState* wg, const char* what, std::chrono::steady_clock::time_point start);
};

/// One virtual GPU.
struct Device {
  Device(World::State* world, int rank);
  World::State* world;
  int rank;
  tbb::task_arena arena;
  std::unique_ptr<std::atomic<std::uint64_t>[]> slots;
  std::unique_ptr<std::atomic<std::uint64_t>[]> senders;  // bit r: rank r signalled this slot
  std::mutex wait_mu;
  std::vector<WgState*> waiters;  // suspended in wait_until
  Kernel* current = nullptr;      // the running kernel, for reports
  std::uint64_t launches = 0;     // host thread only

  void wake_satisfied();
  void wake_all();
};

void schedule(WgState* wg);

/// A new exception of the same fusedcoll kind with `prefix` + the original message. The emulator
/// hands errors across threads as such copies, never as the original object: a workgroup's
/// exception object is still referenced on its own thread, and the reference count of an
/// exception_ptr lives in uninstrumented libstdc++, invisible to ThreadSanitizer.
std::exception_ptr clone_error(std::exception_ptr e, const std::string& prefix);

}  // namespace impl

struct World::State {
  explicit State(const WorldOptions& options);
  ~State();

  WorldOptions options;
  int size = 0;
  int compute_units = 0;
  int max_resident = 0;
  double timeout_s = 30;
  std::uint64_t fuzz_seed = 0;
  bool tracing = false;
  std::string trace_path;
  std::chrono::steady_clock::time_point origin;
  std::unique_ptr<tbb::global_control> parallelism;
  std::vector<std::unique_ptr<impl::Device>> devices;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::shared_ptr<Backend>> backends;

  // Failure: set once; every wait then throws (a BackendError starting with kAbortPrefix, unless
  // the abort was a timeout, which every rank reports as the same TimeoutError).
  static constexpr const char* kAbortPrefix = "aborted because another part of the run failed: ";
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  bool abort_is_timeout = false;
  std::string abort_reason;
  void abort(bool is_timeout, const std::string& reason);
  void abort_from(std::exception_ptr error, const std::string& where);
  [[noreturn]] void throw_abort();
  std::string report(const std::string& headline);
  std::string slot_name(int rank, int slot);

  // Rendezvous of collective host calls, by per-rank sequence number.
  struct Meeting {
    std::vector<std::string> keys;
    std::vector<const void*> payloads;
    std::vector<bool> arrived_mask;
    int arrived = 0;
    int departed = 0;
  };
  std::mutex rendezvous_mu;
  std::condition_variable rendezvous_cv;
  std::map<std::uint64_t, Meeting> rendezvous;
  std::vector<std::uint64_t> rendezvous_seq;  // each entry touched only by its rank's thread

  // Symmetric memory: buffer i has one allocation per rank.
  struct Buffer {
    std::size_t bytes = 0;
    std::vector<std::unique_ptr<std::byte[]>> memory;
  };
  std::mutex mem_mu;
  std::vector<Buffer> buffers;
  std::vector<int> allocs_done;  // per rank
  std::byte* buffer(SymBuffer b, int rank);

  // Signal slot reservations per rank (identical across ranks when calls match).
  std::mutex slots_mu;
  std::vector<std::map<std::string, std::pair<int, int>>> slot_keys;
  std::vector<int> next_slot;

  // What each host thread is doing, for reports.
  std::mutex activity_mu;
  std::vector<std::string> activity;

  // Fuzzing and tracing.
  void fuzz_delay(impl::WgState* wg);
  std::mutex trace_mu;
  std::vector<impl::TraceEvent> trace;
  void record(impl::TraceEvent e);
  void write_trace();

  // Watchdog.
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool stopping = false;
  std::thread watchdog;
  void watch();

  // Outcome of `run`.
  bool broken = false;
};

}  // namespace fusedcoll::emu
