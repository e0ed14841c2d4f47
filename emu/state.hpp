#pragma once
// Internal state of the emulator (World::State, devices, kernels, workgroups). Only emu/*.cpp
// and white-box tests include this.

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
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

/// Trace track (tid) of a device's link, after its compute units.
inline constexpr int kLinkTrack = 1000;

struct TraceEvent {
  std::string name;
  const char* category = "";
  int pid = 0;
  int tid = 0;
  double ts_us = 0;
  double dur_us = 0;
};

/// Protocol checking (docs/emulator.md, "Protocol checking"): the latest put into each byte
/// range of a device's memory, and the signals its writer sent after it.
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

/// A signal in flight on a link (link model on).
struct LinkSignal {
  std::chrono::steady_clock::time_point due;
  int peer = 0;
  int slot = 0;
  SignalOp op = SignalOp::add;
  std::uint64_t value = 0;
  std::vector<PendingPut> covered;
};

/// A device's egress link under the link model (docs/emulator.md, "Link model"): puts and stores
/// to peers occupy it back to back at the modelled bandwidth; a signal lands one latency after
/// everything its device issued before it has left. The bytes themselves are copied at issue:
/// under the protocol nobody may read them before the signal, so only the signal's landing time
/// is observable, and the engine thread delivers it then.
struct Link {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<LinkSignal> in_flight;  // due times never decrease: the link is FIFO
  std::chrono::steady_clock::time_point free_at{};
  bool stopping = false;
  std::thread engine;
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
  // Protocol checking, touched only by the thread running this workgroup.
  std::map<int, std::uint64_t> observed;  // slot -> largest value this WG saw
  std::vector<PendingPut> pending;
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
  ProtocolState protocol;         // puts into this device's memory (checking mode only)
  std::unique_ptr<Link> link;     // egress link (link model only)
  std::atomic<std::uint64_t> bytes_sent{0};  // puts and stores to peers

  void wake_satisfied();
  void wake_all();
};

void schedule(WgState* wg);

/// Applies a signal from `src` to `peer`'s slot now (crediting `covered` puts when checking) and
/// wakes the waiters it satisfies. Returns the slot's value right after the update.
std::uint64_t deliver_signal(World::State& world, int src, int peer, int slot, SignalOp op,
                             std::uint64_t value, const std::vector<PendingPut>& covered);

// Protocol checking; each is called only when `World::State::check_protocol` is on.
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
  bool check_protocol = false;
  double link_gbps = 0;        // link model: bandwidth (0: unlimited)
  double link_latency_us = 0;  // link model: latency
  bool link_model() const noexcept { return link_gbps > 0 || link_latency_us > 0; }
  void run_link(impl::Device& dev);
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
