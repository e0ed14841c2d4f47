// The p2p transport (mpi/transport.hpp; docs/mpi.md, "Transports"): two-sided messages, the one
// that crosses hosts over TCP. The data area and symmetric buffers are plain memory, and the
// slots are atomic counters of this process.
//
// A put is a control record (the destination, and the bytes themselves when small) and, when
// large, an MPI_Isend of the data with a tag of its own, straight from the caller's buffer; a
// signal is a control record. Records to one peer are coalesced into one control message, sent
// when it nears TCP's eager limit, with every signal or large put, and before this rank waits or
// ends a call: a put need land only before the next signal from this rank to that peer
// (Runtime::put's contract). A receiver drains control messages whenever it waits (or signals,
// ends a call, or its workgroups poll between tiles: Open MPI's TCP BTL moves bytes only inside
// MPI calls): it receives each large put into its place with an MPI_Irecv and applies a signal
// only once the receives that came before it from that source have landed. So data leaves as
// soon as a workgroup puts it, and no rank relies on a peer calling MPI except to wait for what
// that peer expects anyway.
//
// Its sending policy: across hosts a slice's wire time is comparable to the compute, so fused
// kernels finish their data destination by destination, other hosts' ranks first, and ship large
// slices for other hosts in pieces when the link they measured bounds the call (piece_bytes).

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fusedcoll/detail/schedule.hpp"
#include "fusedcoll/env.hpp"
#include "mpi/runtime.hpp"

namespace fusedcoll::mpi {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kCtlTag = 1;
/// Puts up to this size travel inside their control message (copied once).
constexpr std::size_t kInline = std::size_t{16} << 10;
/// An outbox is sent once it holds this much: below the TCP BTL's eager limit (64 KiB with
/// Open MPI's header), so it leaves without waiting for the peer to match it. Scale-up puts a
/// row at a time (256 B at D = 64); one message per row took 3.3 s instead of 38 ms per call
/// across two hosts (docs/results/across-hosts.md).
constexpr std::size_t kBatch = std::size_t{63} << 10;
/// MPI counts are int: larger puts go as several.
constexpr std::size_t kPiece = std::size_t{1} << 30;
/// Rendezvous-sized: larger than this, a message waits for its receive to be posted. link_rate's
/// samples are such puts from a host's ranks, each timed from the posting of its receive to its
/// landing, over its bytes beyond this (the first fragment travels unasked and may have landed
/// before the post): a lower bound, since a receive also waits for the polls of both ranks.
constexpr std::size_t kRateMinBytes = std::size_t{64} << 10;
/// poll()'s bounds: while sends or receives are under way, and otherwise.
constexpr std::chrono::microseconds kPollInterval{100}, kIdlePollInterval{1000};

/// Large slices for other hosts leave in pieces of about kPieceBytes (fused kernels ship each
/// as soon as its rows are computed) when the link is what bounds the call: the link starts
/// after the first piece rather than after the first slice. Pieces stay below the TCP BTL's
/// eager limit (64 KiB), so one needs no rendezvous with a receiver that is busy computing.
/// Where the link is not the bottleneck, the pieces' messages cost more CPU than the overlap
/// gains, so slices go whole: no byte count serves both (docs/results/across-hosts.md: pieces
/// at 512 KiB-1 MiB per rank gave 0.68-0.70 of unfused at 1 Gbit/s and cost 20-25% at
/// 10 Gbit/s). So the sender decides alone from the link it measured (link_rate, its receives
/// from that host): pieces when its bytes for other hosts would take kStreamSeconds or more at
/// that rate. Before any measurement, pieces when the host sends more than kStreamBytes across
/// (whole slices, which are rendezvous-sized, then measure the link). Slices within a host
/// always go whole.
constexpr std::size_t kPieceBytes = std::size_t{48} << 10;
constexpr std::int64_t kStreamBytes = std::int64_t{1} << 20;
constexpr double kStreamSeconds = 2.5e-3;

struct Freer {
  void operator()(char* p) const noexcept { std::free(p); }
};
using Memory = std::unique_ptr<char, Freer>;

class P2p final : public Transport {
 public:
  explicit P2p(Runtime& rt);

  Area allocate(std::size_t data_bytes) override;
  void release() noexcept override {}
  void abandon() noexcept override {
    // Receives may still be posted into this memory; leave it to the process's end.
    (void)mem_.release();
    for (auto& [id, b] : buffers_) (void)b.mem.release();
  }
  char* add_buffer(int id, std::size_t bytes) override;
  void remove_buffer(int id, bool clean) noexcept override {
    const auto it = buffers_.find(id);
    if (it == buffers_.end()) return;
    // After a failure a receive may still be posted into it.
    if (!clean) (void)it->second.mem.release();
    buffers_.erase(it);
  }

