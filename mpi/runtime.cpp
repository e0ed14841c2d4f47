#include "mpi/runtime.hpp"

#include <oneapi/tbb/info.h>
#include <sched.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <thread>

#include "fusedcoll/env.hpp"

namespace fusedcoll::mpi {

void check_mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) std::strcpy(text, "unknown MPI error");
  throw BackendError(detail::make_string(file, ":", line, ": ", call, " failed: ", text));
}

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int default_workgroups(MPI_Comm comm) {
  // This process's CPU set as a bit mask (all ones where it cannot be read: every rank overlaps).
  constexpr int kWords = CPU_SETSIZE / 64;
  std::vector<std::uint64_t> mine(kWords, ~std::uint64_t{0});
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    std::fill(mine.begin(), mine.end(), 0);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        mine[static_cast<std::size_t>(c / 64)] |= std::uint64_t{1} << (c % 64);
  }
  MPI_Comm shared = MPI_COMM_NULL;
  FC_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
  int local = 1;
  int rc = MPI_Comm_size(shared, &local);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(local) * kWords);
  if (rc == MPI_SUCCESS)
    rc = MPI_Allgather(mine.data(), kWords, MPI_UINT64_T, all.data(), kWords, MPI_UINT64_T, shared);
  MPI_Comm_free(&shared);
  FC_CHECK_MPI(rc);
  int sharing = 0;  // ranks on this host whose CPUs overlap this rank's (itself included)
  for (int r = 0; r < local; ++r) {
    bool overlap = false;
    for (int w = 0; w < kWords && !overlap; ++w)
      overlap = (all[static_cast<std::size_t>(r) * kWords + static_cast<std::size_t>(w)] &
                 mine[static_cast<std::size_t>(w)]) != 0;
    sharing += overlap ? 1 : 0;
  }
  return std::max(1, tbb::info::default_concurrency() / std::max(1, sharing));
}

Runtime::Runtime(MPI_Comm comm, const Options& options) {
  int initialized = 0;
  FC_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) throw BackendError("fusedcoll mpi: MPI is not initialised");
  int provided = 0;
  FC_CHECK_MPI(MPI_Query_thread(&provided));
  if (provided < MPI_THREAD_MULTIPLE)
    throw BackendError(detail::make_string("fusedcoll mpi: MPI was initialised with thread level ",
                                           provided, ", workgroups need MPI_THREAD_MULTIPLE (",
                                           MPI_THREAD_MULTIPLE, ")"));
  FC_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
  // Errors come back as codes, which check_mpi turns into exceptions, instead of aborting.
  FC_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  wgs_ = options.workgroups > 0 ? options.workgroups : default_workgroups(comm_);
  arena_.initialize(wgs_);
  FC_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  FC_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  // The ranks that share this rank's memory: its host. Named by the lowest rank on it.
  int local = 0, host = rank_;
  {
    MPI_Comm shared = MPI_COMM_NULL;
    FC_CHECK_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
    FC_CHECK_MPI(MPI_Comm_size(shared, &local));
    const int rc = MPI_Allreduce(&rank_, &host, 1, MPI_INT, MPI_MIN, shared);
    MPI_Comm_free(&shared);
    FC_CHECK_MPI(rc);
  }
  using Kind = Env::MpiTransport;
  Kind t = options.transport != Kind::automatic ? options.transport : env().mpi_transport;
  if (t == Kind::automatic) {
    // One-sided RMA only where every pair shares memory: across hosts over TCP, Debian's Open MPI
    // has no window (osc/rdma) or one that hangs unless the target drives progress (osc/ucx).
    t = local == size_ ? Kind::rma : Kind::p2p;
  }
  // Every rank's host (FUSEDCOLL_MPI_HOSTS may declare them) and hierarchy setting: the
  // collectives' schedules derive from both, so every rank must see the same.
  {
    const auto& declared = env().mpi_hosts;
    if (!declared.empty()) host = declared[static_cast<std::size_t>(rank_) % declared.size()];
    const int mine[2] = {host, static_cast<int>(env().mpi_hierarchy)};
    std::vector<int> all(2 * static_cast<std::size_t>(size_));
    FC_CHECK_MPI(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm_));
    std::vector<int> names;  // hosts numbered in order of their first rank
    host_of_.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      if (all[2 * r + 1] != mine[1])
        throw BackendError(detail::make_string(
            "fusedcoll mpi: rank ", rank_, ": FUSEDCOLL_MPI_HIERARCHY differs between ranks (rank ",
            r, " has another value)"));
      const auto it = std::find(names.begin(), names.end(), all[2 * r]);
      host_of_[r] = static_cast<int>(it - names.begin());
      if (it == names.end()) names.push_back(all[2 * r]);
    }
  }
  // A rank on rma and one on p2p would each wait for what the other never sends.
  int mine[2] = {static_cast<int>(t), -static_cast<int>(t)}, all[2] = {0, 0};
  FC_CHECK_MPI(MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, comm_));
  if (all[0] != -all[1])
    throw BackendError(detail::make_string(
        "fusedcoll mpi: rank ", rank_,
        ": the ranks chose different transports (rma and p2p; "
        "FUSEDCOLL_MPI_TRANSPORT or mpi::Options::transport differ between ranks)"));
  transport_ = t == Kind::p2p ? make_p2p(*this) : make_rma(*this);
  targets_.assign(kSlots, 0);
  base_ = transport_->allocate(options.initial_window_bytes).base;
  data_bytes_ = options.initial_window_bytes;
  if (!env().trace_path.empty()) {
    // One file per rank: "t.json" -> "t.rank3.json". The origin follows the collective
    // set-up above, so the ranks' timelines line up to within its last message.
    std::string path = env().trace_path;
    const std::string tag = detail::make_string(".rank", rank_);
    const std::size_t dot = path.rfind('.');
    const std::size_t slash = path.find_last_of('/');
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
      path.insert(dot, tag);
    else
      path += tag;
    trace_path_ = std::move(path);
    trace_origin_ = Clock::now();
  }
}

