#pragma once
// The host proxy of the GPU backend's process mode (docs/gpu.md, "Process mode"): one thread per
// process that drains the request queue its device's blocks write (gpu/proxy_queue.hpp), sends
// the puts and signals to peers with MPI two-sided messages, and lands what peers send into this
// process's device memory. It serves the peers that no IPC mapping reaches (other nodes, or every
// peer under FUSEDCOLL_GPU_PROXY=all), so the kernels stay the same: a block that would store into
// a mapped peer address posts a put record instead, and a signal record instead of a remote
// atomic.
//
// Plain host code over MPI (no GPU types): the device is reached through `DeviceMemory`, which the
// GPU backend implements with its copy engine and a pinned signal mirror (gpu/process.cpp) and the
// CPU suite with host memory (tests/mpi/gpu_proxy_test.cpp), so the queue, the wire format, the
// ordering and the timeouts are tested where there is no GPU.
//
// Wire: the records for one peer are coalesced into messages of at most `batch_bytes` (a put's
// bytes travel inside, read from the device when the record is taken; a larger put is split into
// pieces), all under one tag on the proxy's own duplicate of the communicator. MPI does not
// overtake messages of one source, tag and communicator, and the receiver applies each message's
// records in order, landing a put before it applies a later signal: that is the queue's ordering
// rule, carried end to end. The same shape as the MPI backend's p2p transport (mpi/p2p.cpp:
// coalesced control records, signals after the puts before them), reduced to what a proxy needs:
// its data comes from device memory through a host copy either way, so there are no zero-copy
// large puts. Not that transport itself: it lands only in mpi::Runtime's host memory and needs
// the MPI backend's oneTBB, which GPU machines lack (docs/gpu.md, "The host proxy").

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu/proxy_queue.hpp"

namespace fusedcoll::gpu::proxy {

/// What the proxy touches in its own process's device memory. Called from the proxy thread only.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// Copies `bytes` at this process's address `src` (a put record's source) into host `dst`.
  virtual void read(std::uint64_t src, void* dst, std::size_t bytes) = 0;
  /// Lands `bytes` a peer put into this process's symmetric buffer `buffer` at `offset`. Throws
  /// InternalError if the range is not inside the buffer.
  virtual void write(int buffer, std::uint64_t offset, const void* src, std::size_t bytes) = 0;
  /// Updates this process's slot `slot` (adds `value`, or sets it), visible to the device only
  /// once every earlier `write` is (put before signal).
  virtual void signal(int slot, std::uint64_t value, SignalOp op) = 0;
};

struct Options {
  /// Longest a peer may leave a message of ours unreceived, and `quiesce` may wait, in seconds.
  double timeout_s = 30;
  /// Largest message: records for one peer are coalesced up to this; larger puts go in pieces.
  std::size_t batch_bytes = std::size_t{1} << 20;
};

/// One process's proxy thread and its MPI traffic.
class Proxy {
 public:
  /// Collective over `comm` (the proxy works on its own duplicate of it; MPI must provide
  /// MPI_THREAD_MULTIPLE, else BackendError). Starts the thread, which drains `queue` (whose
  /// `tail` it writes) and lands inbound traffic through `memory`, until destruction.
  Proxy(MPI_Comm comm, const QueueView& queue, std::uint64_t* tail, DeviceMemory& memory,
        Options options);
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  /// Returns once the first `posted` records of the queue have been taken and sent, and MPI is
  /// done with every message sent (the peer matched it, or MPI buffered it eagerly). Throws
  /// TimeoutError past the timeout, naming what is missing: a record no producer published, or the
  /// peer whose proxy has not received; rethrows the proxy thread's own error (a malformed record,
  /// an MPI failure).
  void quiesce(std::uint64_t posted);

  /// What this proxy knows about its slot `slot`, for a wait's timeout report: the signals that
  /// arrived on it through the proxy and from whom, when each peer last sent anything, and which
  /// peers have not received what this proxy sent them.
  std::string describe(int slot) const;

  /// Signals landed on `slot` through the proxy so far, from `source`.
  std::uint64_t landed(int slot, int source) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Send {
    std::vector<char> msg;
    MPI_Request req = MPI_REQUEST_NULL;
    int peer = 0;
    Clock::time_point started;
  };
  struct PeerState {
    std::vector<char> outbox;  // records not sent yet (proxy thread)
    std::uint64_t messages_sent = 0, bytes_sent = 0;
    std::uint64_t messages_received = 0;
    Clock::time_point last_received{};  // epoch: never
    int open_sends = 0;
    std::uint64_t open_bytes = 0;
    Clock::time_point oldest_open{};
  };

  void loop() noexcept;
  void take(const Record& r);
  void append(int peer, const void* header, std::size_t n, std::uint64_t src, std::size_t bytes);
  void ship(int peer);
  void ship_all();
  bool reap_sends();
  bool receive();
  void apply(const char* msg, std::size_t bytes, int source);
  void check_timeouts();
  void fail(std::exception_ptr e) noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  QueueReader reader_;
  DeviceMemory& memory_;
  Options options_;
  std::vector<PeerState> peers_;  // guarded by mu_ where the host thread reads them
  std::vector<Send> sends_;       // proxy thread only
  std::vector<char> inbox_;       // proxy thread only
  std::map<int, std::vector<std::uint64_t>> landed_;  // slot -> per source; mu_
  std::uint64_t shipped_through_ = 0;  // tickets whose records are in sent messages; mu_
  mutable std::mutex mu_;
  std::exception_ptr error_;  // mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fusedcoll::gpu::proxy
