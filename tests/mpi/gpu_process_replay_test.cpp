// The GPU backend's collectives in process mode, replayed on the CPU under mpiexec (label mpi):
// every collective's process-mode traffic through the host proxies and through emulated IPC
// mappings, each rank's output memcmp-equal to ref/'s. What runs is the host code the GPU's
// launcher runs (gpu/collective_process.hpp: process_plan, heap_layout, resolve_process,
// amax_runs_of / merge_amax; agree_calls from gpu/agreement_codec.hpp) and the device's per-item
// protocol (gpu/collective_exec.hpp: run_item over run_step); only the device is faked: one
// process per rank, its blocks host threads, its symmetric heap and signal slots in MPI shared
// memory (MPI_Win_allocate_shared over the node, the IPC mapping of a same-node peer), a shadow
// of each proxied peer's heap in its own memory, and the proxy (gpu/proxy.hpp) landing bytes in
// the heap and signals in counters that a wait adds to its slot, as on the GPU.
//
// Routes: every peer through the proxy (FUSEDCOLL_GPU_PROXY=all), every same-node peer through
// IPC (auto on one host), and pairs of ranks as "nodes" (IPC within a pair, the proxy across).
// The grids are every backend's (tests/common/collective_cases.hpp, compressed_cases.hpp). A peer
// that never signals ends in a timeout naming the waiting rank, the slot by name, expected and
// observed, and what the proxy got on that slot from whom, instead of a hang.

#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/collective_cases.hpp"
#include "common/compressed_cases.hpp"
#include "common/op_cases.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/inputs.hpp"
#include "gpu/agreement_codec.hpp"
#include "gpu/collective_exec.hpp"
#include "gpu/collective_plan.hpp"
#include "gpu/collective_process.hpp"
#include "gpu/gemv_setup.hpp"
#include "gpu/proxy.hpp"
#include "gpu/symmetric.hpp"
#include "tests/common/mpi_gtest.hpp"

namespace {

namespace fc = fusedcoll;
namespace coll = fusedcoll::gpu::coll;
namespace px = fusedcoll::gpu::proxy;
namespace gp = fusedcoll::gpu::process;
namespace gplan = fusedcoll::detail::gemv;
using namespace fctest::collectives;

constexpr int kSlots = 1 << 14;
constexpr int kBlocks = 2;  // host threads per rank: several blocks share a rank's steps

enum class Routes { proxy, ipc, pairs };

std::string name_of(Routes r) {
  return r == Routes::proxy ? "proxy" : r == Routes::ipc ? "ipc" : "pairs";
}

std::uint64_t load(const std::uint64_t& v) {
  return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(v))
      .load(std::memory_order_acquire);
}

