// The GPU backend's host proxy (gpu/proxy.hpp) and process-mode bootstrap (gpu/symmetric.hpp) on
// the CPU, under mpiexec (label mpi; across namespace "hosts" too, label multihost). The device is
// faked: its memory is host buffers, its signal slots host atomics, and its blocks are host
// threads posting into the same request queue the GPU's blocks write (gpu/proxy_queue.hpp).
//
// - A direct AllReduce replayed through the proxies (every chunk put to its owner in pieces by
//   several producers, each piece followed by its signal; the owner folds in rank order and puts
//   the result to every rank), every rank's result memcmp-equal to ref::all_reduce.
// - The ordering rule end to end: each producer's pieces, each followed by a signal, must have
//   landed whenever the receiver observes the signal count that covers them.
// - A wait for a signal nobody sends times out with a report naming rank, block, slot, expected,
//   observed and what the proxy got from whom; a proxy that stops receiving is named by the
//   sender's quiesce.
// - The IPC bootstrap: routes per node and proxy mode, device choice, and symmetric allocations
//   that disagree in size or order across ranks are an InvalidArgument on every rank.

#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/ref.hpp"
#include "gpu/proxy.hpp"
#include "gpu/symmetric.hpp"
#include "tests/common/mpi_gtest.hpp"

namespace {

namespace fc = fusedcoll;
namespace px = fusedcoll::gpu::proxy;
namespace gp = fusedcoll::gpu::process;

using fctest::world_rank;
using fctest::world_size;

/// The fake device of one rank: symmetric buffers, signal slots, and a request queue.
class FakeDevice final : public px::DeviceMemory {
 public:
  static constexpr int kSlots = 1024;

  FakeDevice(std::vector<std::size_t> buffer_bytes, std::uint64_t capacity)
      : slots_(std::make_unique<std::atomic<std::uint64_t>[]>(kSlots)), ring_(capacity) {
    for (std::size_t b : buffer_bytes) buffers_.emplace_back(b, 0);
    for (int i = 0; i < kSlots; ++i) slots_[static_cast<std::size_t>(i)].store(0);
    queue.ring = ring_.data();
    queue.capacity = capacity;
    queue.head = &head_;
    queue.tail = &tail;
    queue.timeout_ticks = 20'000'000'000ull;
  }

  void read(std::uint64_t src, void* dst, std::size_t bytes) override {
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  }
  void write(int buffer, std::uint64_t offset, const void* src, std::size_t bytes) override {
    if (stall_writes_s > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(stall_writes_s));
      stall_writes_s = 0;
    }
    FC_CHECK_INTERNAL(buffer >= 0 && buffer < static_cast<int>(buffers_.size()) &&
                          offset + bytes <= buffers_[static_cast<std::size_t>(buffer)].size(),
                      "fake device: put into buffer ", buffer, " at ", offset, " + ", bytes,
                      " out of range");
    std::memcpy(buffers_[static_cast<std::size_t>(buffer)].data() + offset, src, bytes);
  }
  void signal(int slot, std::uint64_t value, px::SignalOp op) override {
    FC_CHECK_INTERNAL(slot >= 0 && slot < kSlots, "fake device: slot ", slot);
    auto& v = slots_[static_cast<std::size_t>(slot)];
    if (op == px::SignalOp::set) v.store(value, std::memory_order_release);
    else v.fetch_add(value, std::memory_order_release);
  }

  unsigned char* buffer(int id) { return buffers_[static_cast<std::size_t>(id)].data(); }
  std::uint64_t slot(int s) const {
    return slots_[static_cast<std::size_t>(s)].load(std::memory_order_acquire);
  }
  void local_signal(int s, std::uint64_t add) {
    slots_[static_cast<std::size_t>(s)].fetch_add(add, std::memory_order_release);
  }
  /// A block's wait: true once `slot` reaches `target`; false after `timeout_s`, with `observed`.
  bool wait(int s, std::uint64_t target, double timeout_s, std::uint64_t* observed = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t v = 0;
    while ((v = slot(s)) < target) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
          timeout_s) {
        if (observed) *observed = v;
        return false;
      }
      std::this_thread::yield();
    }
    return true;
  }
  /// A block posting into the queue.
  void post(const px::Record& r) { ASSERT_TRUE(px::post<px::HostOps>(queue, r)); }
  std::uint64_t posted() const {
    return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(head_)).load();
  }

  px::QueueView queue;
  std::uint64_t tail = 0;
  std::atomic<double> stall_writes_s{0};

 private:
  std::vector<std::vector<unsigned char>> buffers_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> slots_;
  std::vector<px::Record> ring_;
  std::uint64_t head_ = 0;
};

