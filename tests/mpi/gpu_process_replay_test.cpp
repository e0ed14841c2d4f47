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
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/collective_cases.hpp"
#include "common/compressed_cases.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/error.hpp"
#include "gpu/agreement_codec.hpp"
#include "gpu/collective_exec.hpp"
#include "gpu/collective_plan.hpp"
#include "gpu/collective_process.hpp"
#include "gpu/proxy.hpp"
#include "gpu/symmetric.hpp"
#include "tests/common/mpi_gtest.hpp"

namespace {

namespace fc = fusedcoll;
namespace coll = fusedcoll::gpu::coll;
namespace px = fusedcoll::gpu::proxy;
namespace gp = fusedcoll::gpu::process;
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
  void add(int q, int slot) {
    std::atomic_ref<std::uint64_t>(peer_slots_[static_cast<std::size_t>(q)][slot])
        .fetch_add(1, std::memory_order_release);
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
          std::string name = "unnamed";
          const int rel = slot - slot0;
          for (const coll::SlotRange& r : plan.slots)
            if (rel >= r.base && rel < r.base + r.count)
              name = fc::detail::make_string("'", r.name, "'[", rel - r.base, "]");
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

/// This rank of a process-mode world on the fake device: each collective call runs as the GPU's
/// process mode runs it (gpu/collectives.cpp, run), blocks as host threads.
class ReplayBackend final : public fc::Backend {
 public:
  explicit ReplayBackend(FakeProcess& dev) : dev_(dev), issued_(kSlots, 0) {}
  int rank() const noexcept override { return dev_.rank(); }
  int size() const noexcept override { return dev_.size(); }
  void barrier() override { dev_.exchange("", "to reach the barrier"); }
  void embedding_alltoall(const fc::EmbeddingAllToAllArgs&, fc::Mode) override { not_here(); }
  void gemv_allreduce(const fc::GemvAllReduceArgs&, fc::Mode) override { not_here(); }
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

  FakeProcess& dev_;
  std::vector<std::uint64_t> issued_;
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

}  // namespace