/// One rank's device as process mode sees it (gpu/process.hpp's Process, on host memory).
class FakeProcess final : public px::DeviceMemory {
 public:
  FakeProcess(Routes routes, double timeout_s) : timeout_s_(timeout_s) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    const std::vector<int> real = gp::node_of(comm_);
    std::vector<int> nodes = real;
    if (routes == Routes::pairs)  // a node per two ranks of a real node
      for (int r = 0; r < size_; ++r)
        nodes[static_cast<std::size_t>(r)] =
            real[static_cast<std::size_t>(r)] * size_ + gp::local_rank(real, r) / 2;
    routes_ =
        gp::routes(nodes, rank_,
                   routes == Routes::proxy ? fc::Env::GpuProxy::all : fc::Env::GpuProxy::automatic);
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_);
    MPI_Group world_group, node_group;
    MPI_Comm_group(comm_, &world_group);
    MPI_Comm_group(node_, &node_group);
    node_rank_.assign(static_cast<std::size_t>(size_), MPI_UNDEFINED);
    for (int q = 0; q < size_; ++q)
      MPI_Group_translate_ranks(world_group, 1, &q, node_group,
                                &node_rank_[static_cast<std::size_t>(q)]);
    MPI_Group_free(&world_group);
    MPI_Group_free(&node_group);
    MPI_Info_create(&info_);
    MPI_Info_set(info_, "alloc_shared_noncontig", "true");

    // Signal slots in shared memory, zeroed before any peer can add (the barrier).
    void* base = nullptr;
    MPI_Win_allocate_shared(kSlots * 8, 8, info_, node_, &base, &slot_win_);
    slots_ = static_cast<std::uint64_t*>(base);
    std::memset(slots_, 0, kSlots * 8);
    MPI_Barrier(node_);
    peer_slots_ = map(slot_win_, slots_);
    inbound_.assign(kSlots, 0);

    ring_.resize(capacity_);
    queue_.ring = ring_.data();
    queue_.capacity = capacity_;
    queue_.head = &head_;
    queue_.tail = &tail_;
    queue_.timeout_ticks = static_cast<std::uint64_t>(timeout_s * 1e9);
    px::Options o;
    o.timeout_s = timeout_s;
    proxy_ = std::make_unique<px::Proxy>(comm_, queue_, &tail_, *this, o);
  }

  ~FakeProcess() override {
    MPI_Barrier(comm_);  // every rank's traffic has landed before any proxy or window goes
    proxy_.reset();
    if (heap_win_ != MPI_WIN_NULL) MPI_Win_free(&heap_win_);
    MPI_Win_free(&slot_win_);
    MPI_Info_free(&info_);
    MPI_Comm_free(&node_);
    MPI_Comm_free(&comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool proxied(int q) const { return routes_[static_cast<std::size_t>(q)] == gp::Route::proxy; }
  double timeout_s() const { return timeout_s_; }
  px::Proxy& proxy() { return *proxy_; }

  /// Process::exchange.
  std::vector<std::string> exchange(const std::string& blob, const std::string& what) {
    return gp::allgather_bytes(comm_, blob, timeout_s_, what);
  }

  /// Process::reserve: collective, the same size on every rank.
  void reserve(std::size_t bytes) {
    if (bytes <= heap_bytes_ && heap_win_ != MPI_WIN_NULL) return;
    const std::size_t want = std::max<std::size_t>(bytes * 2, std::size_t{1} << 16);
    const std::lock_guard<std::mutex> lock(heap_mu_);
    if (heap_win_ != MPI_WIN_NULL) MPI_Win_free(&heap_win_);
    void* base = nullptr;
    MPI_Win_allocate_shared(static_cast<MPI_Aint>(want), 16, info_, node_, &base, &heap_win_);
    heap_ = static_cast<unsigned char*>(base);
    heap_bytes_ = want;
    ++heap_id_;
    MPI_Barrier(node_);
    peer_heap_ = map(heap_win_, heap_);
    shadows_.clear();
    for (int q = 0; q < size_; ++q)
      if (proxied(q)) {
        shadows_.emplace_back((want + 15) / 16);
        peer_heap_[static_cast<std::size_t>(q)] =
            reinterpret_cast<unsigned char*>(shadows_.back().data());
      }
  }
  int heap_id() const { return heap_id_; }
  const std::vector<unsigned char*>& peer_heap() const { return peer_heap_; }

  // The device side of a block (gpu/runtime.hpp's block_wait / block_put / block_signal).
  std::uint64_t slot_value(int slot) const {
    return load(slots_[slot]) + load(inbound_[static_cast<std::size_t>(slot)]);
  }
  void post(const px::Record& r) {
    if (!px::post<px::HostOps>(queue_, r)) throw fc::InternalError("the proxy's queue stayed full");
  }
  void add(int q, int slot, std::uint64_t value = 1, px::SignalOp op = px::SignalOp::add) {
    std::atomic_ref<std::uint64_t> v(peer_slots_[static_cast<std::size_t>(q)][slot]);
    if (op == px::SignalOp::set)
      v.store(value, std::memory_order_release);
    else
      v.fetch_add(value, std::memory_order_release);
  }
  /// This rank's own slot, a block's fetch-add (block_fetch_add: the slot plus what the proxy
  /// landed on it).
  std::uint64_t fetch_add(int slot, std::uint64_t value) {
    return std::atomic_ref<std::uint64_t>(slots_[slot])
               .fetch_add(value, std::memory_order_acq_rel) +
           load(inbound_[static_cast<std::size_t>(slot)]);
  }
  std::uint64_t posted() const { return load(head_); }

  // px::DeviceMemory: what the proxy lands.
  void read(std::uint64_t src, void* dst, std::size_t bytes) override {
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  }
  void write(int buffer, std::uint64_t offset, const void* src, std::size_t bytes) override {
    const std::lock_guard<std::mutex> lock(heap_mu_);
    FC_CHECK_INTERNAL(buffer == heap_id_ && offset + bytes <= heap_bytes_, "rank ", rank_,
                      ": a put into heap ", buffer, " at ", offset, " + ", bytes, " (the heap is ",
                      heap_id_, ", ", heap_bytes_, " bytes)");
    std::memcpy(heap_ + offset, src, bytes);
  }
  void signal(int slot, std::uint64_t value, px::SignalOp op) override {
    FC_CHECK_INTERNAL(slot >= 0 && slot < kSlots, "proxied signal slot ", slot);
    std::atomic_ref<std::uint64_t> v(inbound_[static_cast<std::size_t>(slot)]);
    if (op == px::SignalOp::set)
      v.store(value, std::memory_order_release);
    else
      v.fetch_add(value, std::memory_order_release);
  }

 private:
  /// Every rank's base of a shared window as this rank reaches it (null: not mapped here).
  template <class T>
  std::vector<T*> map(MPI_Win win, T* own) {
    std::vector<T*> at(static_cast<std::size_t>(size_), nullptr);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) {
        at[static_cast<std::size_t>(q)] = own;
      } else if (routes_[static_cast<std::size_t>(q)] == gp::Route::ipc) {
        MPI_Aint bytes = 0;
        int unit = 0;
        void* p = nullptr;
        MPI_Win_shared_query(win, node_rank_[static_cast<std::size_t>(q)], &bytes, &unit, &p);
        at[static_cast<std::size_t>(q)] = static_cast<T*>(p);
      }
    }
    return at;
  }

  double timeout_s_;
  MPI_Comm comm_ = MPI_COMM_NULL, node_ = MPI_COMM_NULL;
  MPI_Info info_ = MPI_INFO_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<gp::Route> routes_;
  std::vector<int> node_rank_;
  MPI_Win slot_win_ = MPI_WIN_NULL, heap_win_ = MPI_WIN_NULL;
  std::uint64_t* slots_ = nullptr;
  std::vector<std::uint64_t*> peer_slots_;
  std::vector<std::uint64_t> inbound_;
  std::mutex heap_mu_;
  unsigned char* heap_ = nullptr;
  std::size_t heap_bytes_ = 0;
  int heap_id_ = -1;
  std::vector<unsigned char*> peer_heap_;
  std::vector<std::vector<coll::exec::Unit16>> shadows_;
  std::uint64_t capacity_ = 256;
  std::vector<px::Record> ring_;
  px::QueueView queue_;
  std::uint64_t head_ = 0, tail_ = 0;
  std::unique_ptr<px::Proxy> proxy_;
};

