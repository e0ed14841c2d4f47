#pragma once
// Internal state of the emulator: `World::State`, the hub every part of the runtime reaches
// through, with its members grouped by the file that owns them. The types of each part live in
// their own headers (scheduler.hpp: devices, kernels, workgroups; protocol.hpp; link.hpp;
// trace.hpp). Only emu/*.cpp and white-box tests include this.

#include <oneapi/tbb/global_control.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu/link.hpp"
#include "emu/protocol.hpp"
#include "emu/runtime.hpp"
#include "emu/scheduler.hpp"
#include "emu/trace.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/model.hpp"

namespace fusedcoll::emu {
namespace impl {

struct VirtualTime;

/// Applies a signal from `src` to `peer`'s slot now (crediting `covered` puts when checking) and
/// wakes the waiters it satisfies. Returns the slot's value right after the update. `at`: its
/// arrival in virtual time (virtual time only).
std::uint64_t deliver_signal(World::State& world, int src, int peer, int slot, SignalOp op,
                             std::uint64_t value, const std::vector<PendingPut>& covered,
                             double at = 0);

/// A new exception of the same fusedcoll kind with `prefix` + the original message. The emulator
/// hands errors across threads as such copies, never as the original object: a workgroup's
/// exception object is still referenced on its own thread, and the reference count of an
/// exception_ptr lives in uninstrumented libstdc++, invisible to ThreadSanitizer.
std::exception_ptr clone_error(std::exception_ptr e, const std::string& prefix);

}  // namespace impl

struct World::State {
  explicit State(const WorldOptions& options);
  ~State();

  // Options (world.cpp).
  WorldOptions options;
  int size = 0;
  int compute_units = 0;
  int max_resident = 0;
  double timeout_s = 30;
  std::uint64_t fuzz_seed = 0;
  bool tracing = false;
  bool check_protocol = false;
  double link_gbps = 0;        // link model: bandwidth (0: unlimited)
  double link_latency_us = 0;  // link model: latency
  bool link_model() const noexcept { return link_gbps > 0 || link_latency_us > 0; }
  // Virtual time (emu/vtime.hpp; null on the wall clock).
  std::unique_ptr<impl::VirtualTime> vt;
  std::unique_ptr<tbb::global_control> parallelism;
  std::vector<std::unique_ptr<impl::Device>> devices;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::shared_ptr<Backend>> backends;

  // Failure (watchdog.cpp): set once; every wait then throws a BackendError starting with
  // kAbortPrefix and marked secondary (detail/spmd.hpp), unless the abort was a timeout, which
  // every rank reports as the same TimeoutError.
  static constexpr const char* kAbortPrefix = "aborted because another part of the run failed: ";
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  bool abort_is_timeout = false;
  std::string abort_reason;
  void abort(bool is_timeout, const std::string& reason);
  void abort_from(std::exception_ptr error, const std::string& where);
  [[noreturn]] void throw_abort();

  // Watchdog and timeout reports (watchdog.cpp).
  std::string report(const std::string& headline);
  std::string slot_name(int rank, int slot);
  std::mutex activity_mu;
  std::vector<std::string> activity;  // what each host thread is doing
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool stopping = false;
  std::thread watchdog;
  void watch();

  // Rendezvous of collective host calls, by per-rank sequence number (rendezvous.cpp).
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

  // Symmetric memory (memory.cpp): buffer i has one allocation per rank.
  struct Buffer {
    std::size_t bytes = 0;
    std::string name;  // the allocation's tag, for reports
    std::vector<std::unique_ptr<std::byte[]>> memory;
  };
  std::mutex mem_mu;
  std::vector<Buffer> buffers;
  std::vector<int> allocs_done;  // per rank
  std::byte* buffer(SymBuffer b, int rank);
  /// "3 ('tag')": how reports name buffer `id`.
  std::string buffer_name(int id);

  // Signal slot reservations per rank, identical across ranks when calls match (memory.cpp).
  std::mutex slots_mu;
  std::vector<std::map<std::string, std::pair<int, int>>> slot_keys;
  std::vector<int> next_slot;

  // Schedule fuzzing (fuzz.cpp). `fuzz_delay` is inline: every put and signal passes it.
  void fuzz_delay(impl::WgState* wg) {
    if (fuzz_seed != 0) fuzz_sleep(wg);
  }
  void fuzz_sleep(impl::WgState* wg);           // perhaps sleeps, as the WG's stream decides
  void fuzz_kernel(impl::Kernel& k, int rank);  // seeds its WGs' streams, shuffles start order

  // Tracing (trace.cpp).
  std::string trace_path;
  std::chrono::steady_clock::time_point origin;
  std::mutex trace_mu;
  std::vector<impl::TraceEvent> trace;
  void record(impl::TraceEvent e);
  void write_trace();

  // Outcome of `run` (world.cpp).
  bool broken = false;
};

}  // namespace fusedcoll::emu