  void put(int buffer, int peer, std::size_t offset, const void* src, std::size_t bytes) override;
  // The next signal to `peer` is applied only after this put has landed.
  void flush_buffer(int, int) override {}
  void signal(int peer, int slot, std::uint64_t add, Sources sources) override;
  void signal_all(const std::vector<int>& peers, int slot, std::uint64_t add,
                  Sources sources) override {
    for (int peer : peers) signal(peer, slot, add, sources);
  }
  std::uint64_t read_slot(int slot) override {
    progress();
    return counters_[static_cast<std::size_t>(slot)].load(std::memory_order_acquire);
  }
  void before_wait() override { flush(); }
  // The acquire load of the counter suffices.
  void after_wait() override {}
  void poll() override;
  void end_call() override;
  std::string unfinished() override;

  std::vector<int> destinations(int rank) const override {
    return detail::remote_hosts_first(rank, rt_.host_of());
  }
  bool destination_by_destination() const override { return true; }
  bool lands_anywhere() const override { return true; }
  std::size_t piece_bytes(int peer, std::int64_t leaving, std::int64_t crossing) const override {
    const std::vector<int>& host = rt_.host_of();
    if (host[static_cast<std::size_t>(peer)] == host[static_cast<std::size_t>(rt_.rank())])
      return 0;
    const double rate = link_rate(peer);
    const bool stream = rate > 0 ? static_cast<double>(leaving) / rate >= kStreamSeconds
                                 : crossing > kStreamBytes;
    return stream ? kPieceBytes : 0;
  }

 private:
  struct Header {
    std::uint32_t kind = 0;    // RecordKind
    std::int32_t buffer = -1;  // kDataArea; else a symmetric buffer id or kCallBuffer
    std::uint64_t offset = 0, bytes = 0;
    std::int32_t slot = 0, tag = 0;  // signal: the slot; large put: the data message's tag
    std::uint64_t add = 0;
  };
  enum RecordKind : std::uint32_t { kInlinePut = 1, kLargePut = 2, kSignal = 3 };
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
  struct Buffer {
    Memory mem;
    std::size_t bytes = 0;
  };

  /// Appends a control record (and `payload`, h.bytes of it, for an inline put) for `peer`;
  /// sends the outbox at once if `now`, or when it is full.
  void record(int peer, const Header& h, const void* payload, bool now);
  void ship(int peer, Outbox& box);  // box.mu held
  /// Sends every outbox: before this rank blocks, so no peer waits for a record held here.
  void flush();
  void send(int peer, const void* p, std::size_t bytes, int tag, std::vector<char> owned);
  /// Receives what has arrived and applies what has landed; false if another thread was at it.
  bool progress();
  /// Completes the sends of `who` to `peer` (any thread / any peer when unset), progressing.
  void complete(const std::thread::id* who, const int* peer, const std::string& what);
  char* landing(const Header& h);