/// A slot's name in a report: `'name'[i]` of the call's reservations, or "unnamed".
std::string slot_name(const std::vector<coll::SlotRange>& ranges, int rel) {
  for (const coll::SlotRange& r : ranges)
    if (rel >= r.base && rel < r.base + r.count)
      return fc::detail::make_string("'", r.name, "'[", rel - r.base, "]");
  return "unnamed";
}

/// A block's transport for run_item: the kernel's BlockIo (gpu/collectives.cpp) on the fake.
struct HostIo {
  FakeProcess& dev;
  int me, block;
  std::atomic<bool>& abandoned;
  std::string& failure;
  std::mutex& failure_mu;
  const coll::Plan& plan;
  int slot0;         // the call's first slot: the plan's slot ids are relative to it
  int drop_to = -1;  // a rank this rank's signals never reach (the missing-signal test)

  bool wait(int slot, std::uint64_t target) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t v = 0;
    while ((v = dev.slot_value(slot)) < target) {
      if (abandoned.load(std::memory_order_acquire)) return false;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
          dev.timeout_s()) {
        const std::lock_guard<std::mutex> lock(failure_mu);
        if (failure.empty()) {
          const std::string name = slot_name(plan.slots, slot - slot0);
          failure = fc::detail::make_string("timeout in ", plan.name, ": rank ", me, " block ",
                                            block, " waited more than ", dev.timeout_s(),
                                            " s for slot ", slot, " (", name, ") >= ", target,
                                            ", observed ", v, "; ", dev.proxy().describe(slot));
        }
        abandoned.store(true, std::memory_order_release);
        return false;
      }
      std::this_thread::yield();
    }
    return true;
  }
  void run(const coll::Exec& x, const coll::XStep& s) {
    for (int tid = 0; tid < 3; ++tid) coll::run_step(x, s, tid, 3);  // a block's threads
  }
  void put(int peer, std::uint64_t offset, const unsigned char* src, std::uint64_t bytes) {
    FC_CHECK_INTERNAL(dev.proxied(peer), "a put for rank ", peer, ", which is not proxied");
    dev.post(px::make_put(peer, dev.heap_id(), offset, reinterpret_cast<std::uint64_t>(src), bytes,
                          block));
  }
  void signal(int rank, int slot) {
    if (rank == drop_to) return;
    if (rank != me && dev.proxied(rank))
      dev.post(px::make_signal(rank, slot, 1, block));
    else
      dev.add(rank, slot);
  }
};

/// A block's failure: where the first one is recorded, and the flag the other blocks leave on.
struct Failures {
  std::atomic<bool> abandoned{false};
  std::string first;
  std::mutex mu;
};

/// A kernel body's coroutine (fusedcoll/kernel.hpp's FC_WAIT_UNTIL and FC_CLAIM co_await on the
/// CPU) that runs to its end inside the call: HostWg's waits and claims are ready when awaited
/// (the host thread spins in them, as a GPU block's threads do), so it never suspends. A wait
/// that times out ends the body by throwing, kept here.
struct SyncTask {
  struct promise_type {
    std::exception_ptr error;
    SyncTask get_return_object() {
      return SyncTask{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };
  std::coroutine_handle<promise_type> h;
  SyncTask(SyncTask&& o) noexcept : h(std::exchange(o.h, {})) {}
  explicit SyncTask(std::coroutine_handle<promise_type> c) : h(c) {}
  ~SyncTask() {
    if (h) h.destroy();
  }
  /// The body's end: rethrows what ended it early.
  void get() const {
    if (h.promise().error) std::rethrow_exception(h.promise().error);
  }
};

/// What a wait that gave up throws through the body (the report is in Failures).
struct Abandoned {};

/// The GPU's workgroup in process mode (gpu/kernel_wg.hpp's DeviceWg) on the fake device, one
/// host thread per block: a put stores into the peer's heap as this rank reaches it (its mapping,
/// or this rank's shadow of a proxied peer's) and, for a proxied peer, posts a put record from
/// there; a signal is an add through the mapping or a signal record queued behind the puts; a
/// wait reads the slot plus what the proxy landed. The kernel bodies are detail/gemv_kernel.hpp's,
/// the ones the GPU runs.
class HostWg {
 public:
  using Task = SyncTask;
  struct View {
    FakeProcess* dev;
    int P, me, grid;
    std::vector<void*> bases;  // [P][buffers]: rank q's copy of buffer b as this rank reaches it
    std::vector<std::uint64_t> offset;  // [buffers]: the buffer's offset in the heap
    std::atomic<std::int64_t>* claims;
    Failures* failures;
    std::string op;
    const std::vector<coll::SlotRange>* names;
    int drop_to = -1;  // a rank this rank's signals never reach (the missing-signal test)
  };
  HostWg(View& v, int block) : v_(v), block_(block) {}

  int rank() const { return v_.me; }
  int world_size() const { return v_.P; }
  int wg() const { return block_; }
  int num_wgs() const { return v_.grid; }
  int thread_rank() const { return 0; }
  int num_threads() const { return 1; }
  void sync() {}

