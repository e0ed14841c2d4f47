#pragma once
// The host proxy's request queue (docs/gpu.md, "Process mode"): a ring of fixed-size records in
// host memory (pinned and mapped into the device on a GPU) that device blocks write and one proxy
// thread per process drains. Written once as plain code over an `Ops` policy of atomics, so the
// GPU's producers (port:: atomics, gpu/runtime.hpp) and the CPU suite's fake device (std::atomic,
// tests/gpu_proxy_queue_test.cpp) run the same protocol.
//
// Protocol (multi-producer, single consumer, bounded):
// - A producer takes a ticket t with a fetch-add on `head` (device memory on a GPU: a device-scope
//   atomic, no bus round trip), waits until `tail + capacity > t` (the record t - capacity was
//   consumed), writes record t % capacity, then publishes it by storing `seq = t + 1` with
//   release semantics (on a GPU a system-scope fence first, so the host sees the fields before
//   `seq`).
// - The proxy reads records strictly in ticket order: record `tail` is ready when its `seq` equals
//   tail + 1 (acquire); after taking it, the proxy stores tail + 1 (release), which frees the slot
//   for ticket tail + capacity.
// - Ordering rule: a producer that posts a put and then a signal to the same peer takes the put's
//   ticket first; the proxy sends records to a peer in ticket order and the peer lands them in
//   that order (gpu/proxy.hpp), so a signal is delivered only after that producer's earlier puts
//   to that peer have landed. Producers that must order their records across each other do it as
//   on the IPC path: with a done-counter, before posting.
// - A producer that finds the ring full for longer than its timeout gives up (returns false):
//   its ticket then stays unwritten, the proxy stops at it, and the call fails with the
//   producer's timeout record (the proxy is reset with the slots).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FC_PROXY_HD __host__ __device__
#else
#define FC_PROXY_HD
#endif