void Runtime::trace_call(const std::string& op) {
  if (!tracing()) return;
  call_op_ = op;
}

void Runtime::record_span(std::string name, Clock::time_point begin, Clock::time_point end) {
  const std::lock_guard<std::mutex> lock(trace_mu_);
  const int tid =
      trace_tids_.try_emplace(std::this_thread::get_id(), static_cast<int>(trace_tids_.size()))
          .first->second;
  spans_.push_back({std::move(name), "mpi", rank_,
                    tid, std::chrono::duration<double, std::micro>(begin - trace_origin_).count(),
                    std::chrono::duration<double, std::micro>(end - begin).count()});
}

void Runtime::write_trace() const noexcept {
  detail::write_chrome_trace(trace_path_, {{rank_, 0, detail::make_string("mpi rank ", rank_)}}, {},
                             spans_);
}

Runtime::~Runtime() {
  if (tracing()) write_trace();
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Freeing the window and the communicator is collective; after a failure the peers may never
  // call it, so a failed runtime leaks them rather than hang. Being destroyed by stack unwinding
  // counts as a failure: the exception is on this rank only, and it is on its way to a handler
  // (mpi::run's MPI_Abort, or the user's) that must not find this rank stuck in MPI_Win_free.
  if (finalized || failed_ || std::uncaught_exceptions() > 0) {
    transport_->abandon();
    return;
  }
  transport_->release();
  MPI_Comm_free(&comm_);
}

void Runtime::begin_call() {
  if (failed_)
    throw BackendError(detail::make_string(
        "fusedcoll mpi: rank ", rank_,
        ": an earlier call failed on this rank; this communicator cannot be used any more"));
  call_buffer_ = nullptr;
  call_bytes_ = 0;
  if (tracing()) {
    call_begin_ = Clock::now();
    call_op_ = "call";
  }
}

void Runtime::bind_call_buffer(void* p, std::size_t bytes) {
  FC_CHECK_INTERNAL(transport_->lands_anywhere(), "a call buffer needs the p2p transport");
  call_buffer_ = static_cast<char*>(p);
  call_bytes_ = bytes;
}