  template <class T>
  T* local(fc::Symmetric<T> b) const {
    return at(v_.me, b);
  }
  template <class T>
  T* read(fc::Symmetric<T> b, std::int64_t first, std::int64_t) const {
    return at(v_.me, b) + first;
  }
  template <class T>
  void put_nbi(int pe, fc::Symmetric<T> dst, std::int64_t first, const T* src, std::int64_t count) {
    T* d = at(pe, dst) + first;
    if (d != src && count > 0) std::memmove(d, src, static_cast<std::size_t>(count) * sizeof(T));
    post_put(pe, dst, first, d, count);
  }
  template <class T>
  void put_rows_nbi(int pe, fc::Symmetric<T> dst, std::int64_t first, std::int64_t dst_ld,
                    const T* src, std::int64_t src_ld, std::int64_t rows, std::int64_t cols) {
    T* d = at(pe, dst) + first;
    for (std::int64_t r = 0; r < rows && cols > 0; ++r) {
      std::memcpy(d + r * dst_ld, src + r * src_ld, static_cast<std::size_t>(cols) * sizeof(T));
      post_put(pe, dst, first + r * dst_ld, d + r * dst_ld, cols);
    }
  }
  void signal_op(int pe, fc::Signal s, fc::SignalOp op, std::uint64_t value) {
    if (pe == v_.drop_to) return;
    const px::SignalOp pop = op == fc::SignalOp::set ? px::SignalOp::set : px::SignalOp::add;
    if (pe != v_.me && v_.dev->proxied(pe))
      v_.dev->post(px::make_signal(pe, s.slot, value, block_, pop));
    else
      v_.dev->add(pe, s.slot, value, pop);
  }
  template <class T>
  void put_signal_nbi(int pe, fc::Symmetric<T> dst, std::int64_t first, const T* src,
                      std::int64_t count, fc::Signal s, fc::SignalOp op, std::uint64_t value) {
    put_nbi(pe, dst, first, src, count);
    signal_op(pe, s, op, value);
  }
  std::uint64_t signal_fetch(fc::Signal s) { return v_.dev->slot_value(s.slot); }
  std::uint64_t signal_fetch_add(fc::Signal s, std::uint64_t value) {
    return v_.dev->fetch_add(s.slot, value);
  }
  void fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
  void quiet() { fence(); }
  template <class F>
  void compute(const char*, const fc::Cost&, F&& f) {
    f();
  }

  struct Ready {
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
  };
  struct Wait : Ready {
    HostWg* wg;
    fc::Signal s;
    fc::Cmp cmp;
    std::uint64_t value;
    void await_resume() const { wg->spin(s, cmp, value); }
  };
  struct Claim : Ready {
    HostWg* wg;
    std::int64_t await_resume() const { return wg->v_.claims->fetch_add(1); }
  };
  Wait wait_until(fc::Signal s, fc::Cmp cmp, std::uint64_t value) {
    return {{}, this, s, cmp, value};
  }
  Claim claim() { return {{}, this}; }

 private:
  template <class T>
  T* at(int pe, fc::Symmetric<T> b) const {
    return static_cast<T*>(
        v_.bases[static_cast<std::size_t>(pe) * v_.offset.size() + static_cast<std::size_t>(b.id)]);
  }
  template <class T>
  void post_put(int pe, fc::Symmetric<T> dst, std::int64_t first, const T* from,
                std::int64_t count) {
    if (pe == v_.me || !v_.dev->proxied(pe) || count <= 0) return;
    v_.dev->post(px::make_put(
        pe, v_.dev->heap_id(),
        v_.offset[static_cast<std::size_t>(dst.id)] + static_cast<std::uint64_t>(first) * sizeof(T),
        reinterpret_cast<std::uint64_t>(from), static_cast<std::uint64_t>(count) * sizeof(T),
        block_));
  }
  /// block_wait_until: spins until the slot plus what the proxy landed satisfies `cmp value`;
  /// past the timeout the first block to give up records who waited for what.
  void spin(fc::Signal s, fc::Cmp cmp, std::uint64_t value) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t got = 0;
    while (!fc::satisfies(got = v_.dev->slot_value(s.slot), cmp, value)) {
      if (v_.failures->abandoned.load(std::memory_order_acquire)) throw Abandoned{};
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
          v_.dev->timeout_s()) {
        const std::lock_guard<std::mutex> lock(v_.failures->mu);
        if (v_.failures->first.empty())
          v_.failures->first = fc::detail::make_string(
              "timeout in ", v_.op, ": rank ", v_.me, " block ", block_, " waited more than ",
              v_.dev->timeout_s(), " s for slot ", s.slot, " (", slot_name(*v_.names, s.slot), ") ",
              fc::to_string(cmp), " ", value, ", observed ", got, "; ",
              v_.dev->proxy().describe(s.slot));
        v_.failures->abandoned.store(true, std::memory_order_release);
        throw Abandoned{};
      }
      std::this_thread::yield();
    }
  }

  View& v_;
  int block_;
};

/// GemvAllReduce's arithmetic on the CPU, ref/'s (emu/gemv_allreduce.cpp's CpuMath): the tile's
/// partial by the shared gemv_rows, the folds by reduce_into.
struct CpuMath {
  template <class Wg>
  static void tile(Wg&, const gplan::GemvKernelParams& p, const gplan::Tile& t, float* out,
                   std::int64_t ld) {
    fc::detail::gemv_rows(p.w + t.n0 * p.ldw, p.ldw, p.x, p.ldx, p.m, p.k, 0, t.n1 - t.n0, out, ld);
  }
  template <class Wg>
  static void copy_rows(Wg&, float* dst, std::int64_t dst_ld, const float* src, std::int64_t src_ld,
                        std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows && cols > 0; ++r)
      std::memcpy(dst + r * dst_ld, src + r * src_ld, static_cast<std::size_t>(cols) * 4);
  }
  template <class Wg>
  static void add_rows(Wg&, float* acc, std::int64_t acc_ld, const float* v, std::int64_t v_ld,
                       std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r)
      fc::detail::reduce_into(acc + r * acc_ld, v + r * v_ld, cols, fc::DType::f32,
                              fc::ReduceOp::sum);
  }
};

