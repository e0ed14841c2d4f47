#pragma once
// The MPI backend's device-side primitives, for one rank (docs/mpi.md): symmetric memory, put /
// signal / wait with timeouts, and a persistent grid of workgroups run as oneTBB tasks.
//
// Two transports move the bytes (mpi/transport.hpp; docs/mpi.md, "Transports"): rma, one-sided
// MPI_Put and MPI_Accumulate into an MPI_Win_allocate window (mpi/rma.cpp), and p2p, two-sided
// messages coalesced per peer (mpi/p2p.cpp). This class holds what they share and calls its
// transport once per put, signal or wait.
//
// Data area layout, identical on every rank:  [ kSlots signal slots (u64) | data area ]
// The data area is carved per call from offsets that depend only on the agreed arguments, so an
// offset names the same region on every rank (symmetric). Signal slots are cumulative counters,
// never reset while the window lives: a wait's target is `expect(slot, n)`, the running total, so
// counts may differ from call to call (as in emu/).

#include <mpi.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fusedcoll/detail/chrome_trace.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/mpi.hpp"
#include "mpi/transport.hpp"

namespace fusedcoll::mpi {

/// Throws `BackendError` naming the call and MPI's own error string unless `rc == MPI_SUCCESS`.
void check_mpi(int rc, const char* call, const char* file, int line);

#define FC_CHECK_MPI(call) ::fusedcoll::mpi::check_mpi((call), #call, __FILE__, __LINE__)

/// Between polls of MPI in a wait loop. Polling MPI is what makes passive-target operations
/// progress, but on an oversubscribed node a pure spin starves the very ranks being waited for:
/// spin briefly, then yield the core.
inline void backoff(std::uint64_t polls) {
  if (polls > 64) std::this_thread::yield();
}

class Runtime {
 public:
  static constexpr int kSlots = 8192;

