#pragma once
// Process mode's device state (docs/gpu.md, "Process mode"): one rank per MPI process, its device,
// its symmetric heap and signal slots shared with same-node peers through IPC handles, shadows of
// the proxied peers' heaps, the proxy's queue in pinned memory, and the proxy itself. A Context in
// process mode holds one (gpu/runtime.hpp); the op launchers carve their buffers from the heap at
// offsets that depend only on agreed arguments, so an offset names the same bytes on every rank.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fusedcoll/detail/validate.hpp"
#include "fusedcoll/env.hpp"
#include "gpu/agreement_codec.hpp"
#include "gpu/proxy.hpp"
#include "gpu/runtime.hpp"
#include "gpu/symmetric.hpp"

namespace fusedcoll::gpu {

struct ProcessSetup {
  MPI_Comm comm = MPI_COMM_NULL;
  int device = -1;  ///< -1: local rank modulo the visible devices
  double timeout_s = 30;
  Env::GpuProxy proxy = Env::GpuProxy::automatic;
};

class Process {
 public:
  /// Collective over `setup.comm` (works on a duplicate): picks and sets the device, allocates and
  /// maps the signal slots, and starts the proxy.
  explicit Process(const ProcessSetup& setup);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  /// Ranks whose kernels share this rank's device (occupancy is divided among them).
  int sharing() const noexcept { return sharing_; }
  const std::vector<process::Route>& routes() const noexcept { return routes_; }

  /// Fills the process-mode fields of a kernel's SyncView.
  void fill(SyncView& v) const;

  /// Every rank's `blob` (index = rank), with a timeout: the call's entry rendezvous, which also
  /// keeps a rank from writing into a peer's heap before that peer has finished its last call.
  std::vector<std::string> exchange(const std::string& blob, const std::string& what);

  /// Collective, with the same value on every rank (from agreed arguments only): makes the
  /// symmetric heap at least `bytes`, mapping the new one into IPC peers and shadowing it for
  /// proxied peers. The caller meets its peers again (`exchange`) before any rank's kernel may
  /// write into a peer's new heap.
  void reserve(std::size_t bytes);
  /// The current heap's id (a put record's buffer) and this rank's heap.
  int heap_id() const noexcept { return heap_id_; }
  unsigned char* heap() const noexcept { return heap_; }
  /// Where this rank's kernels write `peer`'s heap: its IPC mapping, this rank's own heap, or this
  /// rank's shadow of a proxied peer's heap (whose bytes then travel as put records).
  unsigned char* peer_heap(int peer) const;

  /// Collective, with the same `name` and `bytes` on every rank: a symmetric allocation of its
  /// own that lives as long as the Process (users' kernels' buffers, gpu/kernels.cpp, whose
  /// contents survive the heap's growth), zero-filled, mapped into IPC peers and shadowed for
  /// proxied peers like the heap. Returns its id (a put record's buffer).
  int allocate(const std::string& name, std::size_t bytes);
  /// Where this rank's kernels write `peer`'s copy of allocation `id` (as `peer_heap`).
  unsigned char* peer_allocation(int id, int peer) const;

  /// Starts a call: refuses after a failed one (peers' state is unknown then).
  void begin_call(const std::string& op);
  void mark_failed() noexcept { failed_ = true; }
  /// After the kernels: every record the device posted was sent (TimeoutError naming the stuck
  /// peer otherwise).
  void quiesce();
  /// The proxy's view of `slot`, for a wait's timeout report.
  std::string describe(int slot) const;

 private:
  class Memory;
  struct Mapping {
    int peer = 0;
    void* ptr = nullptr;
  };
  void release_heap() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, device_ = 0, sharing_ = 1;
  double timeout_s_ = 30;
  bool failed_ = false;
  std::string op_;
  std::vector<process::Route> routes_;
  std::unique_ptr<process::HandleExchange> handles_;
  // Signal slots: this rank's (device memory, shared), the peers' as mapped, and what the proxy
  // landed (pinned host memory the waits read).
  DeviceBuffer slots_;
  std::vector<std::uint64_t*> peer_slots_;
  std::vector<Mapping> slot_maps_;
  std::uint64_t* inbound_ = nullptr;  // pinned, mapped
  // The heap. heap_mu_ guards what the proxy thread reads of it (Memory::write) against reserve.
  std::mutex heap_mu_;
  DeviceBuffer heap_buf_;
  unsigned char* heap_ = nullptr;
  std::size_t heap_bytes_ = 0;
  int heap_id_ = -1;
  std::vector<unsigned char*> peer_heap_;
  std::vector<Mapping> heap_maps_;
  std::vector<DeviceBuffer> shadows_;
  // allocate()'s buffers (guarded by heap_mu_ like the heap): own bytes, peers' as reached.
  struct Allocation {
    int id = -1;
    DeviceBuffer own;
    std::vector<unsigned char*> peer;
    std::vector<Mapping> maps;
    std::vector<DeviceBuffer> shadows;
  };
  std::vector<Allocation> allocations_;
  // The device's view of the peers: [P] slot pointers and routes.
  DeviceBuffer dev_peer_slots_, dev_routes_;
  // The proxy's queue: the ring and tail pinned, the head in device memory.
  proxy::Record* ring_ = nullptr;
  std::uint64_t* tail_ = nullptr;
  DeviceBuffer head_;
  std::uint64_t capacity_ = 4096;
  std::unique_ptr<Memory> memory_;
  std::unique_ptr<proxy::Proxy> proxy_;
};

/// An operator's three buffers in process mode: out at 0, then recv and stage, at the same offsets
/// of every rank's heap (sizes from agreed fields only, so the same on every rank), each rank's
/// as this rank reaches it (its own heap, an IPC mapping, or its shadow of a proxied peer's).
/// Poisons this rank's output (`out_floats`), then meets the peers ("to start `op`"): no peer
/// stores into it before it is poisoned, nor into a heap that some rank has not finished mapping.
/// Returns recv's offset (a put's target into a peer's recv).
template <class Rank>
std::size_t carve_heap(Process& process, std::vector<Rank>& ranks, std::size_t out_bytes,
                       std::size_t recv_bytes, std::size_t stage_bytes, std::int64_t out_floats,
                       const std::string& op) {
  const std::size_t recv_off = align_up(out_bytes), stage_off = recv_off + align_up(recv_bytes);
  process.reserve(stage_off + align_up(stage_bytes));
  for (int r = 0; r < process.size(); ++r) {
    unsigned char* base = process.peer_heap(r);
    ranks[static_cast<std::size_t>(r)].out = reinterpret_cast<float*>(base);
    ranks[static_cast<std::size_t>(r)].recv = reinterpret_cast<float*>(base + recv_off);
    ranks[static_cast<std::size_t>(r)].stage = reinterpret_cast<float*>(base + stage_off);
  }
  poison_device(ranks[static_cast<std::size_t>(process.rank())].out, out_floats);
  process.exchange("", "to start " + op);
  return recv_off;
}

/// Process mode's entry of a call (agree_calls, gpu/agreement_codec.hpp) over the process's
/// exchange, under its timeout: every rank's call with only its global fields set, this rank's
/// in full.
template <class Args>
std::vector<Args> agree_world(Process& process, const Args& mine, const std::string& op) {
  return agree_calls(process.rank(), process.size(), mine, [&](const std::string& blob) {
    return process.exchange(blob, "to enter " + op);
  });
}

}  // namespace fusedcoll::gpu