/// This rank of a process-mode world on the fake device: each collective call runs as the GPU's
/// process mode runs it (gpu/collectives.cpp, run), blocks as host threads.
class ReplayBackend final : public fc::Backend {
 public:
  explicit ReplayBackend(FakeProcess& dev) : dev_(dev), issued_(kSlots, 0) {}
  int rank() const noexcept override { return dev_.rank(); }
  int size() const noexcept override { return dev_.size(); }
  void barrier() override { dev_.exchange("", "to reach the barrier"); }
  void embedding_alltoall(const fc::EmbeddingAllToAllArgs&, fc::Mode) override { not_here(); }
  void gemv_allreduce(const fc::GemvAllReduceArgs& a, fc::Mode mode) override { gemv(a, mode); }
  void gemm_alltoall(const fc::GemmAllToAllArgs&, fc::Mode) override { not_here(); }
  void all_reduce(const fc::AllReduceArgs& a) override { call(a, "all_reduce"); }
  void all_to_allv(const fc::AllToAllvArgs& a) override { call(a, "all_to_allv"); }
  void reduce_scatter(const fc::ReduceScatterArgs& a) override { call(a, "reduce_scatter"); }
  void all_gather(const fc::AllGatherArgs& a) override { call(a, "all_gather"); }
  void broadcast(const fc::BroadcastArgs& a) override { call(a, "broadcast"); }

  /// The next call's signals to `rank` are dropped (a peer that never signals it).
  void drop_signals_to(int rank) { drop_to_ = rank; }
  /// Host threads per rank (default kBlocks). One block runs a rank's steps in plan order, so its
  /// first wait that cannot be met is the one a timeout reports.
  void set_blocks(int blocks) { blocks_ = blocks; }

 private:
  [[noreturn]] static void not_here() { throw fc::InternalError("not a collective"); }

  template <class Args>
  void call(const Args& mine, const char* op) {
    const std::vector<Args> all =
        fc::gpu::agree_calls(rank(), size(), mine, [&](const std::string& blob) {
          return dev_.exchange(blob, std::string("to enter ") + op);
        });
    run(coll::process_plan(std::span<const Args>(all)));
  }

  /// The agreed scales, as gpu/collectives.cpp's agree_scales: this rank's runs folded (here by
  /// ref/'s scan instead of the amax kernel), the tables merged across ranks, then make_plan.
  fc::detail::WirePlan agree_scales(const coll::Plan& p, const std::vector<unsigned char*>& own) {
    std::vector<float> table = fc::detail::empty_amax(p.wire);
    if (p.amax_entries > 0) {
      std::vector<float> mine;
      for (const coll::AmaxRun& run : coll::amax_runs_of(p, rank())) {
        std::vector<float> y(static_cast<std::size_t>(run.n));
        std::memcpy(y.data(), own[0] + run.offset, y.size() * 4);
        if (p.amax_predivide)
          for (float& v : y) v = v / static_cast<float>(p.P);
        fc::detail::accumulate_amax(p.wire, mine, y.data(), run.index0, run.n);
      }
      std::vector<std::uint32_t> bits(static_cast<std::size_t>(p.amax_entries), 0);
      for (std::size_t k = 0; k < mine.size() && k < bits.size(); ++k)
        bits[k] = std::bit_cast<std::uint32_t>(mine[k]) & 0x7FFFFFFFu;
      table = coll::merge_amax(dev_.exchange(coll::amax_bytes(bits), "to agree on the scales"));
    }
    return fc::detail::make_plan(p.wire, table, p.headroom);
  }