  Runtime(MPI_Comm comm, const Options& options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// How this rank moves bytes, rma or p2p: what the ranks agreed on at construction. The
  /// operators ask it their sending policy (mpi/transport.hpp).
  Transport& transport() noexcept { return *transport_; }
  const Transport& transport() const noexcept { return *transport_; }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm comm() const noexcept { return comm_; }
  /// The host of every rank (index = rank), numbered 0, 1, ... in order of each host's first rank:
  /// the ranks that share memory (MPI_Comm_split_type), or FUSEDCOLL_MPI_HOSTS. The same on every
  /// rank.
  const std::vector<int>& host_of() const noexcept { return host_of_; }

  /// What this rank's host thread is doing, for timeout messages ("in gemv_allreduce scale_up").
  void set_activity(std::string what) { activity_ = std::move(what); }
  const std::string& activity() const noexcept { return activity_; }

  /// Refuses to start a call after an earlier one failed on this rank: the peers' state is
  /// unknown then, and the window can no longer be freed collectively.
  void begin_call();
  void mark_failed() noexcept { failed_ = true; }
  /// Ends a successful call. p2p: completes this rank's sends (draining what peers send
  /// meanwhile), so that MPI reads no caller buffer or data area once the call has returned;
  /// throws `TimeoutError` naming the peer that never took its data. rma: nothing to do.
  void end_call();
  /// Marks the runtime failed (peers may be mid-call: no further calls, no collective free) and
  /// throws `TimeoutError` naming this rank, its activity, `what` it waited for, and the peer
  /// that has not taken this rank's data, if any.
  [[noreturn]] void timeout(const std::string& what);
  /// True between the start of a call and the end of its argument agreement: errors raised then
  /// were raised on every rank alike, before anything moved.
  bool in_agreement() const noexcept { return in_agreement_; }
  void set_agreement(bool on) noexcept { in_agreement_ = on; }

  // Tracing (FUSEDCOLL_TRACE; docs/mpi.md, "Tracing"): spans, one per call, one per wait, put and
  // signal, and one per phase the schedules name, on one track per thread of this rank, written
  // at destruction as a Chrome/Perfetto trace of its own per rank. They place a call's wall time
  // among its phases (the cost model's validation, docs/results/virtual-time.md). Off, a span costs one
  // branch: the clock is not read.
  bool tracing() const noexcept { return !trace_path_.empty(); }
  /// The name of the call under way (its span ends in `end_call`).
  void trace_call(const std::string& op);
  class Span {
   public:
    template <class Name>
    Span(Runtime& rt, const Name& name) : rt_(rt.tracing() ? &rt : nullptr) {
      if (!rt_) return;
      name_ = name;
      begin_ = std::chrono::steady_clock::now();
    }
    /// "prefix: detail", the string built only when tracing.
    Span(Runtime& rt, const char* prefix, const std::string& detail)
        : rt_(rt.tracing() ? &rt : nullptr) {
      if (!rt_) return;
      name_ = std::string(prefix) + ": " + detail;
      begin_ = std::chrono::steady_clock::now();
    }
    ~Span() {
      if (rt_) rt_->record_span(std::move(name_), begin_, std::chrono::steady_clock::now());
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    Runtime* rt_;
    std::string name_;
    std::chrono::steady_clock::time_point begin_;
  };

  /// Every rank's `blob` (index = rank), exchanged with nonblocking collectives and a timeout:
  /// the hidden rendezvous at the start of every call.
  std::vector<std::string> exchange(const std::string& blob);

  /// Completes `reqs` by polling `MPI_Testall`, throwing `TimeoutError` past FUSEDCOLL_TIMEOUT.
  void wait_requests(std::vector<MPI_Request>& reqs, const std::string& what);

  /// Makes the data area at least `bytes` long. Collective: every rank calls it at the same
  /// point with the same value (it depends on agreed arguments only). Growing reallocates the
  /// area; under rma that is a new window, which resets every slot and target.
  void reserve(std::size_t bytes);
  /// This rank's data area.
  char* data() noexcept { return base_ + kSlots * sizeof(std::uint64_t); }
  template <class T>
  T* data_as(std::size_t byte_offset) noexcept {
    return reinterpret_cast<T*>(data() + byte_offset);
  }

  /// Reserves `n` consecutive slots under `key`, the same ids on every rank (calls agree, so
  /// every rank reserves in the same order); a key keeps its slots for the window's lifetime.
  int slots(const std::string& key, int n);
  /// The cumulative target of `slot` after `n` more updates arrive in this call.
  std::uint64_t expect(int slot, std::uint64_t n);

  /// Starts copying `bytes` from `src` into `peer`'s data area at `offset`. Complete at the
  /// target only after the next `signal` to (or `flush` of) that peer from this thread: the
  /// put-before-signal rule of docs/semantics.md ("Calling contract").
  void put(int peer, std::size_t offset, const void* src, std::size_t bytes);
  /// mpi/transport.hpp's Sources: may a signal's puts' sources change once it returns.
  using Sources = mpi::Sources;
  /// Remote completion of this thread's earlier puts to `peer`, then an atomic `+add` of `peer`'s
  /// `slot`, itself flushed so that the target sees it without our further help. Each rma signal
  /// costs two MPI_Win_flush calls: tens of microseconds when ranks share cores (Open MPI then
  /// yields inside its progress loop), so kernels signal per slice or per workgroup, not per row.
  void signal(int peer, int slot, std::uint64_t add = 1, Sources sources = Sources::reused);
  /// A progress poke for workgroups between tiles (p2p; nothing under rma, where puts need no
  /// help from the target): completes finished sends, drains the control messages that arrived
  /// (posting large puts' receives into place) and applies landed signals. Open MPI's TCP BTL
  /// moves data only inside MPI calls, so without it nothing a rank sends or receives
  /// progresses while its grid computes. Bounded (mpi/p2p.cpp): at most one workgroup of the
  /// rank polls at a time, and not more often than its interval; it never waits.
  void poll() { transport_->poll(); }
  /// `signal(peer, slot, add)` for every peer in `peers`, with two MPI_Win_flush_all calls in all
  /// instead of two flushes per peer: for a rank that has just put to all of them in one go.
  void signal_all(const std::vector<int>& peers, int slot, std::uint64_t add = 1,
                  Sources sources = Sources::reused);
  /// Polls this rank's `slot` until it reaches `target`, driving MPI progress meanwhile; throws
  /// `TimeoutError` naming rank, slot, `what`, expected and current value past FUSEDCOLL_TIMEOUT.
  /// On return the data the signallers put before signalling is visible to this thread.
  void wait(int slot, std::uint64_t target, const std::string& what);

  // Symmetric buffers (fusedcoll::mpi::SymmetricBuffer): user memory the peers put into
  // directly (rma: one MPI_Win_allocate window each; p2p: plain memory). Ids agree across ranks
  // because buffers are made and freed collectively, in the same order everywhere.

  /// Allocates a buffer of `bytes` on this rank (collective; sizes may differ between ranks).
  int add_buffer(std::size_t bytes, void** data);
  /// Frees buffer `id` (collective). After a failure the window is leaked, as in ~Runtime.
  void remove_buffer(int id) noexcept;
  /// Where the bytes [p, p + bytes) lie in one of this rank's buffers.
  struct Landing {
    int id = -1;  ///< -1: not (entirely) inside one buffer
    std::size_t offset = 0;
  };
  Landing find_buffer(const void* p, std::size_t bytes) const;
  /// Starts putting `bytes` at `src` into `peer`'s buffer `id` at `offset`. Complete at the
  /// target only after `flush_buffer(id, peer)`; a `signal` flushes the main window only.
  void put_buffer(int id, int peer, std::size_t offset, const void* src, std::size_t bytes);
  void flush_buffer(int id, int peer);
  /// p2p only: peers may put into [p, p + bytes) of this rank during the current call, as
  /// buffer `kCallBuffer` (a two-sided receive lands in any memory, so an ordinary receive
  /// buffer needs no window). Bound before the call's argument exchange, so no peer's put for
  /// the call can arrive before it; the next call's `begin_call` unbinds it.
  void bind_call_buffer(void* p, std::size_t bytes);
  static constexpr int kCallBuffer = 0x7fffffff;
  /// The call buffer bound in this call (null when none), and its length.
  char* call_buffer() const noexcept { return call_buffer_; }
  std::size_t call_bytes() const noexcept { return call_bytes_; }

  /// Seconds per unit of work of the kernel named `key` on this rank, as its earlier calls
  /// measured it (add_compute_sample; sums halved at every sample, as Transport::link_rate's, so
  /// one noisy call does not decide), or 0 until measured. An operator's estimate of a call's
  /// compute before it chooses how to send, as the link rate is of its wire time. Host thread.
  double compute_seconds_per(const std::string& key) const;
  /// Adds one call's sample: `units` of `key`'s work took `secs`.
  void add_compute_sample(const std::string& key, double units, double secs);
  /// Sets compute_seconds_per as if measured (later samples go on from it): for tests of both
  /// sides of a decision taken on it.
  void assume_compute_seconds_per(const std::string& key, double secs_per_unit);

  /// Workgroups of a persistent kernel over `work` items: at least one, at most the grid size.
  int grid_for(std::size_t work) const {
    return static_cast<int>(std::clamp<std::size_t>(work, 1, static_cast<std::size_t>(wgs_)));
  }
  /// Workgroups for moving or folding `bytes` in `items` pieces: one below kParallelBytes, where
  /// a single thread takes well under a millisecond and waking oneTBB workers costs more (on a
  /// shared, oversubscribed host a wake-up took milliseconds at times).
  int grid_for_bytes(std::size_t bytes, std::size_t items) const {
    return bytes < kParallelBytes ? 1 : grid_for(items);
  }
  static constexpr std::size_t kParallelBytes = std::size_t{4} << 20;

  /// Runs `body(wg)` for wg in [0, grid) as oneTBB tasks of this rank's arena and returns when
  /// all are done (rethrowing the first exception). Bodies never wait for each other.
  template <class F>
  void launch(int grid, F&& body) {
    // A grid of one runs on the calling thread: waking a oneTBB worker costs more than a small
    // kernel, and far more on an oversubscribed node.
    if (grid <= 1) {
      body(0);
      return;
    }
    arena_.execute([&] {
      tbb::parallel_for(
          tbb::blocked_range<int>(0, grid, 1),
          [&](const tbb::blocked_range<int>& r) {
            for (int w = r.begin(); w != r.end(); ++w) body(w);
          },
          tbb::simple_partitioner());
    });
  }

 private:
  void record_span(std::string name, std::chrono::steady_clock::time_point begin,
                   std::chrono::steady_clock::time_point end);
  void write_trace() const noexcept;

  struct Buffer {
    char* base = nullptr;
    std::size_t bytes = 0;
  };

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int wgs_ = 1;
  tbb::task_arena arena_;
  std::vector<int> host_of_;
  std::unique_ptr<Transport> transport_;
  char* base_ = nullptr;  // transport_'s data area: slots, then data_bytes_
  std::size_t data_bytes_ = 0;
  std::map<std::string, std::pair<int, int>> slot_keys_;
  int next_slot_ = 0;
  std::vector<std::uint64_t> targets_;
  std::map<int, Buffer> buffers_;
  int next_buffer_ = 0;
  std::string activity_ = "idle";
  char* call_buffer_ = nullptr;  // bind_call_buffer
  std::size_t call_bytes_ = 0;
  bool failed_ = false;
  bool in_agreement_ = false;
  std::map<std::string, DecayedRate> compute_;  // compute_seconds_per's samples; host thread
  // tracing
  std::string trace_path_;  // this rank's file; empty: off
  std::chrono::steady_clock::time_point trace_origin_;
  std::chrono::steady_clock::time_point call_begin_;  // host thread only, as call_op_
  std::string call_op_;
  std::mutex trace_mu_;
  std::vector<detail::TraceEvent> spans_;
  std::map<std::thread::id, int> trace_tids_;  // track per thread, in order of first span
};

}  // namespace fusedcoll::mpi
