#include "mpi/runtime.hpp"

#include <oneapi/tbb/info.h>

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

/// Polling MPI is what makes passive-target operations progress, but on an oversubscribed node a
/// pure spin starves the very ranks being waited for: spin briefly, then yield the core.
void backoff(std::uint64_t polls) {
  if (polls > 64) std::this_thread::yield();
}

}  // namespace

Runtime::Runtime(MPI_Comm comm, const Options& options)
    : wgs_(options.workgroups > 0 ? options.workgroups : tbb::info::default_concurrency()),
      arena_(wgs_) {
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
  FC_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  FC_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  allocate(options.initial_window_bytes);
}

Runtime::~Runtime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Freeing the window and the communicator is collective; after a failure the peers may never
  // call it, so a failed runtime leaks them rather than hang. Being destroyed by stack unwinding
  // counts as a failure: the exception is on this rank only, and it is on its way to a handler
  // (mpi::run's MPI_Abort, or the user's) that must not find this rank stuck in MPI_Win_free.
  if (finalized || failed_ || std::uncaught_exceptions() > 0) return;
  release();
  MPI_Comm_free(&comm_);
}

void Runtime::begin_call() {
  if (failed_)
    throw BackendError(detail::make_string(
        "fusedcoll mpi: rank ", rank_,
        ": an earlier call failed on this rank; this communicator cannot be used any more"));
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
  // Geometric growth: MPI_Win_allocate is slow and collective, so do it rarely.
  const std::size_t grown = std::max(bytes, data_bytes_ + data_bytes_ / 2);
  const std::size_t rounded = (grown + (std::size_t{1} << 16) - 1) & ~((std::size_t{1} << 16) - 1);
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
  const int rc = MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, comm_, &b.base,
                                  &b.win);
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
  if (!finalized && !failed_ && std::uncaught_exceptions() == 0) {
    MPI_Win_unlock_all(it->second.win);
    MPI_Win_free(&it->second.win);
  }
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

void Runtime::put_buffer(int id, int peer, std::size_t offset, const void* src,
                         std::size_t bytes) {
  const auto it = buffers_.find(id);
  FC_CHECK_INTERNAL(it != buffers_.end(), "no symmetric buffer ", id);
  put_bytes(it->second.win, peer, static_cast<MPI_Aint>(offset), src, bytes);
}

void Runtime::flush_buffer(int id, int peer) {
  const auto it = buffers_.find(id);
  FC_CHECK_INTERNAL(it != buffers_.end(), "no symmetric buffer ", id);
  FC_CHECK_MPI(MPI_Win_flush(peer, it->second.win));
}

void Runtime::signal(int peer, int slot, std::uint64_t add) {
  FC_CHECK_MPI(MPI_Win_flush(peer, win_));
  FC_CHECK_MPI(MPI_Accumulate(&add, 1, MPI_UINT64_T, peer,
                              static_cast<MPI_Aint>(slot) * static_cast<MPI_Aint>(sizeof(add)), 1,
                              MPI_UINT64_T, MPI_SUM, win_));
  FC_CHECK_MPI(MPI_Win_flush(peer, win_));
}

void Runtime::signal_all(const std::vector<int>& peers, int slot, std::uint64_t add) {
  if (peers.empty()) return;
  FC_CHECK_MPI(MPI_Win_flush_all(win_));
  for (int peer : peers)
    FC_CHECK_MPI(MPI_Accumulate(&add, 1, MPI_UINT64_T, peer,
                                static_cast<MPI_Aint>(slot) * static_cast<MPI_Aint>(sizeof(add)),
                                1, MPI_UINT64_T, MPI_SUM, win_));
  FC_CHECK_MPI(MPI_Win_flush_all(win_));
}

std::uint64_t Runtime::read_slot(int slot) {
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
  // Unified memory model: make the peers' completed puts visible to this thread's loads.
  FC_CHECK_MPI(MPI_Win_sync(win_));
  for (const auto& [id, b] : buffers_) FC_CHECK_MPI(MPI_Win_sync(b.win));
}

void Runtime::wait_requests(std::vector<MPI_Request>& reqs, const std::string& what) {
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
  FC_CHECK_MPI(MPI_Iallgather(mine.data(), static_cast<int>(kBlock), MPI_CHAR, blocks.data(),
                              static_cast<int>(kBlock), MPI_CHAR, comm_, &req[0]));
  wait_requests(req, missing);
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

}  // namespace fusedcoll::mpi