  void run(const coll::Plan& p) {
    const int me = rank(), P = p.P;
    const coll::HeapLayout layout = coll::heap_layout(p);
    dev_.reserve(static_cast<std::size_t>(layout.bytes));
    const std::vector<unsigned char*>& heaps = dev_.peer_heap();
    std::vector<bool> proxied(static_cast<std::size_t>(P));
    for (int q = 0; q < P; ++q) proxied[static_cast<std::size_t>(q)] = dev_.proxied(q);
    std::vector<unsigned char*> own(coll::kNumBufs);
    for (int b = 0; b < coll::kNumBufs; ++b)
      own[static_cast<std::size_t>(b)] = heaps[static_cast<std::size_t>(me)] + layout.offset[b];
    for (const coll::Upload& u : p.uploads)
      if (u.at.rank == me)
        std::memcpy(own[static_cast<std::size_t>(u.at.buf)] + u.at.offset, u.host,
                    static_cast<std::size_t>(u.bytes));
    const auto counts = coll::signal_counts(p);
    const int slot0 = 1;  // past a slot of earlier calls', as Context hands them out
    fc::detail::WirePlan wp;
    if (p.compressed()) wp = agree_scales(p, own);
    const coll::ProcessResolved r = coll::resolve_process(
        p, me, layout, heaps, proxied, slot0,
        [&](int s) { return issued_[static_cast<std::size_t>(slot0 + s)] + counts[me][s]; });
    for (int s = 0; s < p.slot_count; ++s)
      issued_[static_cast<std::size_t>(slot0 + s)] += counts[me][s];
    coll::Exec x{};
    x.P = P;
    x.dtype = static_cast<int>(p.dtype);
    x.op = static_cast<int>(p.reduce);
    x.elem = static_cast<int>(p.elem);
    if (p.compressed())
      x.wire = {static_cast<int>(wp.format), wp.overflow == fc::Overflow::saturate, wp.block,
                wp.scales.empty() ? nullptr : wp.scales.data()};
    x.steps = r.x.steps.data();
    x.step_begin = r.x.step_begin.data();
    x.sources = r.x.sources.data();
    x.targets = r.x.targets.data();
    x.puts = r.puts.data();

    std::atomic<bool> abandoned{false};
    std::string failure;
    std::mutex failure_mu;
    const int begin = r.x.step_begin[me], count = r.x.step_begin[me + 1] - begin;
    std::vector<std::thread> blocks;
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(blocks_));
    for (int g = 0; g < blocks_; ++g)
      blocks.emplace_back([&, g] {
        try {
          HostIo io{dev_, me, g, abandoned, failure, failure_mu, p, slot0, drop_to_};
          for (int i = g; i < count; i += blocks_)
            if (!coll::run_item(x, x.steps[begin + i], io)) return;
        } catch (...) {
          errors[static_cast<std::size_t>(g)] = std::current_exception();
          abandoned = true;
        }
      });
    for (std::thread& t : blocks) t.join();
    drop_to_ = -1;
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
    if (!failure.empty()) throw fc::TimeoutError(failure);
    dev_.proxy().quiesce(dev_.posted());
    for (const coll::Download& d : p.downloads)
      if (d.from.rank == me)
        std::memcpy(d.host, own[static_cast<std::size_t>(d.from.buf)] + d.from.offset,
                    static_cast<std::size_t>(d.bytes));
  }

  /// GemvAllReduce as the GPU's process mode runs it (gpu/gemv_allreduce.cpp over
  /// gpu/gemv_setup.hpp): the same params, heap places, signals and targets; the fused modes'
  /// bodies over HostWg blocks; unfused as the GEMV body, then this backend's process-mode
  /// AllReduce over the partial.
  void gemv(const fc::GemvAllReduceArgs& a, fc::Mode mode) {
    namespace setup = fc::gpu::gemv_setup;
    const int me = rank(), P = size();
    const std::string op = std::string("gemv_allreduce ") + fc::to_string(mode);
    const std::vector<fc::GemvAllReduceArgs> all = fc::gpu::agree_calls(
        me, P, a, [&](const std::string& blob) { return dev_.exchange(blob, "to enter " + op); });
    const gplan::Plan pl(a, me, P);
    const setup::Sizes size = setup::sizes(pl, mode);
    std::vector<std::vector<int>> lists;  // the "uploads" of the plan's lists
    auto upload = [&](const auto& v) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      if constexpr (std::is_same_v<T, int>) {
        lists.push_back(v);
        return static_cast<const int*>(lists.back().data());
      } else {
        targets_.push_back(v);
        return static_cast<const std::uint64_t*>(targets_.back().data());
      }
    };
    lists.reserve(2);
    targets_.clear();
    targets_.reserve(1);
    const std::vector<float> w = packed(a.w, a.n, pl.k), x = packed(a.x, a.m, pl.k);
    gplan::GemvKernelParams p =
        setup::params_of(pl, w.data(), x.data(), pl.tiles.data(), pl.chunks.data(), upload);
    // Slots as Context hands them out: from slot 1 (past a slot of earlier calls'), named.
    std::vector<coll::SlotRange> names;
    int next = 1;
    const setup::SignalSet sig = setup::reserve_signals(pl, mode, [&](const char* name, int n) {
      names.push_back({name, next, n});
      next += n;
      return next - n;
    });
    setup::set_signals(
        p, pl, mode, sig,
        [&](int slot, std::uint64_t n) { return issued_[static_cast<std::size_t>(slot)] += n; },
        upload);

    HostWg::View view{&dev_, P, me, blocks_, {}, {}, nullptr, &failures_, op, &names, drop_to_};
    std::vector<std::vector<float>> own;  // buffers only this rank touches
    auto add_local = [&](std::int64_t floats) {
      own.emplace_back(static_cast<std::size_t>(floats));
      std::vector<void*> reach(static_cast<std::size_t>(P), nullptr);
      reach[static_cast<std::size_t>(me)] = own.back().data();
      return reach;
    };
    own.reserve(4);
    std::vector<std::vector<void*>> reach;  // [buffer][P]
    const std::int64_t M = a.m, N = a.n;
    std::vector<float> y(static_cast<std::size_t>(std::max<std::int64_t>(M * N, 1)));
    fc::poison(y.data(), y.size() * 4);
    float* result = y.data();
    if (mode != fc::Mode::unfused) {
      const setup::HeapPlace place = setup::heap_place(size);
      dev_.reserve(place.bytes);
      for (int b = 0; b < 2; ++b) {
        std::vector<void*> r;
        for (int q = 0; q < P; ++q)
          r.push_back(dev_.peer_heap()[static_cast<std::size_t>(q)] + place.offset[b]);
        reach.push_back(r);
        view.offset.push_back(place.offset[b]);
      }
      if (mode == fc::Mode::scale_up) {
        result = static_cast<float*>(reach[1][static_cast<std::size_t>(me)]);
        fc::poison(result, static_cast<std::size_t>(size.shared[1]) * 4);
      }
      dev_.exchange("", "to start " + op);
      if (mode == fc::Mode::scale_up) {
        p.partials = {0, size.shared[0]};
        p.ysym = {1, size.shared[1]};
        p.wgbuf = {2, blocks_ * size.wgbuf_per_wg};
        reach.push_back(add_local(blocks_ * size.wgbuf_per_wg));
      } else {
        p.slices = {0, size.shared[0]};
        p.gathered = {1, size.shared[1]};
        p.stage = {2, size.stage};
        p.reduced = {3, size.reduced};
        reach.push_back(add_local(size.stage));
        reach.push_back(add_local(size.reduced));
        p.y = y.data();
        p.ldy = N;
      }
    } else {
      own.emplace_back(static_cast<std::size_t>(size.partial));
      p.y = own.back().data();
      p.ldy = N;
    }
    for (std::size_t b = view.offset.size(); b < reach.size(); ++b) view.offset.push_back(0);
    for (int q = 0; q < P; ++q)
      for (const auto& r : reach) view.bases.push_back(r[static_cast<std::size_t>(q)]);

    if (mode == fc::Mode::scale_up)
      launch<gplan::GemvScaleUp<CpuMath>>(view, p);
    else if (mode == fc::Mode::scale_out)
      launch<gplan::GemvScaleOut<CpuMath>>(view, p);
    else
      launch<gplan::GemvPartial<CpuMath>>(view, p);
    drop_to_ = -1;
    if (mode == fc::Mode::unfused) {
      const std::vector<fc::AllReduceArgs> ar = setup::unfused_all_reduce(a, me, P, p.y, y.data());
      run(coll::process_plan(std::span<const fc::AllReduceArgs>(ar)));
    }
    auto* out = static_cast<float*>(a.y.data());
    for (std::int64_t r = 0; r < M && N > 0; ++r)
      std::memcpy(out + r * a.y.stride(0), result + r * N, static_cast<std::size_t>(N) * 4);
  }

  /// A kernel body over `view.grid` host threads as blocks, then the proxy's quiesce; a block's
  /// timeout becomes TimeoutError naming who waited for what.
  template <class K>
  void launch(HostWg::View& view, const gplan::GemvKernelParams& p) {
    std::atomic<std::int64_t> claims{0};
    view.claims = &claims;
    failures_.abandoned = false;
    failures_.first.clear();
    std::vector<std::thread> blocks;
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(view.grid));
    for (int g = 0; g < view.grid; ++g)
      blocks.emplace_back([&, g] {
        try {
          HostWg wg(view, g);
          K::template run<HostWg>(wg, p).get();
        } catch (const Abandoned&) {
        } catch (...) {
          errors[static_cast<std::size_t>(g)] = std::current_exception();
          failures_.abandoned = true;
        }
      });
    for (std::thread& t : blocks) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
    if (!failures_.first.empty()) throw fc::TimeoutError(failures_.first);
    dev_.proxy().quiesce(dev_.posted());
  }

  /// A [rows, cols] view's elements, packed (row stride cols).
  static std::vector<float> packed(const fc::ConstTensorView& v, std::int64_t rows,
                                   std::int64_t cols) {
    std::vector<float> out(static_cast<std::size_t>(rows * cols));
    for (std::int64_t r = 0; r < rows && cols > 0; ++r)
      std::memcpy(out.data() + r * cols, static_cast<const float*>(v.data()) + r * v.stride(0),
                  static_cast<std::size_t>(cols) * 4);
    return out;
  }

  FakeProcess& dev_;
  std::vector<std::uint64_t> issued_;
  std::vector<std::vector<std::uint64_t>> targets_;
  Failures failures_;
  int drop_to_ = -1;
  int blocks_ = kBlocks;
};