  Memory mem_;  // the data area's memory (slot part unused)
  std::size_t data_bytes_ = 0;
  std::map<int, Buffer> buffers_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counters_;  // the slots, never reset
  std::mutex send_mu_;
  std::vector<MPI_Request> send_reqs_;  // parallel to sends_
  std::vector<Send> sends_;
  std::vector<int> send_done_;  // MPI_Testsome's indices
  std::mutex recv_mu_;
  std::vector<std::deque<Arrival>> arrivals_;
  std::vector<Link> links_;  // per source, under recv_mu_
  std::vector<char> inbox_;
  std::vector<std::unique_ptr<Outbox>> outboxes_;  // per peer
  std::atomic<std::uint32_t> next_tag_{0};
  std::atomic<std::int64_t> last_poll_{0};  // steady_clock ticks of the last poll()
  std::atomic<bool> busy_{false};           // sends open or large puts being received
  int data_tags_ = 1;
};

P2p::P2p(Runtime& rt) : Transport(rt) {
  void* ub = nullptr;
  int found = 0;
  FC_CHECK_MPI(MPI_Comm_get_attr(rt_.comm(), MPI_TAG_UB, &ub, &found));
  const int tag_ub = found ? *static_cast<int*>(ub) : 32767;
  // Tags kCtlTag + 1 ... name the data messages of large puts, cycling; a tag is reused only
  // after this many more large puts to the same peer, long after its receive completed.
  data_tags_ = std::min(tag_ub - kCtlTag, 1 << 20);
  counters_ = std::make_unique<std::atomic<std::uint64_t>[]>(Runtime::kSlots);
  for (int i = 0; i < Runtime::kSlots; ++i) counters_[static_cast<std::size_t>(i)].store(0);
  arrivals_.assign(static_cast<std::size_t>(rt_.size()), {});
  links_.assign(static_cast<std::size_t>(rt_.size()), {});
  for (int r = 0; r < rt_.size(); ++r) outboxes_.push_back(std::make_unique<Outbox>());
}

// Local: no receive is posted into the old area (every put of an earlier call landed before its
// signal was applied, and peers put in this call only into what this allocation makes).
Transport::Area P2p::allocate(std::size_t data_bytes) {
  const std::size_t bytes =
      (Runtime::kSlots * sizeof(std::uint64_t) + data_bytes + 4095) & ~std::size_t{4095};
  char* p = static_cast<char*>(std::aligned_alloc(4096, bytes));
  if (!p)
    throw BackendError(detail::make_string("fusedcoll mpi: cannot allocate a data area of ",
                                           data_bytes, " bytes"));
  mem_.reset(p);
  data_bytes_ = data_bytes;
  return {p, false};
}

char* P2p::add_buffer(int id, std::size_t bytes) {
  // Plain memory: peers' puts arrive as messages received into it. Ids still agree, since
  // buffers are made in the same order on every rank.
  char* p = static_cast<char*>(
      std::aligned_alloc(4096, (std::max<std::size_t>(bytes, 1) + 4095) & ~std::size_t{4095}));
  if (!p)
    throw BackendError(detail::make_string(
        "fusedcoll mpi: cannot allocate a symmetric buffer of ", bytes, " bytes"));
  Buffer& b = buffers_[id];
  b.mem.reset(p);
  b.bytes = bytes;
  return p;
}

char* P2p::landing(const Header& h) {
  if (h.buffer == kDataArea) {
    FC_CHECK_INTERNAL(h.offset + h.bytes <= data_bytes_, "p2p put of ", h.bytes, " bytes at ",
                      h.offset, " past the data area (", data_bytes_, " bytes)");
    return mem_.get() + Runtime::kSlots * sizeof(std::uint64_t) + h.offset;
  }
  if (h.buffer == Runtime::kCallBuffer) {
    FC_CHECK_INTERNAL(rt_.call_buffer() && h.offset + h.bytes <= rt_.call_bytes(), "p2p put of ",
                      h.bytes, " bytes at ", h.offset, " past this call's receive buffer (",
                      rt_.call_bytes(), " bytes)");
    return rt_.call_buffer() + h.offset;
  }
  const auto it = buffers_.find(h.buffer);
  FC_CHECK_INTERNAL(it != buffers_.end() && h.offset + h.bytes <= it->second.bytes,
                    "p2p put into symmetric buffer ", h.buffer, " out of range");
  return it->second.mem.get() + h.offset;
}

void P2p::send(int peer, const void* p, std::size_t bytes, int tag, std::vector<char> owned) {
  MPI_Request req = MPI_REQUEST_NULL;
  FC_CHECK_MPI(MPI_Isend(p, static_cast<int>(bytes), MPI_BYTE, peer, tag, rt_.comm(), &req));
  const std::lock_guard<std::mutex> lock(send_mu_);
  send_reqs_.push_back(req);
  sends_.push_back(Send{std::move(owned), std::this_thread::get_id(), peer});
  busy_.store(true, std::memory_order_relaxed);
}

void P2p::record(int peer, const Header& h, const void* payload, bool now) {
  const std::size_t n = h.kind == kInlinePut ? h.bytes : 0;
  Outbox& box = *outboxes_[static_cast<std::size_t>(peer)];
  const std::lock_guard<std::mutex> lock(box.mu);
  if (!box.records.empty() && box.records.size() + sizeof h + n > kBatch) ship(peer, box);
  if (box.records.empty()) box.records.reserve(kBatch);
  const std::size_t at = box.records.size();
  box.records.resize(at + sizeof h + n);
  std::memcpy(box.records.data() + at, &h, sizeof h);
  if (n > 0) std::memcpy(box.records.data() + at + sizeof h, payload, n);
  if (now || box.records.size() >= kBatch) ship(peer, box);
}

void P2p::ship(int peer, Outbox& box) {
  std::vector<char> msg;
  msg.swap(box.records);
  const char* at = msg.data();
  const std::size_t len = msg.size();  // before the move (argument order is unspecified)
  send(peer, at, len, kCtlTag, std::move(msg));
}

void P2p::flush() {
  for (int r = 0; r < rt_.size(); ++r) {
    Outbox& box = *outboxes_[static_cast<std::size_t>(r)];
    const std::lock_guard<std::mutex> lock(box.mu);
    if (!box.records.empty()) ship(r, box);
  }
}

void P2p::put(int buffer, int peer, std::size_t offset, const void* src, std::size_t bytes) {
  const auto* s = static_cast<const char*>(src);
  while (bytes > 0) {
    const std::size_t n = std::min(bytes, kPiece);
    Header h;
    h.buffer = buffer;
    h.offset = offset;
    h.bytes = n;
    if (n <= kInline) {
      h.kind = kInlinePut;
      record(peer, h, s, false);
    } else {
      h.kind = kLargePut;
      h.tag = kCtlTag + 1 +
              static_cast<int>(next_tag_.fetch_add(1, std::memory_order_relaxed) %
                               static_cast<std::uint32_t>(data_tags_));
      // The control record first, from this thread: the receiver learns where the data goes
      // before it can match it, and posts the receive straight into place.
      record(peer, h, nullptr, true);
      send(peer, s, n, h.tag, {});
    }
    s += n;
    offset += n;
    bytes -= n;
  }
}

void P2p::signal(int peer, int slot, std::uint64_t add, Sources sources) {
  // As an RMA signal completes this thread's puts to `peer`, so that their sources may be
  // reused: wait until MPI is done reading them (the peer has received them). Inline puts were
  // copied into the outbox already. Sources kept until the call ends need no such wait: the
  // peer applies the signal only after the puts before it have landed (progress), so the
  // signal may leave at once and the workgroup goes on computing while the data travels.
  if (sources == Sources::reused) {
    const std::thread::id me = std::this_thread::get_id();
    complete(&me, &peer,
             detail::make_string("rank ", peer, " to receive the data this rank put to it"));
  }
  Header h;
  h.kind = kSignal;
  h.slot = slot;
  h.add = add;
  // Travels with the puts still in the outbox, after them: one message.
  record(peer, h, nullptr, true);
}

bool P2p::progress() {
  {
    // Reap completed sends (keeps the list short; frees control messages). One MPI_Testsome,
    // one trip through Open MPI's progress loop, however many sends are open: a poll between
    // tiles costs each trip (an epoll and, with mpi_yield_when_idle, a sched_yield).
    const std::lock_guard<std::mutex> lock(send_mu_);
    if (!send_reqs_.empty()) {
      int outcount = 0;
      send_done_.resize(send_reqs_.size());
      FC_CHECK_MPI(MPI_Testsome(static_cast<int>(send_reqs_.size()), send_reqs_.data(), &outcount,
                                send_done_.data(), MPI_STATUSES_IGNORE));
      // Completed requests are MPI_REQUEST_NULL now (complete's MPI_Test nulls some too).
      std::size_t kept = 0;
      for (std::size_t i = 0; i < send_reqs_.size(); ++i) {
        if (send_reqs_[i] == MPI_REQUEST_NULL) continue;
        // Never a self-move: it would free a control message MPI is still sending.
        if (kept != i) {
          send_reqs_[kept] = send_reqs_[i];
          sends_[kept] = std::move(sends_[i]);
        }
        ++kept;
      }
      send_reqs_.resize(kept);
      sends_.resize(kept);
    }
  }
  std::unique_lock<std::mutex> lock(recv_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  for (;;) {
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    FC_CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, kCtlTag, rt_.comm(), &flag, &msg, &st));
    if (!flag) break;
    int count = 0;
    FC_CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
    inbox_.resize(static_cast<std::size_t>(count));
    FC_CHECK_MPI(MPI_Mrecv(inbox_.data(), count, MPI_BYTE, &msg, &st));
    const int src = st.MPI_SOURCE;
    auto& queue = arrivals_[static_cast<std::size_t>(src)];
    // The records in the order their source made them (record).
    for (std::size_t at = 0, end = static_cast<std::size_t>(count); at < end;) {
      Header h;
      FC_CHECK_INTERNAL(end - at >= sizeof h, "short p2p control message: ", count,
                        " bytes from ", src, ", a record at ", at);
      std::memcpy(&h, inbox_.data() + at, sizeof h);
      at += sizeof h;
      if (h.kind == kInlinePut) {
        FC_CHECK_INTERNAL(end - at >= h.bytes, "bad inline put from ", src);
        std::memcpy(landing(h), inbox_.data() + at, h.bytes);
        at += h.bytes;
      } else if (h.kind == kLargePut) {
        Arrival a;
        a.add = h.bytes;
        a.posted = Clock::now().time_since_epoch().count();
        FC_CHECK_MPI(MPI_Irecv(landing(h), static_cast<int>(h.bytes), MPI_BYTE, src, h.tag,
                               rt_.comm(), &a.req));
        queue.push_back(a);
      } else {
        FC_CHECK_INTERNAL(h.kind == kSignal && h.slot >= 0 && h.slot < Runtime::kSlots,
                          "bad p2p control message from ", src);
        queue.push_back(Arrival{MPI_REQUEST_NULL, h.slot, h.add});
      }
    }
  }
  // A signal counts once everything its source sent before it has landed.
  bool receiving = false;
  for (std::size_t src = 0; src < arrivals_.size(); ++src) {
    auto& queue = arrivals_[src];
    while (!queue.empty()) {
      Arrival& a = queue.front();
      if (a.req != MPI_REQUEST_NULL) {
        int done = 0;
        FC_CHECK_MPI(MPI_Test(&a.req, &done, MPI_STATUS_IGNORE));
        if (!done) break;
        if (a.add > kRateMinBytes) {  // link_rate's sample
          links_[src].bytes += a.add - kRateMinBytes;
          links_[src].ticks += Clock::now().time_since_epoch().count() - a.posted;
        }
      } else {
        counters_[static_cast<std::size_t>(a.slot)].fetch_add(a.add, std::memory_order_release);
      }
      queue.pop_front();
    }
    receiving = receiving || !queue.empty();
  }
  {
    // Under send_mu_, as send's store: a send started meanwhile is never marked idle.
    const std::lock_guard<std::mutex> send_lock(send_mu_);
    busy_.store(!send_reqs_.empty() || receiving, std::memory_order_relaxed);
  }
  return true;
}