namespace fusedcoll::gpu::proxy {

enum class Kind : std::uint32_t {
  put = 1,  ///< `bytes` from this process's address `src` into `peer`'s buffer `buffer` at `offset`
  signal = 2,  ///< `peer`'s slot `slot` += `value`
};

/// How a signal record updates its slot (the public device API's SignalOp).
enum class SignalOp : std::uint32_t {
  add = 0,  ///< slot += value
  set = 1,  ///< slot = value (a flag: a slot set through the proxy takes no adds through it too)
};

/// One request, one 64-byte line: written by one producer thread, read once by the proxy.
struct alignas(64) Record {
  std::uint64_t seq;      ///< ticket + 1 once every other field is written
  std::uint32_t kind;     ///< Kind
  std::int32_t peer;      ///< destination rank
  std::int32_t buffer;    ///< put: the peer's symmetric buffer id
  std::int32_t slot;      ///< signal: the peer's slot id
  std::uint64_t offset;   ///< put: byte offset in the peer's buffer
  std::uint64_t src;      ///< put: source address in this process (device memory on a GPU)
  std::uint64_t bytes;    ///< put: length
  std::uint64_t value;    ///< signal: the add, or the value set
  std::int32_t producer;  ///< block (or producer thread) id, for reports
  std::uint32_t op;       ///< signal: SignalOp
};
static_assert(sizeof(Record) == 64, "one record per 64-byte line");

/// The queue as producers see it. `ring` and `tail` are host memory; `head` may be device memory.
struct QueueView {
  Record* ring = nullptr;
  std::uint64_t capacity = 0;           ///< a power of two
  std::uint64_t* head = nullptr;        ///< next ticket (producers' fetch-add)
  const std::uint64_t* tail = nullptr;  ///< records consumed (the proxy's release store)
  std::uint64_t timeout_ticks = 0;  ///< in Ops::clock() ticks: how long a full ring is waited on
};

/// The record of ticket `t`.
FC_PROXY_HD inline Record& record_at(const QueueView& q, std::uint64_t t) {
  return q.ring[t & (q.capacity - 1)];
}

/// Posts `r` (its `seq` is ignored): takes a ticket, waits for room, writes the record and
/// publishes it. Returns false if the ring stayed full past `q.timeout_ticks` (the proxy is stuck
/// or gone). `Ops` provides fetch_add(u64*, u64) -> old, load_acquire(const u64*),
/// publish(u64* seq, u64 v) (release store, fenced so the host sees the record first), clock()
/// and pause().
template <class Ops>
FC_PROXY_HD inline bool post(const QueueView& q, const Record& r) {
  const std::uint64_t t = Ops::fetch_add(q.head, 1);
  if (Ops::load_acquire(q.tail) + q.capacity <= t) {
    const std::uint64_t t0 = Ops::clock();
    while (Ops::load_acquire(q.tail) + q.capacity <= t) {
      if (Ops::clock() - t0 > q.timeout_ticks) return false;
      Ops::pause();
    }
  }
  Record& dst = record_at(q, t);
  dst.kind = r.kind;
  dst.peer = r.peer;
  dst.buffer = r.buffer;
  dst.slot = r.slot;
  dst.offset = r.offset;
  dst.src = r.src;
  dst.bytes = r.bytes;
  dst.value = r.value;
  dst.producer = r.producer;
  dst.op = r.op;
  Ops::publish(&dst.seq, t + 1);
  return true;
}

/// A put record (src: this process's address of the bytes).
FC_PROXY_HD inline Record make_put(int peer, int buffer, std::uint64_t offset, std::uint64_t src,
                                   std::uint64_t bytes, int producer) {
  Record r{};
  r.kind = static_cast<std::uint32_t>(Kind::put);
  r.peer = peer;
  r.buffer = buffer;
  r.offset = offset;
  r.src = src;
  r.bytes = bytes;
  r.producer = producer;
  return r;
}

/// A signal record: `peer`'s slot += value (or = value with SignalOp::set).
FC_PROXY_HD inline Record make_signal(int peer, int slot, std::uint64_t value, int producer,
                                      SignalOp op = SignalOp::add) {
  Record r{};
  r.op = static_cast<std::uint32_t>(op);
  r.kind = static_cast<std::uint32_t>(Kind::signal);
  r.peer = peer;
  r.slot = slot;
  r.value = value;
  r.producer = producer;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Host side.

/// The proxy's end of a queue: takes records strictly in ticket order.
class QueueReader {
 public:
  /// `tail` is the queue's consumed counter (the memory `q.tail` points to), written only here.
  QueueReader(const QueueView& q, std::uint64_t* tail) : q_(q), tail_(tail) {}
  /// The next record, if its producer has published it.
  bool pop(Record& out) {
    const std::uint64_t t = std::atomic_ref<std::uint64_t>(*tail_).load(std::memory_order_relaxed);
    Record& r = record_at(q_, t);
    if (std::atomic_ref<std::uint64_t>(r.seq).load(std::memory_order_acquire) != t + 1)
      return false;
    out = r;
    // Frees the line for ticket t + capacity: its producer writes only after seeing this.
    std::atomic_ref<std::uint64_t>(*tail_).store(t + 1, std::memory_order_release);
    return true;
  }
  /// Records taken so far (cumulative).
  std::uint64_t taken() const noexcept {
    return std::atomic_ref<std::uint64_t>(*tail_).load(std::memory_order_acquire);
  }

 private:
  QueueView q_;
  std::uint64_t* tail_;
};

/// Producers on host threads (the CPU suite's fake device): std::atomic_ref on the queue's words,
/// nanoseconds of steady_clock.
struct HostOps {
  static std::uint64_t fetch_add(std::uint64_t* p, std::uint64_t v) {
    return std::atomic_ref<std::uint64_t>(*p).fetch_add(v, std::memory_order_relaxed);
  }
  static std::uint64_t load_acquire(const std::uint64_t* p) {
    return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(p))
        .load(std::memory_order_acquire);
  }
  static void publish(std::uint64_t* seq, std::uint64_t v) {
    std::atomic_ref<std::uint64_t>(*seq).store(v, std::memory_order_release);
  }
  static std::uint64_t clock() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }
  static void pause() { std::this_thread::yield(); }
};

}  // namespace fusedcoll::gpu::proxy