using fctest::world_rank;
using fctest::world_size;

class GpuProcessReplay : public ::testing::TestWithParam<Routes> {
 protected:
  /// Every case on this rank's process-mode replay, then ref/ for every rank, then this rank's
  /// block compared.
  void replay(Cases& cases) {
    const int me = world_rank();
    FakeProcess dev(GetParam(), 20);
    fc::Communicator comm(std::make_shared<ReplayBackend>(dev));
    // Every rank goes through every case (they meet at each call), reporting its first mismatch.
    std::string first;
    for (auto& c : cases) {
      c->on_backend(comm);
      c->on_ref();
      const std::string diff = first_difference(*c, static_cast<std::size_t>(me), "gpu process");
      if (first.empty()) first = diff;
    }
    EXPECT_EQ(first, "") << "routes: " << name_of(GetParam());
  }
};

TEST_P(GpuProcessReplay, AllReduceMatchesRef) {
  const int P = world_size();
  Cases cases;
  add_all_reduce_grid(cases, P, 3 * 16384 * P + 11);
  for (ReduceOp op : kOps)
    for (AllReduceAlgo algo : kAlgos)
      add_special_values_all_reduce(cases, P, 64 * P, op, algo, 950);
  replay(cases);
}

TEST_P(GpuProcessReplay, ExchangesMatchRef) {
  const int P = world_size();
  Cases cases;
  add_reduce_scatter_grid(cases, P);
  add_all_gather_grid(cases, P);
  add_all_to_allv_grid(cases, P);
  add_broadcast_grid(cases, P);
  replay(cases);
}

