// The host proxy (gpu/proxy.hpp): the thread's loop, the wire format and the reports.

#include "gpu/proxy.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "fusedcoll/error.hpp"
#include "gpu/symmetric.hpp"

namespace fusedcoll::gpu::proxy {
namespace {

using process::check_mpi;

constexpr int kTag = 7;

/// A record on the wire: a put is followed by its `bytes`.
struct WireHeader {
  std::uint32_t kind;
  std::int32_t buffer;
  std::int32_t slot;
  std::int32_t producer;
  std::uint32_t op;  // signal: SignalOp
  std::uint32_t pad;
  std::uint64_t offset;
  std::uint64_t bytes;
  std::uint64_t value;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Proxy::Proxy(MPI_Comm comm, const QueueView& queue, std::uint64_t* tail, DeviceMemory& memory,
             Options options)
    : reader_(queue, tail), memory_(memory), options_(options) {
  int provided = 0;
  check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  if (provided < MPI_THREAD_MULTIPLE)
    throw BackendError(
        "fusedcoll gpu proxy: MPI must be initialised with MPI_THREAD_MULTIPLE (the proxy thread "
        "calls MPI beside the host thread)");
  FC_ENFORCE(queue.capacity > 0 && (queue.capacity & (queue.capacity - 1)) == 0,
             "proxy queue capacity ", queue.capacity, " is not a power of two");
  FC_ENFORCE_GE(options.batch_bytes, sizeof(WireHeader) + 1, "proxy batch_bytes");
  check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  peers_.resize(static_cast<std::size_t>(size_));
  thread_ = std::thread([this] { loop(); });
}

Proxy::~Proxy() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  // Sends a peer never received are abandoned (the call that made them failed): cancel them so
  // that freeing the communicator does not wait for them.
  for (Send& s : sends_)
    if (s.req != MPI_REQUEST_NULL) {
      MPI_Cancel(&s.req);
      MPI_Request_free(&s.req);
    }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Proxy::fail(std::exception_ptr e) noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  if (!error_) error_ = e;
}

void Proxy::loop() noexcept {
  int idle = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    bool busy = false;
    try {
      Record r;
      int taken = 0;
      // A bounded batch per round, so that inbound traffic is received while producers post.
      while (taken < 256 && reader_.pop(r)) {
        take(r);
        ++taken;
      }
      busy = taken > 0;
      // Nothing more published now: send what is coalesced, so a signal never waits for company.
      if (taken < 256) ship_all();
      busy = reap_sends() || busy;
      busy = receive() || busy;
      check_timeouts();
    } catch (...) {
      fail(std::current_exception());
      // A broken proxy keeps receiving nothing more; the host thread reports its error.
      while (!stop_.load(std::memory_order_acquire))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    if (busy) {
      idle = 0;
    } else if (++idle > 64) {
      // An idle proxy backs off to a short sleep: it shares the host's cores with the ranks.
      std::this_thread::sleep_for(std::chrono::microseconds(idle > 4096 ? 200 : 20));
    } else {
      std::this_thread::yield();
    }
  }
}

void Proxy::take(const Record& r) {
  const auto kind = static_cast<Kind>(r.kind);
  if ((kind != Kind::put && kind != Kind::signal) || r.peer < 0 || r.peer >= size_ ||
      r.peer == rank_)
    throw InternalError(detail::make_string(
        "fusedcoll gpu proxy: rank ", rank_, ": malformed record from producer ", r.producer,
        " (kind ", r.kind, ", peer ", r.peer, " of ", size_, "; a proxy serves other ranks only)"));
  WireHeader h{};
  h.kind = r.kind;
  h.producer = r.producer;
  if (kind == Kind::signal) {
    FC_CHECK_INTERNAL(r.op <= static_cast<std::uint32_t>(SignalOp::set),
                      "fusedcoll gpu proxy: rank ", rank_, ": signal op ", r.op, " from producer ",
                      r.producer);
    h.slot = r.slot;
    h.value = r.value;
    h.op = r.op;
    append(r.peer, &h, sizeof h, 0, 0);
    return;
  }
  h.buffer = r.buffer;
  // Larger puts go in pieces, each a record of its own with its bytes.
  const std::size_t piece = options_.batch_bytes - sizeof h;
  std::uint64_t done = 0;
  do {
    const std::uint64_t n = std::min<std::uint64_t>(r.bytes - done, piece);
    h.offset = r.offset + done;
    h.bytes = n;
    append(r.peer, &h, sizeof h, r.src + done, static_cast<std::size_t>(n));
    done += n;
  } while (done < r.bytes);
}

void Proxy::append(int peer, const void* header, std::size_t n, std::uint64_t src,
                   std::size_t bytes) {
  PeerState& p = peers_[static_cast<std::size_t>(peer)];
  if (!p.outbox.empty() && p.outbox.size() + n + bytes > options_.batch_bytes) ship(peer);
  const std::size_t at = p.outbox.size();
  p.outbox.resize(at + n + bytes);
  std::memcpy(p.outbox.data() + at, header, n);
  if (bytes > 0) memory_.read(src, p.outbox.data() + at + n, bytes);
}

void Proxy::ship(int peer) {
  PeerState& p = peers_[static_cast<std::size_t>(peer)];
  if (p.outbox.empty()) return;
  Send s;
  s.msg.swap(p.outbox);
  s.peer = peer;
  s.started = Clock::now();
  check_mpi(
      MPI_Isend(s.msg.data(), static_cast<int>(s.msg.size()), MPI_BYTE, peer, kTag, comm_, &s.req),
      "MPI_Isend");
  const std::lock_guard<std::mutex> lock(mu_);
  if (p.open_sends++ == 0) p.oldest_open = s.started;
  p.open_bytes += s.msg.size();
  p.bytes_sent += s.msg.size();
  ++p.messages_sent;
  sends_.push_back(std::move(s));
}

void Proxy::ship_all() {
  for (int q = 0; q < size_; ++q) ship(q);
  const std::uint64_t taken = reader_.taken();
  const std::lock_guard<std::mutex> lock(mu_);
  shipped_through_ = taken;
}

bool Proxy::reap_sends() {
  bool any = false;
  for (std::size_t i = 0; i < sends_.size();) {
    int done = 0;
    check_mpi(MPI_Test(&sends_[i].req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) {
      ++i;
      continue;
    }
    any = true;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      PeerState& p = peers_[static_cast<std::size_t>(sends_[i].peer)];
      --p.open_sends;
      p.open_bytes -= sends_[i].msg.size();
    }
    sends_.erase(sends_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  // The oldest open send per peer, for the timeout and the reports.
  const std::lock_guard<std::mutex> lock(mu_);
  for (PeerState& p : peers_) p.oldest_open = Clock::time_point{};
  for (const Send& s : sends_) {
    PeerState& p = peers_[static_cast<std::size_t>(s.peer)];
    if (p.oldest_open == Clock::time_point{} || s.started < p.oldest_open)
      p.oldest_open = s.started;
  }
  return any;
}

bool Proxy::receive() {
  bool any = false;
  for (;;) {
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    check_mpi(MPI_Improbe(MPI_ANY_SOURCE, kTag, comm_, &flag, &msg, &st), "MPI_Improbe");
    if (!flag) return any;
    int count = 0;
    check_mpi(MPI_Get_count(&st, MPI_BYTE, &count), "MPI_Get_count");
    inbox_.resize(static_cast<std::size_t>(count));
    check_mpi(MPI_Mrecv(inbox_.data(), count, MPI_BYTE, &msg, &st), "MPI_Mrecv");
    apply(inbox_.data(), static_cast<std::size_t>(count), st.MPI_SOURCE);
    any = true;
  }
}

void Proxy::apply(const char* msg, std::size_t bytes, int source) {
  // In order: a put lands before any signal after it (DeviceMemory::signal orders the device's
  // view of it after the writes).
  for (std::size_t at = 0; at < bytes;) {
    WireHeader h;
    FC_CHECK_INTERNAL(bytes - at >= sizeof h, "fusedcoll gpu proxy: short message from rank ",
                      source, " (", bytes, " bytes, a record at ", at, ")");
    std::memcpy(&h, msg + at, sizeof h);
    at += sizeof h;
    if (h.kind == static_cast<std::uint32_t>(Kind::put)) {
      FC_CHECK_INTERNAL(bytes - at >= h.bytes, "fusedcoll gpu proxy: put from rank ", source,
                        " shorter than its ", h.bytes, " bytes");
      memory_.write(h.buffer, h.offset, msg + at, static_cast<std::size_t>(h.bytes));
      at += static_cast<std::size_t>(h.bytes);
    } else {
      FC_CHECK_INTERNAL(h.kind == static_cast<std::uint32_t>(Kind::signal),
                        "fusedcoll gpu proxy: bad record kind ", h.kind, " from rank ", source);
      const auto op = static_cast<SignalOp>(h.op);
      memory_.signal(h.slot, h.value, op);
      const std::lock_guard<std::mutex> lock(mu_);
      auto& per_source = landed_[h.slot];
      per_source.resize(static_cast<std::size_t>(size_), 0);
      std::uint64_t& v = per_source[static_cast<std::size_t>(source)];
      v = op == SignalOp::set ? h.value : v + h.value;
    }
  }
  const std::lock_guard<std::mutex> lock(mu_);
  PeerState& p = peers_[static_cast<std::size_t>(source)];
  ++p.messages_received;
  p.last_received = Clock::now();
}

void Proxy::check_timeouts() {
  const std::lock_guard<std::mutex> lock(mu_);
  if (error_) return;
  for (int q = 0; q < size_; ++q) {
    const PeerState& p = peers_[static_cast<std::size_t>(q)];
    if (p.open_sends == 0 || seconds_since(p.oldest_open) <= options_.timeout_s) continue;
    error_ = std::make_exception_ptr(TimeoutError(detail::make_string(
        "fusedcoll gpu proxy: rank ", rank_, ": rank ", q, "'s proxy has not received ",
        p.open_sends, " message(s) (", p.open_bytes, " bytes) for more than ", options_.timeout_s,
        " s (FUSEDCOLL_TIMEOUT): its proxy is stuck or its process is gone")));
    return;
  }
}

void Proxy::quiesce(std::uint64_t posted) {
  const Clock::time_point start = Clock::now();
  for (int polls = 0;; ++polls) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (error_) std::rethrow_exception(error_);
      bool open = false;
      for (const PeerState& p : peers_) open = open || p.open_sends > 0;
      if (shipped_through_ >= posted && !open) return;
      if (seconds_since(start) > options_.timeout_s) {
        std::ostringstream os;
        os << "fusedcoll gpu proxy: rank " << rank_ << ": timeout after " << options_.timeout_s
           << " s (FUSEDCOLL_TIMEOUT) completing " << posted << " record(s): ";
        const std::uint64_t taken = reader_.taken();
        if (taken < posted) {
          os << "record " << taken << " was never published by its producer (only " << taken
             << " taken)";
        } else {
          const char* sep = "";
          for (int q = 0; q < size_; ++q) {
            const PeerState& p = peers_[static_cast<std::size_t>(q)];
            if (p.open_sends == 0) continue;
            os << sep << "rank " << q << "'s proxy has not received " << p.open_sends
               << " message(s) (" << p.open_bytes << " bytes)";
            sep = "; ";
          }
        }
        throw TimeoutError(os.str());
      }
    }
    if (polls > 100)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::yield();
  }
}

std::uint64_t Proxy::landed(int slot, int source) const {
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = landed_.find(slot);
  return it == landed_.end() ? 0 : it->second[static_cast<std::size_t>(source)];
}

std::string Proxy::describe(int slot) const {
  const std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  os << "rank " << rank_ << "'s proxy: slot " << slot << " got ";
  const auto it = landed_.find(slot);
  std::uint64_t total = 0;
  std::ostringstream from;
  if (it != landed_.end())
    for (int q = 0; q < size_; ++q) {
      const std::uint64_t v = it->second[static_cast<std::size_t>(q)];
      if (v == 0) continue;
      from << (total == 0 ? "" : ", ") << "rank " << q << ": " << v;
      total += v;
    }
  if (total == 0)
    os << "no signal through the proxy";
  else
    os << total << " through the proxy (" << from.str() << ")";
  os << "; last message from";
  const char* sep = " ";
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const PeerState& p = peers_[static_cast<std::size_t>(q)];
    os << sep << "rank " << q << ": ";
    if (p.messages_received == 0)
      os << "never";
    else
      os << seconds_since(p.last_received) << " s ago";
    sep = ", ";
  }
  bool stuck = false;
  for (int q = 0; q < size_; ++q) {
    const PeerState& p = peers_[static_cast<std::size_t>(q)];
    if (p.open_sends == 0) continue;
    os << (stuck ? ", " : "; not yet received by ") << "rank " << q << "'s proxy: " << p.open_sends
       << " message(s), " << p.open_bytes << " bytes, the oldest " << seconds_since(p.oldest_open)
       << " s old";
    stuck = true;
  }
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      os << "; the proxy failed: " << e.what();
    }
  }
  return os.str();
}

}  // namespace fusedcoll::gpu::proxy
