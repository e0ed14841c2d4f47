#pragma once
// The MPI backend's device-side primitives, for one rank (docs/mpi.md): symmetric memory in one
// MPI_Win_allocate window, put / signal / wait with timeouts, and a persistent grid of
// workgroups run as oneTBB tasks.
//
// Two transports implement the same put / signal / wait (docs/mpi.md, "Transports"):
// - rma: one-sided MPI_Put and MPI_Accumulate into the window; needs shared memory or an RDMA
//   network between every pair of ranks (Debian's Open MPI has no one-sided path over TCP that
//   does not hang without target-side progress).
// - p2p: two-sided messages. A put is a control record (the destination, and the bytes themselves
//   when small) and, when large, an MPI_Isend of the data with a tag of its own, straight from the
//   caller's buffer; a signal is a control record. Records to one peer are coalesced into one
//   control message, sent when it nears TCP's eager limit, with every signal or large put, and
//   before this rank waits or ends a call: a put need land only before the next signal from
//   this rank to that peer (put's contract below). A receiver drains control messages
//   whenever it waits (or signals, ends a call, or its workgroups poll between tiles: Open MPI's
//   TCP BTL moves bytes only inside MPI calls): it receives each large put into its place with
//   an MPI_Irecv and applies a signal only once the receives that came before it from that source
//   have landed. So data leaves as soon as a workgroup puts it, and no rank relies on a peer
//   calling MPI except to wait for what that peer expects anyway.
//
// Window layout, identical on every rank:  [ kSlots signal slots (u64) | data area ]
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
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fusedcoll/detail/chrome_trace.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/mpi.hpp"

namespace fusedcoll::mpi {

/// Throws `BackendError` naming the call and MPI's own error string unless `rc == MPI_SUCCESS`.
void check_mpi(int rc, const char* call, const char* file, int line);

#define FC_CHECK_MPI(call) ::fusedcoll::mpi::check_mpi((call), #call, __FILE__, __LINE__)

class Runtime {
 public:
  static constexpr int kSlots = 8192;

