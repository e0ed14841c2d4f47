#pragma once
// How the MPI backend moves bytes (docs/mpi.md, "Transports"): the part of Runtime's put / signal
// / wait that differs between its two transports, and the sending policy that follows from it.
// Runtime (mpi/runtime.hpp) keeps what both share (the data area's layout, slots and their
// targets, symmetric buffers' ids, the workgroup grid, timeouts, tracing) and calls its
// Transport once per put, signal, wait step or poll: whole tiles and slices, never elements.
// - rma (mpi/rma.cpp): one-sided MPI_Put and MPI_Accumulate into MPI windows; needs shared
//   memory or an RDMA network between every pair of ranks.
// - p2p (mpi/p2p.cpp): two-sided messages, coalesced per peer; the one that crosses hosts over
//   TCP.
// Operators never name a transport: they ask it in which order to send to their destinations,
// whether to finish one destination's data before the next, and in what pieces to ship it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fusedcoll::mpi {

class Runtime;

/// Whether the sources of a signal's puts may change after the signal returns (`reused`, the
/// default: the signal waits until MPI has read them) or stay untouched until the call ends
/// (`kept`: a staging area; over p2p the signal then leaves at once, without waiting for the
/// peer to take the data, and `end_call` completes the sends).
enum class Sources { reused, kept };

/// A rate measured call after call: sums of work and of seconds, both halved at every sample, so
/// that recent calls weigh most and one noisy call does not decide. The links' bytes per second
/// (Transport::link_rate) and the kernels' seconds per unit of work
/// (Runtime::compute_seconds_per).
struct DecayedRate {
  double work = 0, secs = 0;
  void add(double w, double s) {
    work = work / 2 + w;
    secs = secs / 2 + s;
  }
  double work_per_second() const { return secs > 0 ? work / secs : 0.0; }
  double seconds_per_work() const { return work > 0 ? secs / work : 0.0; }
};

class Transport {
 public:
  /// Names the data area in `put` and `flush_buffer`; any other id is a symmetric buffer's, or
  /// Runtime::kCallBuffer.
  static constexpr int kDataArea = -1;

  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // ---- Memory. Runtime numbers the buffers and checks the bounds; these make the memory.

  struct Area {
    char* base = nullptr;       ///< Runtime::kSlots slots (u64), then the data area
    bool slots_zeroed = false;  ///< every slot restarted from 0, so must every target
  };
  /// Replaces this rank's data area by one of `data_bytes` (the old contents are lost). Every
  /// rank calls it at the same point with the same size: rma's window is collective.
  virtual Area allocate(std::size_t data_bytes) = 0;
  /// Frees the data area at the runtime's clean end (collective).
  virtual void release() noexcept = 0;
  /// After a failure: leaves to the process's end whatever MPI may still touch (a window the
  /// peers will never free with this rank, memory a receive is posted into).
  virtual void abandon() noexcept = 0;
  /// The memory of symmetric buffer `id`, `bytes` long on this rank (collective).
  virtual char* add_buffer(int id, std::size_t bytes) = 0;
  /// Frees buffer `id`: collectively when `clean`, else as `abandon` does.
  virtual void remove_buffer(int id, bool clean) noexcept = 0;

  // ---- Moving data: Runtime's contracts (mpi/runtime.hpp), after its checks and spans.

  /// Starts putting `bytes` at `src` into `peer`'s `buffer` (kDataArea, a symmetric buffer's id,
  /// or Runtime::kCallBuffer where `lands_anywhere`) at `offset`.
  virtual void put(int buffer, int peer, std::size_t offset, const void* src,
                   std::size_t bytes) = 0;
  /// Completes this thread's puts into `peer`'s symmetric buffer `buffer` at the target.
  virtual void flush_buffer(int buffer, int peer) = 0;
  virtual void signal(int peer, int slot, std::uint64_t add, Sources sources) = 0;
  virtual void signal_all(const std::vector<int>& peers, int slot, std::uint64_t add,
                          Sources sources) = 0;
  /// The current value of this rank's `slot`, driving progress.
  virtual std::uint64_t read_slot(int slot) = 0;
  /// Before this rank blocks (a wait, the argument exchange): nothing a peer waits for may stay
  /// held back here.
  virtual void before_wait() = 0;
  /// After a wait saw its target: makes the data the signallers put visible to this thread.
  virtual void after_wait() = 0;
  /// Runtime::poll: a progress poke between tiles; never waits.
  virtual void poll() = 0;
  /// Runtime::end_call's share: completes what this rank sent in the call.
  virtual void end_call() = 0;
  /// For a timeout's message: the peer that has not taken what this rank sent, as
  /// " (rank 3 has not received all of it)", or "" when nothing is outstanding.
  virtual std::string unfinished() = 0;

  // ---- Policy: what the fused operators ask instead of naming a transport.

  /// The order in which `rank` sends to its destinations, every rank once and `rank` itself last.
  /// Any rank's, the same on every rank: receivers wait for their sources in the order those
  /// send to them.
  virtual std::vector<int> destinations(int rank) const = 0;
  /// Whether fused kernels should finish their data for one destination after another, so that
  /// each destination's part leaves while the rest is computed (where wire time is comparable
  /// to the compute), rather than keep compute locality and let everything leave at the end.
  virtual bool destination_by_destination() const = 0;
  /// Whether peers may put into any memory of this rank during a call (Runtime::bind_call_buffer),
  /// not only into windows.
  virtual bool lands_anywhere() const = 0;
  /// The size of the pieces in which a kernel should ship its data for `peer` as it completes,
  /// or 0 to ship it whole. `leaving`: the bytes this rank sends to other hosts in the call;
  /// `crossing`: the bytes its host sends to other hosts in the call.
  virtual std::size_t piece_bytes(int peer, std::int64_t leaving,
                                  std::int64_t crossing) const = 0;

  /// The rate, in bytes per second, at which this rank has received from `peer`'s host, as its
  /// transport measures it (p2p: Runtime::end_call adds each call's samples; mpi/p2p.cpp says
  /// which); 0 until measured, always under rma unless assumed. A sender may read it as its share
  /// of its own link to that host (links are symmetric in the clusters this backend runs on; the
  /// host's other ranks share it alike) and decide alone how to ship data there. Host thread
  /// only, outside a launch.
  double link_rate(int peer) const;
  /// Sets link_rate for `peer`'s host as if measured (later measurements go on from it): for a
  /// caller that knows its links, and for tests of both sides of a decision taken on it.
  void assume_link_rate(int peer, double bytes_per_s);

 protected:
  explicit Transport(Runtime& rt) : rt_(rt) {}
  /// Adds one call's samples of `bytes` received from host h in `secs` (index = host): sums
  /// halved at every call that adds a sample, so one noisy call does not decide.
  void add_link_samples(const std::vector<double>& bytes, const std::vector<double>& secs);

  Runtime& rt_;

 private:
  std::vector<DecayedRate> host_links_;  // per host, bytes; host thread
};

/// The transports (mpi/rma.cpp, mpi/p2p.cpp), for `rt` once its communicator and hosts are set.
std::unique_ptr<Transport> make_rma(Runtime& rt);
std::unique_ptr<Transport> make_p2p(Runtime& rt);

}  // namespace fusedcoll::mpi
