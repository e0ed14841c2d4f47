#include "mpi/runtime.hpp"

#include <oneapi/tbb/info.h>
#include <sched.h>

#include <chrono>
#include <climits>
#include <cstdlib>
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

/// Polling MPI is what makes passive-target operations progress, but on an oversubscribed node a
/// pure spin starves the very ranks being waited for: spin briefly, then yield the core.
void backoff(std::uint64_t polls) {
  if (polls > 64) std::this_thread::yield();
}

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
  Transport t = options.transport != Transport::automatic ? options.transport : env().mpi_transport;
  if (t == Transport::automatic) {
    // One-sided RMA only where every pair shares memory: across hosts over TCP, Debian's Open MPI
    // has no window (osc/rdma) or one that hangs unless the target drives progress (osc/ucx).
    t = local == size_ ? Transport::rma : Transport::p2p;
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
  transport_ = t;
  if (transport_ == Transport::p2p) {
    p2p_setup();
    p2p_alloc(options.initial_window_bytes);
  } else {
    allocate(options.initial_window_bytes);
  }
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
    // p2p: receives may still be posted into this memory; leave it to the process's end.
    (void)mem_.release();
    for (auto& [id, m] : buffer_mem_) (void)m.release();
    return;
  }
  release();
  MPI_Comm_free(&comm_);
}

void Runtime::Freer::operator()(char* p) const noexcept { std::free(p); }

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
  FC_CHECK_INTERNAL(transport_ == Transport::p2p, "a call buffer needs the p2p transport");
  call_buffer_ = static_cast<char*>(p);
  call_bytes_ = bytes;
}

void Runtime::allocate(std::size_t data_bytes) {
  MPI_Info info = MPI_INFO_NULL;
  FC_CHECK_MPI(MPI_Info_create(&info));
  // Slots only ever see MPI_SUM and MPI_NO_OP: lets the osc component use native atomics.
  FC_CHECK_MPI(MPI_Info_set(info, "accumulate_ops", "same_op_no_op"));
  const std::size_t bytes = kSlots * sizeof(std::uint64_t) + data_bytes;
  const int rc = MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, info, comm_, &base_, &win_);
  MPI_Info_free(&info);
  // On Debian's Open MPI this is where a missing one-sided transport shows (e.g. ranks on
  // several hosts with only TCP: osc/rdma needs an RDMA-capable BTL, docs/mpi.md).
  check_mpi(rc, "MPI_Win_allocate (symmetric window)", __FILE__, __LINE__);
  FC_CHECK_MPI(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN));
  data_bytes_ = data_bytes;
  std::memset(base_, 0, kSlots * sizeof(std::uint64_t));
  targets_.assign(kSlots, 0);
  FC_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
  // No rank may signal into a window whose slots its owner has not zeroed yet.
  FC_CHECK_MPI(MPI_Barrier(comm_));
}

void Runtime::release() noexcept {
  if (win_ == MPI_WIN_NULL) return;
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
  win_ = MPI_WIN_NULL;
  base_ = nullptr;
}

void Runtime::reserve(std::size_t bytes) {
  if (bytes <= data_bytes_) return;
  const Span span(*this, "grow the window");
  // Geometric growth: MPI_Win_allocate is slow and collective, so do it rarely.
  const std::size_t grown = std::max(bytes, data_bytes_ + data_bytes_ / 2);
  const std::size_t rounded = (grown + (std::size_t{1} << 16) - 1) & ~((std::size_t{1} << 16) - 1);
  if (transport_ == Transport::p2p) {
    // Local: no receive is posted into the old area (every put of an earlier call landed before
    // its signal was applied, and peers put in this call only into what this reserve makes).
    p2p_alloc(rounded);
    return;
  }
  release();
  allocate(rounded);
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
  if (transport_ == Transport::p2p) return p2p_put(peer, -1, offset, src, bytes);
  put_bytes(win_, peer, static_cast<MPI_Aint>(kSlots * sizeof(std::uint64_t) + offset), src, bytes);
}

void Runtime::put_bytes(MPI_Win win, int peer, MPI_Aint disp, const void* src, std::size_t bytes) {
  const auto* p = static_cast<const char*>(src);
  // MPI counts are int: move very large regions in pieces.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  while (bytes > 0) {
    const std::size_t n = std::min(bytes, kPiece);
    FC_CHECK_MPI(
        MPI_Put(p, static_cast<int>(n), MPI_BYTE, peer, disp, static_cast<int>(n), MPI_BYTE, win));
    p += n;
    disp += static_cast<MPI_Aint>(n);
    bytes -= n;
  }
}