void P2p::poll() {
  const std::int64_t now = Clock::now().time_since_epoch().count();
  std::int64_t last = last_poll_.load(std::memory_order_relaxed);
  // Each poke costs CPU time the grid could use (trips through Open MPI's progress loop, and
  // the TCP copies it makes): often while this rank's sends or receives are under way, rarely
  // while it only looks for new control messages.
  const auto every = busy_.load(std::memory_order_relaxed) ? kPollInterval : kIdlePollInterval;
  if (now - last < std::chrono::duration_cast<Clock::duration>(every).count()) return;
  // One workgroup polls; the others go on computing.
  if (!last_poll_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  progress();
}

void P2p::complete(const std::thread::id* who, const int* peer, const std::string& what) {
  const double limit = env().timeout_s;
  const auto start = Clock::now();
  for (std::uint64_t polls = 0;; ++polls) {
    bool open = false;
    {
      const std::lock_guard<std::mutex> lock(send_mu_);
      for (std::size_t i = 0; i < send_reqs_.size() && !open; ++i) {
        if (send_reqs_[i] == MPI_REQUEST_NULL) continue;
        if ((who && sends_[i].who != *who) || (peer && sends_[i].peer != *peer)) continue;
        int done = 0;
        FC_CHECK_MPI(MPI_Test(&send_reqs_[i], &done, MPI_STATUS_IGNORE));
        open = !done;
      }
    }
    if (!open) return;
    progress();
    if (std::chrono::duration<double>(Clock::now() - start).count() > limit) rt_.timeout(what);
    backoff(polls);
  }
}

void P2p::end_call() {
  const Runtime::Span s(rt_, "complete sends");
  flush();
  complete(nullptr, nullptr, "every peer to receive the data this rank sent it in this call");
  // link_rate's samples of this call, per host.
  const std::lock_guard<std::mutex> lock(recv_mu_);
  std::vector<double> bytes, secs;
  for (std::size_t p = 0; p < links_.size(); ++p) {
    Link& l = links_[p];
    if (l.bytes == 0) continue;
    const std::size_t h = static_cast<std::size_t>(rt_.host_of()[p]);
    if (bytes.size() <= h) {
      bytes.resize(h + 1);
      secs.resize(h + 1);
    }
    bytes[h] += static_cast<double>(l.bytes);
    secs[h] += std::chrono::duration<double>(Clock::duration(l.ticks)).count();
    l = Link{};
  }
  add_link_samples(bytes, secs);
}

std::string P2p::unfinished() {
  const std::lock_guard<std::mutex> lock(send_mu_);
  for (std::size_t i = 0; i < send_reqs_.size(); ++i)
    if (send_reqs_[i] != MPI_REQUEST_NULL)
      return detail::make_string(" (rank ", sends_[i].peer, " has not received all of it)");
  return {};
}

}  // namespace

std::unique_ptr<Transport> make_p2p(Runtime& rt) { return std::make_unique<P2p>(rt); }

}  // namespace fusedcoll::mpi