void Runtime::reserve(std::size_t bytes) {
  if (bytes <= data_bytes_) return;
  const Span span(*this, "grow the window");
  // Geometric growth: MPI_Win_allocate is slow and collective, so do it rarely.
  const std::size_t grown = std::max(bytes, data_bytes_ + data_bytes_ / 2);
  const std::size_t rounded = (grown + (std::size_t{1} << 16) - 1) & ~((std::size_t{1} << 16) - 1);
  const Transport::Area area = transport_->allocate(rounded);
  base_ = area.base;
  data_bytes_ = rounded;
  if (area.slots_zeroed) targets_.assign(kSlots, 0);
}

int Runtime::slots(const std::string& key, int n) {
  const auto it = slot_keys_.find(key);
  if (it != slot_keys_.end()) {
    FC_CHECK_INTERNAL(it->second.second >= n, "slot key '", key, "' reserved with ",
                      it->second.second, " slots, asked for ", n);
    return it->second.first;
  }
  if (next_slot_ + n > kSlots)
    throw UnsupportedError(detail::make_string("fusedcoll mpi: out of signal slots (", kSlots,
                                               ") reserving ", n, " for '", key, "'"));
  slot_keys_[key] = {next_slot_, n};
  next_slot_ += n;
  return next_slot_ - n;
}

std::uint64_t Runtime::expect(int slot, std::uint64_t n) {
  return targets_[static_cast<std::size_t>(slot)] += n;
}

void Runtime::put(int peer, std::size_t offset, const void* src, std::size_t bytes) {
  FC_CHECK_INTERNAL(offset + bytes <= data_bytes_, "put of ", bytes, " bytes at ", offset,
                    " past the data area (", data_bytes_, " bytes)");
  const Span span(*this, "put");
  transport_->put(Transport::kDataArea, peer, offset, src, bytes);
}

int Runtime::add_buffer(std::size_t bytes, void** data) {
  const int id = next_buffer_;
  char* base = transport_->add_buffer(id, bytes);
  ++next_buffer_;
  buffers_[id] = Buffer{base, bytes};
  *data = base;
  return id;
}

void Runtime::remove_buffer(int id) noexcept {
  const auto it = buffers_.find(id);
  if (it == buffers_.end()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  // As in ~Runtime: no collective free after a failure or while an exception unwinds this rank.
  transport_->remove_buffer(id, !finalized && !failed_ && std::uncaught_exceptions() == 0);
  buffers_.erase(it);
}

Runtime::Landing Runtime::find_buffer(const void* p, std::size_t bytes) const {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& [id, b] : buffers_) {
    const auto base = reinterpret_cast<std::uintptr_t>(b.base);
    if (at >= base && at - base <= b.bytes && bytes <= b.bytes - (at - base))
      return {id, static_cast<std::size_t>(at - base)};
  }
  return {};
}

void Runtime::put_buffer(int id, int peer, std::size_t offset, const void* src, std::size_t bytes) {
  if (id == kCallBuffer) {
    FC_CHECK_INTERNAL(transport_->lands_anywhere(), "a call buffer needs the p2p transport");
    return transport_->put(id, peer, offset, src, bytes);
  }
  FC_CHECK_INTERNAL(buffers_.count(id) != 0, "no symmetric buffer ", id);
  const Span span(*this, "put");
  transport_->put(id, peer, offset, src, bytes);
}

void Runtime::flush_buffer(int id, int peer) {
  if (id == kCallBuffer) return;  // p2p's, whose puts need no flush (mpi/p2p.cpp)
  FC_CHECK_INTERNAL(buffers_.count(id) != 0, "no symmetric buffer ", id);
  transport_->flush_buffer(id, peer);
}

void Runtime::signal(int peer, int slot, std::uint64_t add, Sources sources) {
  const Span span(*this, "signal");
  transport_->signal(peer, slot, add, sources);
}