int Runtime::add_buffer(std::size_t bytes, void** data) {
  Buffer b;
  b.bytes = bytes;
  if (transport_ == Transport::p2p) {
    // Plain memory: peers' puts arrive as messages received into it. Ids still agree, since
    // buffers are made in the same order on every rank.
    char* p = static_cast<char*>(
        std::aligned_alloc(4096, (std::max<std::size_t>(bytes, 1) + 4095) & ~std::size_t{4095}));
    if (!p)
      throw BackendError(detail::make_string(
          "fusedcoll mpi: cannot allocate a symmetric buffer of ", bytes, " bytes"));
    b.base = p;
    const int id = next_buffer_++;
    buffer_mem_[id].reset(p);
    buffers_[id] = b;
    *data = b.base;
    return id;
  }
  const int rc =
      MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, comm_, &b.base, &b.win);
  check_mpi(rc, "MPI_Win_allocate (symmetric buffer)", __FILE__, __LINE__);
  FC_CHECK_MPI(MPI_Win_set_errhandler(b.win, MPI_ERRORS_RETURN));
  FC_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, b.win));
  const int id = next_buffer_++;
  buffers_[id] = b;
  *data = b.base;
  return id;
}

void Runtime::remove_buffer(int id) noexcept {
  const auto it = buffers_.find(id);
  if (it == buffers_.end()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  // As in ~Runtime: no collective free after a failure or while an exception unwinds this rank.
  const bool clean = !finalized && !failed_ && std::uncaught_exceptions() == 0;
  if (clean && it->second.win != MPI_WIN_NULL) {
    MPI_Win_unlock_all(it->second.win);
    MPI_Win_free(&it->second.win);
  }
  // p2p after a failure: a receive may still be posted into it.
  if (!clean && buffer_mem_.count(id)) (void)buffer_mem_[id].release();
  buffer_mem_.erase(id);
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
    FC_CHECK_INTERNAL(transport_ == Transport::p2p, "a call buffer needs the p2p transport");
    return p2p_put(peer, id, offset, src, bytes);
  }
  const auto it = buffers_.find(id);
  FC_CHECK_INTERNAL(it != buffers_.end(), "no symmetric buffer ", id);
  const Span span(*this, "put");
  if (transport_ == Transport::p2p) return p2p_put(peer, id, offset, src, bytes);
  put_bytes(it->second.win, peer, static_cast<MPI_Aint>(offset), src, bytes);
}

void Runtime::flush_buffer(int id, int peer) {
  if (id == kCallBuffer) return;  // p2p: as below
  const auto it = buffers_.find(id);
  FC_CHECK_INTERNAL(it != buffers_.end(), "no symmetric buffer ", id);
  // p2p: the next signal to `peer` is applied only after this put has landed.
  if (transport_ == Transport::p2p) return;
  FC_CHECK_MPI(MPI_Win_flush(peer, it->second.win));
}

void Runtime::signal(int peer, int slot, std::uint64_t add, Sources sources) {
  // rma needs the flush whatever the sources: MPI orders no put before a later accumulate.
  const Span span(*this, "signal");
  if (transport_ == Transport::p2p) return p2p_signal(peer, slot, add, sources);
  FC_CHECK_MPI(MPI_Win_flush(peer, win_));
  FC_CHECK_MPI(MPI_Accumulate(&add, 1, MPI_UINT64_T, peer,
                              static_cast<MPI_Aint>(slot) * static_cast<MPI_Aint>(sizeof(add)), 1,
                              MPI_UINT64_T, MPI_SUM, win_));
  FC_CHECK_MPI(MPI_Win_flush(peer, win_));
}

void Runtime::signal_all(const std::vector<int>& peers, int slot, std::uint64_t add) {
  if (peers.empty()) return;
  const Span span(*this, "signal");
  if (transport_ == Transport::p2p) {
    for (int peer : peers) p2p_signal(peer, slot, add, Sources::reused);
    return;
  }
  FC_CHECK_MPI(MPI_Win_flush_all(win_));
  for (int peer : peers)
    FC_CHECK_MPI(MPI_Accumulate(&add, 1, MPI_UINT64_T, peer,
                                static_cast<MPI_Aint>(slot) * static_cast<MPI_Aint>(sizeof(add)), 1,
                                MPI_UINT64_T, MPI_SUM, win_));
  FC_CHECK_MPI(MPI_Win_flush_all(win_));
}