  Runtime(MPI_Comm comm, const Options& options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  using Transport = Env::MpiTransport;
  /// rma or p2p (never automatic): what the ranks agreed on at construction.
  Transport transport() const noexcept { return transport_; }

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
  /// window, which resets every slot and target.
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
  /// Whether the sources of a signal's puts may change after the signal returns (`reused`, the
  /// default: the signal waits until MPI has read them) or stay untouched until the call ends
  /// (`kept`: a staging area; over p2p the signal then leaves at once, without waiting for the
  /// peer to take the data, and `end_call` completes the sends).
  enum class Sources { reused, kept };
  /// Remote completion of this thread's earlier puts to `peer`, then an atomic `+add` of `peer`'s
  /// `slot`, itself flushed so that the target sees it without our further help. Each signal
  /// costs two MPI_Win_flush calls: tens of microseconds when ranks share cores (Open MPI then
  /// yields inside its progress loop), so kernels signal per slice or per workgroup, not per row.
  void signal(int peer, int slot, std::uint64_t add = 1, Sources sources = Sources::reused);
  /// The rate, in bytes per second, at which this rank has received from `peer`'s host: p2p's
  /// rendezvous-sized puts (above the TCP BTL's eager limit) from that host's ranks, each timed
  /// from the posting of its receive to its landing, over their bytes beyond the eager limit
  /// (the first fragment travels unasked and may have landed before the post); sums halved at
  /// every call that adds a sample, so one noisy call does not decide. 0 until measured (and
  /// always under rma). A sender may read it as its share of its own link to that host (links
  /// are symmetric in the clusters this backend runs on; the host's other ranks share it alike)
  /// and decide alone how to ship data there. A lower bound: a receive also waits for the polls
  /// of both ranks. Host thread only, outside a launch.
  double link_rate(int peer) const {
    const std::size_t h = static_cast<std::size_t>(host_of_[static_cast<std::size_t>(peer)]);
    return h < host_links_.size() && host_links_[h].secs > 0
               ? host_links_[h].bytes / host_links_[h].secs
               : 0.0;
  }
  /// Sets link_rate for `peer`'s host as if measured (later measurements go on from it): for a
  /// caller that knows its links, and for tests of both sides of a decision taken on it.
  void assume_link_rate(int peer, double bytes_per_s) {
    const std::size_t h = static_cast<std::size_t>(host_of_[static_cast<std::size_t>(peer)]);
    if (host_links_.size() <= h) host_links_.resize(h + 1);
    host_links_[h] = HostLink{bytes_per_s, 1.0};
  }
  /// Rendezvous-sized: larger than this, a message waits for its receive to be posted.
  static constexpr std::size_t kRateMinBytes = std::size_t{64} << 10;
  /// A progress poke for workgroups between tiles (p2p; nothing under rma, where puts need no
  /// help from the target): completes finished sends, drains the control messages that arrived
  /// (posting large puts' receives into place) and applies landed signals. Open MPI's TCP BTL
  /// moves data only inside MPI calls, so without it nothing a rank sends or receives
  /// progresses while its grid computes. Bounded: at most one workgroup of the rank polls at a
  /// time, no more often than every kPollInterval while sends or receives are under way and
  /// every kIdlePollInterval otherwise; it never waits.
  void poll();
  static constexpr std::chrono::microseconds kPollInterval{100}, kIdlePollInterval{1000};
  /// `signal(peer, slot, add)` for every peer in `peers`, with two MPI_Win_flush_all calls in all
  /// instead of two flushes per peer: for a rank that has just put to all of them in one go.
  void signal_all(const std::vector<int>& peers, int slot, std::uint64_t add = 1);
  /// Polls this rank's `slot` until it reaches `target`, driving MPI progress meanwhile; throws
  /// `TimeoutError` naming rank, slot, `what`, expected and current value past FUSEDCOLL_TIMEOUT.
  /// On return the data the signallers put before signalling is visible to this thread.
  void wait(int slot, std::uint64_t target, const std::string& what);

  // Symmetric buffers (fusedcoll::mpi::SymmetricBuffer): user memory the peers put into
  // directly, one MPI_Win_allocate window each. Ids agree across ranks because buffers are made
  // and freed collectively, in the same order everywhere.

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
  void allocate(std::size_t data_bytes);
  void release() noexcept;
  std::uint64_t read_slot(int slot);
  void put_bytes(MPI_Win win, int peer, MPI_Aint disp, const void* src, std::size_t bytes);
  [[noreturn]] void timeout(const std::string& what);
  void record_span(std::string name, std::chrono::steady_clock::time_point begin,
                   std::chrono::steady_clock::time_point end);
  void write_trace() const noexcept;

  // p2p transport (runtime.cpp, "p2p").
  struct Header {
    std::uint32_t kind = 0;  // Kind
    std::int32_t buffer = -1;  // -1: the data area; else a symmetric buffer id
    std::uint64_t offset = 0, bytes = 0;
    std::int32_t slot = 0, tag = 0;  // signal: the slot; large put: the data message's tag
    std::uint64_t add = 0;
  };
  enum Kind : std::uint32_t { kInlinePut = 1, kLargePut = 2, kSignal = 3 };
  struct Send {
    std::vector<char> owned;  // a control message's bytes, alive until the send completes
    std::thread::id who;
    int peer = 0;
  };
  struct Arrival {  // per source, in arrival order
    MPI_Request req = MPI_REQUEST_NULL;  // a large put's receive; null: a signal
    int slot = 0;
    std::uint64_t add = 0;    // signal: the add; large put: its bytes
    std::int64_t posted = 0;  // large put: steady_clock ticks when its receive was posted
  };
  struct Link {  // rendezvous-sized receives from one source in the current call
    std::uint64_t bytes = 0;
    std::int64_t ticks = 0;  // sum of their times from posting to landing
  };
  struct Outbox {  // control records for one peer not sent yet
    std::mutex mu;  // held across MPI_Isend too: messages leave in the order of their records
    std::vector<char> records;
  };
  void p2p_setup();
  /// Appends a control record (and `payload`, h.bytes of it, for an inline put) for `peer`;
  /// sends the outbox at once if `now`, or when it is full.
  void p2p_record(int peer, const Header& h, const void* payload, bool now);
  void p2p_ship(int peer, Outbox& box);  // box.mu held
  /// Sends every outbox: before this rank blocks, so no peer waits for a record held here.
  void p2p_flush();
  void p2p_put(int peer, int buffer, std::size_t offset, const void* src, std::size_t bytes);
  void p2p_send(int peer, const void* p, std::size_t bytes, int tag, std::vector<char> owned);
  void p2p_signal(int peer, int slot, std::uint64_t add, Sources sources);
  /// Receives what has arrived and applies what has landed; false if another thread was at it.
  bool p2p_progress();
  /// Completes the sends of `who` to `peer` (any thread / any peer when unset), progressing.
  void p2p_complete(const std::thread::id* who, const int* peer, const std::string& activity);
  char* p2p_landing(const Header& h);
  void p2p_alloc(std::size_t data_bytes);

  struct Buffer {
    MPI_Win win = MPI_WIN_NULL;
    char* base = nullptr;
    std::size_t bytes = 0;
  };

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int wgs_ = 1;
  tbb::task_arena arena_;
  MPI_Win win_ = MPI_WIN_NULL;
  char* base_ = nullptr;
  std::size_t data_bytes_ = 0;
  std::map<std::string, std::pair<int, int>> slot_keys_;
  int next_slot_ = 0;
  std::vector<std::uint64_t> targets_;
  std::map<int, Buffer> buffers_;
  int next_buffer_ = 0;
  std::string activity_ = "idle";
  std::vector<int> host_of_;
  char* call_buffer_ = nullptr;  // bind_call_buffer
  std::size_t call_bytes_ = 0;
  Transport transport_ = Transport::rma;
  // p2p
  struct Freer {
    void operator()(char* p) const noexcept;
  };
  std::unique_ptr<char, Freer> mem_;  // the data area's memory (slot part unused)
  std::map<int, std::unique_ptr<char, Freer>> buffer_mem_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counters_;  // the slots, never reset
  std::mutex send_mu_;
  std::vector<MPI_Request> send_reqs_;  // parallel to sends_
  std::vector<Send> sends_;
  std::vector<int> send_done_;  // MPI_Testsome's indices
  std::mutex recv_mu_;
  std::vector<std::deque<Arrival>> arrivals_;
  std::vector<Link> links_;  // per source, under recv_mu_
  struct HostLink {
    double bytes = 0, secs = 0;  // decayed sums (link_rate)
  };
  std::vector<HostLink> host_links_;  // per host; host thread (end_call, link_rate)
  std::vector<char> inbox_;
  std::vector<std::unique_ptr<Outbox>> outboxes_;  // per peer
  std::atomic<std::uint32_t> next_tag_{0};
  std::atomic<std::int64_t> last_poll_{0};  // steady_clock ticks of the last poll()
  std::atomic<bool> p2p_busy_{false};       // sends open or large puts being received
  int data_tags_ = 1;
  bool failed_ = false;
  bool in_agreement_ = false;
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