void Runtime::signal_all(const std::vector<int>& peers, int slot, std::uint64_t add,
                         Sources sources) {
  if (peers.empty()) return;
  const Span span(*this, "signal");
  transport_->signal_all(peers, slot, add, sources);
}

void Runtime::wait(int slot, std::uint64_t target, const std::string& what) {
  const Span span(*this, "wait", what);
  transport_->before_wait();
  const double limit = env().timeout_s;
  const auto start = Clock::now();
  for (std::uint64_t polls = 0;; ++polls) {
    const std::uint64_t now = transport_->read_slot(slot);
    if (now >= target) break;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > limit) {
      failed_ = true;  // peers may be mid-call: no further calls, no collective free
      throw TimeoutError(detail::make_string("fusedcoll mpi: timeout: rank ", rank_,
                                             " waited more than ", limit, " s (FUSEDCOLL_TIMEOUT) ",
                                             activity_, " for slot ", slot, " ('", what,
                                             "') >= ", target, ", current value ", now));
    }
    backoff(polls);
  }
  transport_->after_wait();
}

void Runtime::wait_requests(std::vector<MPI_Request>& reqs, const std::string& what) {
  const Span span(*this, "wait", what);
  transport_->before_wait();
  const double limit = env().timeout_s;
  const auto start = Clock::now();
  for (std::uint64_t polls = 0;; ++polls) {
    int done = 0;
    FC_CHECK_MPI(
        MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
    if (done) return;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > limit) {
      failed_ = true;  // peers may be mid-call: no further calls, no collective free
      throw TimeoutError(detail::make_string("fusedcoll mpi: timeout: rank ", rank_,
                                             " waited more than ", limit, " s (FUSEDCOLL_TIMEOUT) ",
                                             activity_, " for ", what));
    }
    backoff(polls);
  }
}