std::uint64_t src_of(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

/// A direct AllReduce of `n` f32 per rank through the proxies, `producers` host threads per rank
/// posting puts of at most `piece` floats, each piece followed by its signal.
void replay_all_reduce(std::int64_t n, int producers, std::int64_t piece, std::size_t batch) {
  const int P = world_size(), me = world_rank();
  // Every rank's input (the same generator everywhere), so each rank can run ref/ for all.
  std::vector<std::vector<float>> send(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    std::mt19937 g(static_cast<unsigned>(1234 + r));
    std::uniform_real_distribution<float> d(-1000.f, 1000.f);
    for (std::int64_t i = 0; i < n; ++i) send[static_cast<std::size_t>(r)].push_back(d(g));
  }
  std::vector<std::vector<float>> expect(static_cast<std::size_t>(P),
                                         std::vector<float>(static_cast<std::size_t>(n)));
  std::vector<fc::AllReduceArgs> args(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    args[static_cast<std::size_t>(r)].send = send[static_cast<std::size_t>(r)].data();
    args[static_cast<std::size_t>(r)].recv = expect[static_cast<std::size_t>(r)].data();
    args[static_cast<std::size_t>(r)].count = n;
  }
  fc::ref::all_reduce(args);

  // Chunk c = [lo(c), lo(c + 1)) belongs to rank c.
  auto lo = [&](int c) { return n * c / P; };
  std::int64_t chunk_max = 0;
  for (int c = 0; c < P; ++c) chunk_max = std::max(chunk_max, lo(c + 1) - lo(c));
  // Buffer 0: the owner's stage, a chunk per source; buffer 1: the result.
  FakeDevice dev({static_cast<std::size_t>(P * chunk_max) * 4, static_cast<std::size_t>(n) * 4},
                 16);
  px::Options o;
  o.timeout_s = 20;
  o.batch_bytes = batch;
  px::Proxy proxy(MPI_COMM_WORLD, dev.queue, &dev.tail, dev, o);
  constexpr int kPart = 0, kDone = 1;
  const float* mine = send[static_cast<std::size_t>(me)].data();

  // The pieces this rank sends to each owner, dealt round robin to the producers.
  auto pieces_of = [&](int c) { return (lo(c + 1) - lo(c) + piece - 1) / piece; };
  std::uint64_t from_peers = 0;  // pieces the owner (me) receives
  for (int r = 0; r < P; ++r)
    if (r != me) from_peers += static_cast<std::uint64_t>(pieces_of(me));
  std::vector<std::thread> threads;
  for (int t = 0; t < producers; ++t)
    threads.emplace_back([&, t] {
      int k = 0;
      for (int j = 1; j < P; ++j) {
        const int c = (me + j) % P;
        for (std::int64_t i = 0; i < pieces_of(c); ++i, ++k) {
          if (k % producers != t) continue;
          const std::int64_t a = lo(c) + i * piece, len = std::min(piece, lo(c + 1) - a);
          dev.post(px::make_put(c, 0, static_cast<std::uint64_t>((me * chunk_max + i * piece) * 4),
                                src_of(mine + a), static_cast<std::uint64_t>(len * 4), t));
          dev.post(px::make_signal(c, kPart, 1, t));
        }
      }
    });
  for (std::thread& t : threads) t.join();
  // The owner: every peer's pieces, then the fold in rank order (ref/'s direct order).
  ASSERT_TRUE(dev.wait(kPart, from_peers, 20)) << "rank " << me << " stage";
  const auto* stage = reinterpret_cast<const float*>(dev.buffer(0));
  auto* result = reinterpret_cast<float*>(dev.buffer(1));
  for (std::int64_t i = lo(me); i < lo(me + 1); ++i) {
    const std::int64_t k = i - lo(me);
    float acc = me == 0 ? mine[i] : stage[k];
    for (int r = 1; r < P; ++r) acc = acc + (r == me ? mine[i] : stage[r * chunk_max + k]);
    result[i] = acc;
  }
  // Then the result to every rank, in pieces by the producers again.
  threads.clear();
  for (int t = 0; t < producers; ++t)
    threads.emplace_back([&, t] {
      int k = 0;
      for (int j = 1; j < P; ++j) {
        const int q = (me + j) % P;
        for (std::int64_t i = 0; i < pieces_of(me); ++i, ++k) {
          if (k % producers != t) continue;
          const std::int64_t a = lo(me) + i * piece, len = std::min(piece, lo(me + 1) - a);
          dev.post(px::make_put(q, 1, static_cast<std::uint64_t>(a * 4), src_of(result + a),
                                static_cast<std::uint64_t>(len * 4), t));
          dev.post(px::make_signal(q, kDone, 1, t));
        }
      }
    });
  for (std::thread& t : threads) t.join();
  std::uint64_t results = 0;
  for (int c = 0; c < P; ++c)
    if (c != me) results += static_cast<std::uint64_t>(pieces_of(c));
  ASSERT_TRUE(dev.wait(kDone, results, 20)) << "rank " << me << " result";
  EXPECT_EQ(std::memcmp(result, expect[static_cast<std::size_t>(me)].data(),
                        static_cast<std::size_t>(n) * 4),
            0)
      << "rank " << me << ": the AllReduce through the proxies differs from ref/ (n " << n
      << ", producers " << producers << ", piece " << piece << ")";
  proxy.quiesce(dev.posted());
  EXPECT_EQ(proxy.landed(kDone, (me + 1) % P),
            P > 1 ? static_cast<std::uint64_t>(pieces_of((me + 1) % P)) : 0u);
  MPI_Barrier(MPI_COMM_WORLD);  // every proxy's traffic has landed before any is destroyed
}

TEST(GpuProxy, AllReduceReplayMatchesRef) {
  replay_all_reduce(1000, 3, 64, std::size_t{1} << 20);
  replay_all_reduce(7, 1, 2, 256);  // fewer elements than a piece per rank
  replay_all_reduce(100003, 4, 8192, std::size_t{1} << 20);
  replay_all_reduce(50000, 2, 50000, 4096);  // puts larger than a message: split
}

TEST(GpuProxy, SignalNeverOvertakesTheProducersPuts) {
  const int P = world_size(), me = world_rank();
  constexpr int kProducers = 4, kPieces = 60;
  constexpr std::int64_t kFloats = 300;
  const std::size_t per_source = static_cast<std::size_t>(kProducers * kPieces * kFloats) * 4;
  FakeDevice dev({per_source * static_cast<std::size_t>(P)}, 32);
  px::Options o;
  o.batch_bytes = 3000;  // several pieces per message, and pieces split over messages
  px::Proxy proxy(MPI_COMM_WORLD, dev.queue, &dev.tail, dev, o);
  // Producer t of rank s writes piece i of its stream, then signals slot (s * kProducers + t);
  // piece content = (s, t, i, element), so a missing or stale piece is found by value.
  auto value = [](int s, int t, int i, std::int64_t e) {
    return static_cast<float>(((s * kProducers + t) * kPieces + i) * 1000 + e);
  };
  std::vector<std::vector<float>> data(kProducers);
  for (int t = 0; t < kProducers; ++t)
    for (int i = 0; i < kPieces; ++i)
      for (std::int64_t e = 0; e < kFloats; ++e)
        data[static_cast<std::size_t>(t)].push_back(value(me, t, i, e));
  std::atomic<int> bad{0};
  // Receivers: for every source producer, whenever its slot shows v, pieces [0, v) must be there.
  std::vector<std::thread> checkers;
  for (int s = 0; s < P; ++s) {
    if (s == me) continue;
    checkers.emplace_back([&, s] {
      const auto* base =
          reinterpret_cast<const float*>(dev.buffer(0) + per_source * static_cast<std::size_t>(s));
      std::vector<int> seen(kProducers, 0);
      const auto t0 = std::chrono::steady_clock::now();
      int done = 0;
      while (done < kProducers) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
          bad += 1000;
          return;
        }
        for (int t = 0; t < kProducers; ++t) {
          const int v = static_cast<int>(dev.slot(s * kProducers + t));
          for (int i = seen[static_cast<std::size_t>(t)]; i < v; ++i)
            for (std::int64_t e = 0; e < kFloats; ++e)
              if (base[(t * kPieces + i) * kFloats + e] != value(s, t, i, e)) ++bad;
          if (v == kPieces && seen[static_cast<std::size_t>(t)] < kPieces) ++done;
          seen[static_cast<std::size_t>(t)] = v;
        }
        std::this_thread::yield();  // ranks share the cores with their proxies
      }
    });
  }
  std::vector<std::thread> producers;
  for (int t = 0; t < kProducers; ++t)
    producers.emplace_back([&, t] {
      for (int i = 0; i < kPieces; ++i)
        for (int j = 1; j < P; ++j) {
          const int q = (me + j) % P;
          const std::uint64_t off = per_source * static_cast<std::size_t>(me) +
                                    static_cast<std::uint64_t>((t * kPieces + i) * kFloats) * 4;
          dev.post(px::make_put(q, 0, off,
                                src_of(data[static_cast<std::size_t>(t)].data() + i * kFloats),
                                kFloats * 4, t));
          dev.post(px::make_signal(q, me * kProducers + t, 1, t));
        }
    });
  for (std::thread& t : producers) t.join();
  for (std::thread& t : checkers) t.join();
  EXPECT_EQ(bad.load(), 0) << "rank " << me << ": a signal was observed before its puts landed";
  proxy.quiesce(dev.posted());
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(GpuProxy, MissingSignalIsReportedWithThePeer) {
  const int P = world_size(), me = world_rank();
  FakeDevice dev({64}, 8);
  px::Proxy proxy(MPI_COMM_WORLD, dev.queue, &dev.tail, dev, px::Options{});
  // Every rank signals its right neighbour's slot 5 once, except rank P - 1, which "forgets":
  // rank 0 waits for 1 and must report slot 5, expected 1, observed 0, and what its proxy saw.
  constexpr int kSlot = 5;
  if (me != P - 1 && P > 1) dev.post(px::make_signal((me + 1) % P, kSlot, 1, 0));
  proxy.quiesce(dev.posted());
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0 && P > 1) {
    std::uint64_t observed = 99;
    const int block = 3;
    ASSERT_FALSE(dev.wait(kSlot, 1, 0.3, &observed));
    std::ostringstream report;
    report << "rank " << me << " block " << block << " waited more than 0.3 s for slot " << kSlot
           << " >= 1, observed " << observed << "; " << proxy.describe(kSlot);
    const std::string text = report.str();
    EXPECT_NE(text.find("rank 0 block 3 waited more than 0.3 s for slot 5 >= 1, observed 0"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("slot 5 got no signal through the proxy"), std::string::npos) << text;
    EXPECT_NE(text.find("rank " + std::to_string(P - 1) + ": never"), std::string::npos) << text;
  }
  if (me == 1 % P && P > 1) {
    ASSERT_TRUE(dev.wait(kSlot, 1, 5));
    EXPECT_NE(proxy.describe(kSlot).find("got 1 through the proxy (rank 0: 1)"), std::string::npos)
        << proxy.describe(kSlot);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(GpuProxy, SetSignalsStoreTheirValue) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  FakeDevice dev({64}, 8);
  px::Proxy proxy(MPI_COMM_WORLD, dev.queue, &dev.tail, dev, px::Options{});
  // Each rank sets its right neighbour's slot 9 twice; the second value stays, as a flag's would.
  const int right = (me + 1) % P, left = (me + P - 1) % P;
  dev.post(px::make_signal(right, 9, 5, 0, px::SignalOp::set));
  dev.post(px::make_signal(right, 9, 100 + static_cast<std::uint64_t>(me), 0, px::SignalOp::set));
  const auto t0 = std::chrono::steady_clock::now();
  while (dev.slot(9) != 100 + static_cast<std::uint64_t>(left) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    std::this_thread::yield();
  EXPECT_EQ(dev.slot(9), 100 + static_cast<std::uint64_t>(left));
  EXPECT_EQ(proxy.landed(9, left), 100 + static_cast<std::uint64_t>(left));
  proxy.quiesce(dev.posted());
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(GpuProxy, StuckPeerProxyIsNamed) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  // Rank 1's device takes 2 s to land the first put (a stuck proxy); rank 0 sends it 2 MiB in
  // messages above every eager limit, so its sends stay open and its quiesce must name rank 1.
  constexpr std::size_t kBytes = std::size_t{2} << 20;
  FakeDevice dev({kBytes}, 8);
  std::vector<unsigned char> src(kBytes, 0x5a);
  if (me == 1) dev.stall_writes_s = 2.0;
  px::Options o;
  o.timeout_s = 0.5;
  px::Proxy proxy(MPI_COMM_WORLD, dev.queue, &dev.tail, dev, o);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    dev.post(px::make_put(1, 0, 0, src_of(src.data()), kBytes, 0));
    dev.post(px::make_signal(1, 0, 1, 0));
    try {
      proxy.quiesce(dev.posted());
      ADD_FAILURE() << "quiesce returned while rank 1's proxy was stuck";
    } catch (const fc::TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1's proxy has not received"), std::string::npos)
          << e.what();
    }
  }
  if (me == 1) {
    ASSERT_TRUE(dev.wait(0, 1, 20));
    EXPECT_EQ(std::memcmp(dev.buffer(0), src.data(), kBytes), 0);
  }
  // Rank 0's send completes once rank 1's proxy is unstuck; both drain before the proxies go.
  if (me == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    while (proxy.describe(0).find("not yet received") != std::string::npos &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(GpuProxy, MalformedRecordIsAnError) {
  const int me = world_rank();
  FakeDevice dev({16}, 8);
  px::Proxy proxy(MPI_COMM_WORLD, dev.queue, &dev.tail, dev, px::Options{});
  dev.post(px::make_signal(me, 0, 1, 4));  // to itself: a proxy serves other ranks only
  try {
    proxy.quiesce(dev.posted());
    ADD_FAILURE() << "a record for the own rank was accepted";
  } catch (const fc::InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("malformed record from producer 4"), std::string::npos)
        << e.what();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(GpuProcessBootstrap, RoutesFollowNodesAndTheProxyMode) {
  using R = gp::Route;
  const std::vector<int> nodes = {0, 0, 1, 1, 0};
  EXPECT_EQ(gp::routes(nodes, 1, fc::Env::GpuProxy::automatic),
            (std::vector<R>{R::ipc, R::self, R::proxy, R::proxy, R::ipc}));
  EXPECT_EQ(gp::routes(nodes, 3, fc::Env::GpuProxy::all),
            (std::vector<R>{R::proxy, R::proxy, R::proxy, R::self, R::proxy}));
  EXPECT_EQ(gp::routes({0, 0}, 0, fc::Env::GpuProxy::off), (std::vector<R>{R::self, R::ipc}));
  try {
    gp::routes(nodes, 0, fc::Env::GpuProxy::off);
    ADD_FAILURE() << "a peer on another node was accepted with the proxy off";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 is on node 1 and rank 0 on node 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(gp::local_rank(nodes, 4), 2);
  EXPECT_EQ(gp::local_size(nodes, 4), 3);
  EXPECT_EQ(gp::local_rank(nodes, 3), 1);
  EXPECT_EQ(gp::pick_device(-1, 5, 4), 1);
  EXPECT_EQ(gp::pick_device(-1, 3, 1), 0);  // ranks share the one device
  EXPECT_EQ(gp::pick_device(2, 0, 4), 2);
  EXPECT_THROW(gp::pick_device(4, 0, 4), fc::InvalidArgument);
  EXPECT_THROW(gp::pick_device(-1, 0, 0), fc::UnsupportedError);
  // Under mpiexec on one machine (or one namespace host per node): ranks share a node in blocks.
  const std::vector<int> mine = gp::node_of(MPI_COMM_WORLD);
  ASSERT_EQ(static_cast<int>(mine.size()), world_size());
  EXPECT_EQ(mine[0], 0);
  for (std::size_t r = 1; r < mine.size(); ++r) EXPECT_LE(mine[r], mine[r - 1] + 1);
}

TEST(GpuProcessBootstrap, HandlesAreExchangedAndDisagreementIsAnError) {
  const int P = world_size(), me = world_rank();
  gp::HandleExchange ex(MPI_COMM_WORLD, 20);
  gp::IpcHandle h{};
  h[0] = static_cast<unsigned char>(me);
  h[63] = 0xab;
  const auto all = ex.exchange("slots", 4096, h);
  ASSERT_EQ(static_cast<int>(all.size()), P);
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(all[static_cast<std::size_t>(r)][0], r);
    EXPECT_EQ(all[static_cast<std::size_t>(r)][63], 0xab);
  }
  EXPECT_EQ(ex.count(), 1);
  if (P < 2) return;
  // A size that differs on the last rank: every rank throws, naming allocation #1 and the sizes.
  try {
    ex.exchange("heap", me == P - 1 ? 8192 : 4096, h);
    ADD_FAILURE() << "sizes that differ across ranks were accepted";
  } catch (const fc::InvalidArgument& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("symmetric allocation #1 does not agree across ranks"), std::string::npos)
        << w;
    EXPECT_NE(w.find("rank 0 #1 'heap' of 4096 bytes"), std::string::npos) << w;
    EXPECT_NE(w.find("rank " + std::to_string(P - 1) + " #1 'heap' of 8192 bytes"),
              std::string::npos)
        << w;
  }
  // A different order: rank 0 makes 'b' where the others make 'a'.
  try {
    ex.exchange(me == 0 ? "b" : "a", 64, h);
    ADD_FAILURE() << "allocations in different orders were accepted";
  } catch (const fc::InvalidArgument& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("#2 does not agree"), std::string::npos) << w;
    EXPECT_NE(w.find("rank 0 #2 'b' of 64 bytes, rank 1 #2 'a' of 64 bytes"), std::string::npos)
        << w;
  }
}

}  // namespace