std::uint64_t Runtime::read_slot(int slot) {
  if (transport_ == Transport::p2p) {
    p2p_progress();
    return counters_[static_cast<std::size_t>(slot)].load(std::memory_order_acquire);
  }
  std::uint64_t value = 0;
  // Read through MPI's atomics, not a plain load: the slot is updated by MPI_Accumulate, and
  // only accumulate-class reads are atomic with it; the call also drives progress.
  FC_CHECK_MPI(MPI_Fetch_and_op(nullptr, &value, MPI_UINT64_T, rank_,
                                static_cast<MPI_Aint>(slot) * static_cast<MPI_Aint>(sizeof(value)),
                                MPI_NO_OP, win_));
  FC_CHECK_MPI(MPI_Win_flush(rank_, win_));
  return value;
}

void Runtime::wait(int slot, std::uint64_t target, const std::string& what) {
  const Span span(*this, "wait", what);
  if (transport_ == Transport::p2p) p2p_flush();
  const double limit = env().timeout_s;
  const auto start = Clock::now();
  for (std::uint64_t polls = 0;; ++polls) {
    const std::uint64_t now = read_slot(slot);
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
  if (transport_ == Transport::p2p) return;  // the acquire load of the counter suffices
  // Unified memory model: make the peers' completed puts visible to this thread's loads.
  FC_CHECK_MPI(MPI_Win_sync(win_));
  for (const auto& [id, b] : buffers_) FC_CHECK_MPI(MPI_Win_sync(b.win));
}

void Runtime::wait_requests(std::vector<MPI_Request>& reqs, const std::string& what) {
  const Span span(*this, "wait", what);
  if (transport_ == Transport::p2p) p2p_flush();
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
  if (transport_ == Transport::p2p) p2p_flush();
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

// ---- p2p --------------------------------------------------------------------------------------

namespace {
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
}  // namespace

void Runtime::p2p_setup() {
  void* ub = nullptr;
  int found = 0;
  FC_CHECK_MPI(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found));
  const int tag_ub = found ? *static_cast<int*>(ub) : 32767;
  // Tags kCtlTag + 1 ... name the data messages of large puts, cycling; a tag is reused only
  // after this many more large puts to the same peer, long after its receive completed.
  data_tags_ = std::min(tag_ub - kCtlTag, 1 << 20);
  counters_ = std::make_unique<std::atomic<std::uint64_t>[]>(kSlots);
  for (int i = 0; i < kSlots; ++i) counters_[static_cast<std::size_t>(i)].store(0);
  targets_.assign(kSlots, 0);
  arrivals_.assign(static_cast<std::size_t>(size_), {});
  links_.assign(static_cast<std::size_t>(size_), {});
  for (int r = 0; r < size_; ++r) outboxes_.push_back(std::make_unique<Outbox>());
}

void Runtime::p2p_alloc(std::size_t data_bytes) {
  const std::size_t bytes =
      (kSlots * sizeof(std::uint64_t) + data_bytes + 4095) & ~std::size_t{4095};
  char* p = static_cast<char*>(std::aligned_alloc(4096, bytes));
  if (!p)
    throw BackendError(detail::make_string("fusedcoll mpi: cannot allocate a data area of ",
                                           data_bytes, " bytes"));
  mem_.reset(p);
  base_ = p;
  data_bytes_ = data_bytes;
}

char* Runtime::p2p_landing(const Header& h) {
  if (h.buffer < 0) {
    FC_CHECK_INTERNAL(h.offset + h.bytes <= data_bytes_, "p2p put of ", h.bytes, " bytes at ",
                      h.offset, " past the data area (", data_bytes_, " bytes)");
    return data() + h.offset;
  }
  if (h.buffer == kCallBuffer) {
    FC_CHECK_INTERNAL(call_buffer_ && h.offset + h.bytes <= call_bytes_, "p2p put of ", h.bytes,
                      " bytes at ", h.offset, " past this call's receive buffer (", call_bytes_,
                      " bytes)");
    return call_buffer_ + h.offset;
  }
  const auto it = buffers_.find(h.buffer);
  FC_CHECK_INTERNAL(it != buffers_.end() && h.offset + h.bytes <= it->second.bytes,
                    "p2p put into symmetric buffer ", h.buffer, " out of range");
  return it->second.base + h.offset;
}

void Runtime::p2p_send(int peer, const void* p, std::size_t bytes, int tag,
                       std::vector<char> owned) {
  MPI_Request req = MPI_REQUEST_NULL;
  FC_CHECK_MPI(MPI_Isend(p, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &req));
  const std::lock_guard<std::mutex> lock(send_mu_);
  send_reqs_.push_back(req);
  sends_.push_back(Send{std::move(owned), std::this_thread::get_id(), peer});
  p2p_busy_.store(true, std::memory_order_relaxed);
}

void Runtime::p2p_record(int peer, const Header& h, const void* payload, bool now) {
  const std::size_t n = h.kind == kInlinePut ? h.bytes : 0;
  Outbox& box = *outboxes_[static_cast<std::size_t>(peer)];
  const std::lock_guard<std::mutex> lock(box.mu);
  if (!box.records.empty() && box.records.size() + sizeof h + n > kBatch) p2p_ship(peer, box);
  if (box.records.empty()) box.records.reserve(kBatch);
  const std::size_t at = box.records.size();
  box.records.resize(at + sizeof h + n);
  std::memcpy(box.records.data() + at, &h, sizeof h);
  if (n > 0) std::memcpy(box.records.data() + at + sizeof h, payload, n);
  if (now || box.records.size() >= kBatch) p2p_ship(peer, box);
}

void Runtime::p2p_ship(int peer, Outbox& box) {
  std::vector<char> msg;
  msg.swap(box.records);
  const char* at = msg.data();
  const std::size_t len = msg.size();  // before the move (argument order is unspecified)
  p2p_send(peer, at, len, kCtlTag, std::move(msg));
}

void Runtime::p2p_flush() {
  for (int r = 0; r < size_; ++r) {
    Outbox& box = *outboxes_[static_cast<std::size_t>(r)];
    const std::lock_guard<std::mutex> lock(box.mu);
    if (!box.records.empty()) p2p_ship(r, box);
  }
}

void Runtime::p2p_put(int peer, int buffer, std::size_t offset, const void* src,
                      std::size_t bytes) {
  const auto* s = static_cast<const char*>(src);
  while (bytes > 0) {
    const std::size_t n = std::min(bytes, kPiece);
    Header h;
    h.buffer = buffer;
    h.offset = offset;
    h.bytes = n;
    if (n <= kInline) {
      h.kind = kInlinePut;
      p2p_record(peer, h, s, false);
    } else {
      h.kind = kLargePut;
      h.tag = kCtlTag + 1 +
              static_cast<int>(next_tag_.fetch_add(1, std::memory_order_relaxed) %
                               static_cast<std::uint32_t>(data_tags_));
      // The control record first, from this thread: the receiver learns where the data goes
      // before it can match it, and posts the receive straight into place.
      p2p_record(peer, h, nullptr, true);
      p2p_send(peer, s, n, h.tag, {});
    }
    s += n;
    offset += n;
    bytes -= n;
  }
}

void Runtime::p2p_signal(int peer, int slot, std::uint64_t add, Sources sources) {
  // As an RMA signal completes this thread's puts to `peer`, so that their sources may be
  // reused: wait until MPI is done reading them (the peer has received them). Inline puts were
  // copied into the outbox already. Sources kept until the call ends need no such wait: the
  // peer applies the signal only after the puts before it have landed (p2p_progress), so the
  // signal may leave at once and the workgroup goes on computing while the data travels.
  if (sources == Sources::reused) {
    const std::thread::id me = std::this_thread::get_id();
    p2p_complete(&me, &peer,
                 detail::make_string("rank ", peer, " to receive the data this rank put to it"));
  }
  Header h;
  h.kind = kSignal;
  h.slot = slot;
  h.add = add;
  // Travels with the puts still in the outbox, after them: one message.
  p2p_record(peer, h, nullptr, true);
}

bool Runtime::p2p_progress() {
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
      // Completed requests are MPI_REQUEST_NULL now (p2p_complete's MPI_Test nulls some too).
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
    FC_CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, kCtlTag, comm_, &flag, &msg, &st));
    if (!flag) break;
    int count = 0;
    FC_CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
    inbox_.resize(static_cast<std::size_t>(count));
    FC_CHECK_MPI(MPI_Mrecv(inbox_.data(), count, MPI_BYTE, &msg, &st));
    const int src = st.MPI_SOURCE;
    auto& queue = arrivals_[static_cast<std::size_t>(src)];
    // The records in the order their source made them (p2p_record).
    for (std::size_t at = 0, end = static_cast<std::size_t>(count); at < end;) {
      Header h;
      FC_CHECK_INTERNAL(end - at >= sizeof h, "short p2p control message: ", count,
                        " bytes from ", src, ", a record at ", at);
      std::memcpy(&h, inbox_.data() + at, sizeof h);
      at += sizeof h;
      if (h.kind == kInlinePut) {
        FC_CHECK_INTERNAL(end - at >= h.bytes, "bad inline put from ", src);
        std::memcpy(p2p_landing(h), inbox_.data() + at, h.bytes);
        at += h.bytes;
      } else if (h.kind == kLargePut) {
        Arrival a;
        a.add = h.bytes;
        a.posted = Clock::now().time_since_epoch().count();
        FC_CHECK_MPI(MPI_Irecv(p2p_landing(h), static_cast<int>(h.bytes), MPI_BYTE, src, h.tag,
                               comm_, &a.req));
        queue.push_back(a);
      } else {
        FC_CHECK_INTERNAL(h.kind == kSignal && h.slot >= 0 && h.slot < kSlots,
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
    // Under send_mu_, as p2p_send's store: a send started meanwhile is never marked idle.
    const std::lock_guard<std::mutex> send_lock(send_mu_);
    p2p_busy_.store(!send_reqs_.empty() || receiving, std::memory_order_relaxed);
  }
  return true;
}

void Runtime::poll() {
  if (transport_ != Transport::p2p) return;
  const std::int64_t now = Clock::now().time_since_epoch().count();
  std::int64_t last = last_poll_.load(std::memory_order_relaxed);
  // Each poke costs CPU time the grid could use (trips through Open MPI's progress loop, and
  // the TCP copies it makes): often while this rank's sends or receives are under way, rarely
  // while it only looks for new control messages.
  const auto every = p2p_busy_.load(std::memory_order_relaxed) ? kPollInterval : kIdlePollInterval;
  if (now - last < std::chrono::duration_cast<Clock::duration>(every).count()) return;
  // One workgroup polls; the others go on computing.
  if (!last_poll_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  p2p_progress();
}

void Runtime::p2p_complete(const std::thread::id* who, const int* peer, const std::string& what) {
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
    p2p_progress();
    if (std::chrono::duration<double>(Clock::now() - start).count() > limit) timeout(what);
    backoff(polls);
  }
}

void Runtime::end_call() {
  if (transport_ == Transport::p2p) {
    const Span s(*this, "complete sends");
    p2p_flush();
    p2p_complete(nullptr, nullptr, "every peer to receive the data this rank sent it in this call");
    // link_rate's samples of this call, per host.
    const std::lock_guard<std::mutex> lock(recv_mu_);
    std::vector<HostLink> call;
    for (std::size_t p = 0; p < links_.size(); ++p) {
      Link& l = links_[p];
      if (l.bytes == 0) continue;
      const std::size_t h = static_cast<std::size_t>(host_of_[p]);
      if (call.size() <= h) call.resize(h + 1);
      call[h].bytes += static_cast<double>(l.bytes);
      call[h].secs += std::chrono::duration<double>(Clock::duration(l.ticks)).count();
      l = Link{};
    }
    if (host_links_.size() < call.size()) host_links_.resize(call.size());
    for (std::size_t h = 0; h < call.size(); ++h) {
      if (call[h].bytes == 0) continue;
      host_links_[h].bytes = host_links_[h].bytes / 2 + call[h].bytes;
      host_links_[h].secs = host_links_[h].secs / 2 + call[h].secs;
    }
  }
  if (tracing()) record_span(call_op_, call_begin_, Clock::now());
}

void Runtime::timeout(const std::string& what) {
  failed_ = true;  // peers may be mid-call: no further calls, no collective free
  std::string who;
  {
    const std::lock_guard<std::mutex> lock(send_mu_);
    for (std::size_t i = 0; i < send_reqs_.size(); ++i)
      if (send_reqs_[i] != MPI_REQUEST_NULL) {
        who = detail::make_string(" (rank ", sends_[i].peer, " has not received all of it)");
        break;
      }
  }
  throw TimeoutError(detail::make_string("fusedcoll mpi: timeout: rank ", rank_,
                                         " waited more than ", env().timeout_s,
                                         " s (FUSEDCOLL_TIMEOUT) ", activity_, " for ", what, who));
}

}  // namespace fusedcoll::mpi
