// Process mode's bootstrap (gpu/symmetric.hpp).

#include "gpu/symmetric.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "fusedcoll/error.hpp"

namespace fusedcoll::gpu::process {
namespace {

/// One rank's entry of an exchange: what it allocated, as its number `seq`.
struct Entry {
  std::int64_t seq;
  std::uint64_t bytes;
  char name[48];
  IpcHandle handle;
};

}  // namespace

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw BackendError(detail::make_string(
      "fusedcoll gpu: ", call, " failed: ", std::string(text, static_cast<std::size_t>(len))));
}

const char* to_string(Route r) noexcept {
  switch (r) {
    case Route::self:
      return "self";
    case Route::ipc:
      return "ipc";
    case Route::proxy:
      return "proxy";
  }
  return "?";
}

std::vector<int> node_of(MPI_Comm comm) {
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  // The node's name is the lowest rank on it; then numbered by first rank.
  int first = rank;
  check_mpi(MPI_Allreduce(&rank, &first, 1, MPI_INT, MPI_MIN, node), "MPI_Allreduce");
  MPI_Comm_free(&node);
  std::vector<int> firsts(static_cast<std::size_t>(size));
  check_mpi(MPI_Allgather(&first, 1, MPI_INT, firsts.data(), 1, MPI_INT, comm), "MPI_Allgather");
  std::vector<int> out(static_cast<std::size_t>(size));
  std::vector<int> seen;
  for (int r = 0; r < size; ++r) {
    const int f = firsts[static_cast<std::size_t>(r)];
    const auto it = std::find(seen.begin(), seen.end(), f);
    out[static_cast<std::size_t>(r)] = static_cast<int>(it - seen.begin());
    if (it == seen.end()) seen.push_back(f);
  }
  return out;
}

std::vector<Route> routes(const std::vector<int>& node_of, int me, Env::GpuProxy mode) {
  const int P = static_cast<int>(node_of.size());
  FC_ENFORCE(me >= 0 && me < P, "rank ", me, " of ", P);
  std::vector<Route> out(static_cast<std::size_t>(P), Route::ipc);
  for (int q = 0; q < P; ++q) {
    Route& r = out[static_cast<std::size_t>(q)];
    const bool same = node_of[static_cast<std::size_t>(q)] == node_of[static_cast<std::size_t>(me)];
    if (q == me)
      r = Route::self;
    else if (mode == Env::GpuProxy::all || !same)
      r = Route::proxy;
    if (r == Route::proxy && mode == Env::GpuProxy::off)
      throw InvalidArgument(detail::make_string(
          "fusedcoll gpu: rank ", q, " is on node ", node_of[static_cast<std::size_t>(q)],
          " and rank ", me, " on node ", node_of[static_cast<std::size_t>(me)],
          ": no IPC mapping reaches it and FUSEDCOLL_GPU_PROXY=off forbids the host proxy"));
  }
  return out;
}

int local_rank(const std::vector<int>& node_of, int me) {
  int n = 0;
  for (int r = 0; r < me; ++r)
    n += node_of[static_cast<std::size_t>(r)] == node_of[static_cast<std::size_t>(me)];
  return n;
}

int local_size(const std::vector<int>& node_of, int me) {
  return static_cast<int>(
      std::count(node_of.begin(), node_of.end(), node_of[static_cast<std::size_t>(me)]));
}

int pick_device(int requested, int local_rank, int visible) {
  if (visible <= 0) throw UnsupportedError("fusedcoll gpu: no device visible");
  if (requested >= 0) {
    if (requested >= visible)
      throw InvalidArgument(detail::make_string("fusedcoll gpu: device ", requested,
                                                " requested, but only ", visible, " visible"));
    return requested;
  }
  return local_rank % visible;
}

namespace {

/// Completes `req`, polling, or throws TimeoutError after `timeout_s`.
void wait_for(MPI_Request& req, int rank, double timeout_s, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s)
      // The request stays pending: the caller's communicator is unusable from here on.
      throw TimeoutError(detail::make_string("fusedcoll gpu: rank ", rank, " waited more than ",
                                             timeout_s, " s (FUSEDCOLL_TIMEOUT) for every rank ",
                                             what, ": some rank never joined"));
    if (polls > 100) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace

std::vector<std::string> allgather_bytes(MPI_Comm comm, const std::string& blob, double timeout_s,
                                         const std::string& what) {
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const int mine = static_cast<int>(blob.size());
  std::vector<int> lens(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(&mine, 1, MPI_INT, lens.data(), 1, MPI_INT, comm, &req),
            "MPI_Iallgather");
  wait_for(req, rank, timeout_s, what);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += lens[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  check_mpi(MPI_Iallgatherv(blob.data(), mine, MPI_BYTE, all.data(), lens.data(), displs.data(),
                            MPI_BYTE, comm, &req),
            "MPI_Iallgatherv");
  wait_for(req, rank, timeout_s, what);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r)
    out.push_back(all.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
                             static_cast<std::size_t>(lens[static_cast<std::size_t>(r)])));
  return out;
}

HandleExchange::HandleExchange(MPI_Comm comm, double timeout_s)
    : comm_(comm), timeout_s_(timeout_s) {
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

std::vector<IpcHandle> HandleExchange::exchange(const std::string& name, std::size_t bytes,
                                                const IpcHandle& mine) {
  Entry e{};
  e.seq = count_;
  e.bytes = bytes;
  std::strncpy(e.name, name.c_str(), sizeof e.name - 1);
  e.handle = mine;
  const std::vector<std::string> blobs =
      allgather_bytes(comm_, std::string(reinterpret_cast<const char*>(&e), sizeof e), timeout_s_,
                      detail::make_string("to make symmetric allocation #", count_, " ('", name,
                                          "', ", bytes, " bytes)"));
  std::vector<Entry> all(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    FC_CHECK_INTERNAL(blobs[static_cast<std::size_t>(r)].size() == sizeof(Entry),
                      "symmetric allocation entry of rank ", r);
    std::memcpy(&all[static_cast<std::size_t>(r)], blobs[static_cast<std::size_t>(r)].data(),
                sizeof(Entry));
  }
  ++count_;
  bool agree = true;
  for (const Entry& x : all)
    agree = agree && x.seq == e.seq && x.bytes == e.bytes &&
            std::strncmp(x.name, e.name, sizeof e.name) == 0;
  if (!agree) {
    std::ostringstream os;
    os << "fusedcoll gpu: symmetric allocation #" << e.seq
       << " does not agree across ranks (every rank must allocate the same buffers, of the same "
          "sizes, in the same order):";
    for (int r = 0; r < size_; ++r) {
      const Entry& x = all[static_cast<std::size_t>(r)];
      os << (r == 0 ? " " : ", ") << "rank " << r << " #" << x.seq << " '"
         << std::string(x.name, strnlen(x.name, sizeof x.name)) << "' of " << x.bytes << " bytes";
    }
    throw InvalidArgument(os.str());
  }
  std::vector<IpcHandle> out;
  out.reserve(all.size());
  for (const Entry& x : all) out.push_back(x.handle);
  return out;
}

}  // namespace fusedcoll::gpu::process