std::vector<std::string> Runtime::exchange(const std::string& blob) {
  transport_->before_wait();
  FC_ENFORCE(blob.size() <= static_cast<std::size_t>(INT_MAX), "argument record too large");
  // One fixed-size block per rank: its record's length and, when it fits, the record itself. Most
  // records fit, and then the rendezvous is one collective round instead of two; on an
  // oversubscribed node each round costs a trip through every rank's scheduler slot.
  constexpr std::size_t kBlock = 512, kInline = kBlock - sizeof(std::uint32_t);
  const auto len = static_cast<std::uint32_t>(blob.size());
  std::string mine(kBlock, '\0');
  std::memcpy(mine.data(), &len, sizeof len);
  if (blob.size() <= kInline) std::memcpy(mine.data() + sizeof len, blob.data(), blob.size());
  std::string blocks(kBlock * static_cast<std::size_t>(size_), '\0');
  std::vector<MPI_Request> req(1, MPI_REQUEST_NULL);
  const std::string missing =
      "every rank to enter the call (a rank never made it, failed before it, or ranks call "
      "collectives in different orders)";
  {
    // Point to point rather than MPI_Iallgather, so that a timeout can name the ranks whose
    // record never came (a rank that died, hangs, or sits behind a dropped link). Tag 0 is the
    // exchange's: the p2p transport's messages use 1 and up.
    std::memcpy(blocks.data() + kBlock * static_cast<std::size_t>(rank_), mine.data(), kBlock);
    std::vector<MPI_Request> recvs(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    std::vector<MPI_Request> sends(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      FC_CHECK_MPI(MPI_Irecv(blocks.data() + kBlock * static_cast<std::size_t>(r),
                             static_cast<int>(kBlock), MPI_CHAR, r, 0, comm_, &recvs[r]));
      FC_CHECK_MPI(
          MPI_Isend(mine.data(), static_cast<int>(kBlock), MPI_CHAR, r, 0, comm_, &sends[r]));
    }
    const double limit = env().timeout_s;
    const auto start = Clock::now();
    for (std::uint64_t polls = 0;; ++polls) {
      int got = 0, sent = 0;
      FC_CHECK_MPI(MPI_Testall(size_, recvs.data(), &got, MPI_STATUSES_IGNORE));
      FC_CHECK_MPI(MPI_Testall(size_, sends.data(), &sent, MPI_STATUSES_IGNORE));
      if (got && sent) break;
      if (std::chrono::duration<double>(Clock::now() - start).count() > limit) {
        std::string silent;
        for (int r = 0; r < size_; ++r) {
          int done = 1;
          if (recvs[r] != MPI_REQUEST_NULL)
            FC_CHECK_MPI(MPI_Test(&recvs[r], &done, MPI_STATUS_IGNORE));
          if (!done) silent += detail::make_string(silent.empty() ? "" : ", ", r);
        }
        timeout(detail::make_string(missing, "; no word from rank(s) ",
                                    silent.empty() ? std::string("none (sends pending)") : silent));
      }
      backoff(polls);
    }
  }
  std::vector<int> lens(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
  long long total = 0;
  bool all_inline = true;
  for (int r = 0; r < size_; ++r) {
    std::uint32_t n = 0;
    std::memcpy(&n, blocks.data() + kBlock * static_cast<std::size_t>(r), sizeof n);
    lens[r] = static_cast<int>(n);
    displs[r] = static_cast<int>(total);
    total += n;
    all_inline = all_inline && n <= kInline;
  }
  std::vector<std::string> out(static_cast<std::size_t>(size_));
  if (all_inline) {
    for (int r = 0; r < size_; ++r)
      out[r] = blocks.substr(kBlock * static_cast<std::size_t>(r) + sizeof(std::uint32_t),
                             static_cast<std::size_t>(lens[r]));
    return out;
  }
  FC_ENFORCE(total <= INT_MAX, "argument records too large");
  std::string all(static_cast<std::size_t>(total), '\0');
  FC_CHECK_MPI(MPI_Iallgatherv(blob.data(), static_cast<int>(len), MPI_CHAR, all.data(),
                               lens.data(), displs.data(), MPI_CHAR, comm_, &req[0]));
  wait_requests(req, missing);
  for (int r = 0; r < size_; ++r) out[r] = all.substr(displs[r], lens[r]);
  return out;
}

void Runtime::end_call() {
  transport_->end_call();
  if (tracing()) record_span(call_op_, call_begin_, Clock::now());
}

void Runtime::timeout(const std::string& what) {
  failed_ = true;  // peers may be mid-call: no further calls, no collective free
  const std::string who = transport_->unfinished();
  throw TimeoutError(detail::make_string("fusedcoll mpi: timeout: rank ", rank_,
                                         " waited more than ", env().timeout_s,
                                         " s (FUSEDCOLL_TIMEOUT) ", activity_, " for ", what, who));
}

double Runtime::compute_seconds_per(const std::string& key) const {
  const auto it = compute_.find(key);
  return it != compute_.end() ? it->second.seconds_per_work() : 0.0;
}

void Runtime::add_compute_sample(const std::string& key, double units, double secs) {
  if (units > 0) compute_[key].add(units, secs);
}

void Runtime::assume_compute_seconds_per(const std::string& key, double secs_per_unit) {
  compute_[key] = DecayedRate{1.0, secs_per_unit};
}

double Transport::link_rate(int peer) const {
  const std::size_t h = static_cast<std::size_t>(rt_.host_of()[static_cast<std::size_t>(peer)]);
  return h < host_links_.size() ? host_links_[h].work_per_second() : 0.0;
}

void Transport::assume_link_rate(int peer, double bytes_per_s) {
  const std::size_t h = static_cast<std::size_t>(rt_.host_of()[static_cast<std::size_t>(peer)]);
  if (host_links_.size() <= h) host_links_.resize(h + 1);
  host_links_[h] = DecayedRate{bytes_per_s, 1.0};
}

void Transport::add_link_samples(const std::vector<double>& bytes, const std::vector<double>& secs) {
  if (host_links_.size() < bytes.size()) host_links_.resize(bytes.size());
  for (std::size_t h = 0; h < bytes.size(); ++h) {
    if (bytes[h] != 0) host_links_[h].add(bytes[h], secs[h]);
  }
}

}  // namespace fusedcoll::mpi