TEST_P(GpuProcessReplay, CompressedMatchesRef) {
  const int P = world_size();
  Cases cases;
  add_compressed(cases, P, 1000);
  add_compressed_large(cases, P, 2000);
  add_compressed_chain(cases, P, 3000);
  replay(cases);
}

// GemvAllReduce in every mode (the shared grid: M 1-16, N from 0 over N < P to several tiles per
// owner chunk, ranks without a K range), and with padded rows of y that must keep their poison.
TEST_P(GpuProcessReplay, GemvMatchesRef) {
  const int P = world_size(), me = world_rank();
  FakeProcess dev(GetParam(), 20);
  fc::Communicator comm(std::make_shared<ReplayBackend>(dev));
  std::string first;
  auto check = [&](const fc::GemvProblem& pb, fc::Mode mode, fctest::ops::Layout layout) {
    fctest::ops::OpCase<fc::GemvProblem> c(pb, mode, layout);
    c.call(comm);
    const ::testing::AssertionResult same = c.same_as_ref(me);
    if (!same && first.empty()) first = same.message();
  };
  fctest::ops::gemv_grid(P, [&](const fc::GemvProblem& pb, fc::Mode mode) {
    check(pb, mode, fctest::ops::Layout::packed);
  });
  for (fc::Mode mode : fctest::ops::kModes)
    check(fctest::ops::gemv_problem(P, 3, 130, 77, true), mode, fctest::ops::Layout::padded);
  EXPECT_EQ(first, "") << "routes: " << name_of(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Routes, GpuProcessReplay,
                         ::testing::Values(Routes::proxy, Routes::ipc, Routes::pairs),
                         [](const auto& p) { return name_of(p.param); });

// A peer that never signals: rank P - 1 drops its signals to rank 0, through the proxy. Rank 0
// (one block, so its steps run in plan order) times out on its first wait, for the parts of its
// owner chunk, naming the slot, expected and observed, and what the proxy got on it from whom
// (every other rank's signal, not rank P - 1's); the other ranks time out too, waiting for rank 0's
// share. Nobody hangs.
TEST(GpuProcessReplayFailure, PeerThatNeverSignalsIsNamed) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  FakeProcess dev(Routes::proxy, 1.0);
  auto backend = std::make_shared<ReplayBackend>(dev);
  fc::Communicator comm(backend);
  std::vector<float> x(static_cast<std::size_t>(1000 * P), 1.0f), y(x.size());
  fc::AllReduceArgs a;
  a.send = x.data();
  a.recv = y.data();
  a.count = static_cast<std::int64_t>(x.size());
  if (me == P - 1) backend->drop_signals_to(0);
  backend->set_blocks(1);  // rank 0's first wait is for the owner's parts, whatever the timing
  try {
    fc::all_reduce(comm, a);
    ADD_FAILURE() << "rank " << me << ": the AllReduce finished without rank " << P - 1
                  << "'s signals to rank 0";
  } catch (const fc::TimeoutError& e) {
    const std::string w = e.what();
    if (me == 0) {
      // Every rank but P - 1 signalled the slot once, through the proxy.
      std::string got = "got no signal through the proxy";
      if (P > 2) {
        got = "got " + std::to_string(P - 2) + " through the proxy (";
        for (int q = 1; q < P - 1; ++q)
          got += (q > 1 ? ", rank " : "rank ") + std::to_string(q) + ": 1";
        got += ")";
      }
      EXPECT_NE(w.find("rank 0 block"), std::string::npos) << w;
      EXPECT_NE(w.find("('all_reduce direct.part'[0]) >= " + std::to_string(P - 1) + ", observed " +
                       std::to_string(P - 2)),
                std::string::npos)
          << w;
      EXPECT_NE(w.find("rank 0's proxy: slot"), std::string::npos) << w;
      EXPECT_NE(w.find(got), std::string::npos) << w;
    }
  }
}

// GemvAllReduce's scale_up with rank P - 1's signals to rank 0 dropped: rank 0 (one block, so it
// computes every tile before its first wait) times out waiting for the partials of its first own
// tile, naming the slot, expected and observed, and the proxy's view; every other rank times out
// waiting for rank 0's reduced tiles. Nobody hangs.
TEST(GpuProcessReplayFailure, GemvPeerThatNeverSignalsIsNamed) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  FakeProcess dev(Routes::proxy, 1.0);
  auto backend = std::make_shared<ReplayBackend>(dev);
  fc::Communicator comm(backend);
  fctest::ops::OpCase<fc::GemvProblem> c(fctest::ops::gemv_problem(P, 3, 130, 42, false),
                                         fc::Mode::scale_up);
  if (me == P - 1) backend->drop_signals_to(0);
  backend->set_blocks(1);
  try {
    c.call(comm);
    ADD_FAILURE() << "rank " << me << ": GemvAllReduce finished without rank " << P - 1
                  << "'s signals to rank 0";
  } catch (const fc::TimeoutError& e) {
    const std::string w = e.what();
    if (me == 0) {
      EXPECT_NE(w.find("timeout in gemv_allreduce scale_up: rank 0 block 0"), std::string::npos)
          << w;
      EXPECT_NE(w.find("('gemv.partial'[0]) >= " + std::to_string(P) + ", observed " +
                       std::to_string(P - 1)),
                std::string::npos)
          << w;
      EXPECT_NE(w.find("rank 0's proxy: slot"), std::string::npos) << w;
    }
  }
}

}  // namespace
