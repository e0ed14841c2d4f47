// The GPU backend's collectives without a GPU: the plans of gpu/collective_plan.cpp (and their
// process-mode forms, gpu/collective_process.hpp) executed on
// the CPU by the same step code the kernel runs (gpu/collective_exec.hpp), under a simulated
// scheduler of resident blocks (each rank's steps dealt round-robin to G blocks, the next block
// to move picked at random among those whose wait is satisfied, as the kernel's persistent blocks
// do), with the wire scales agreed as the launcher agrees them (detail::make_plan), and every
// rank's memory block compared with ref/'s bit for bit: the shared grids of every backend's suite
// (tests/common/collective_cases.hpp, compressed_cases.hpp) for P = 1, 2, 3, 4, 7, 8.
//
// Beside the results, each plan is checked for the protocol the device relies on: no deadlock
// for any block count; every wait's target equals the signals its slot gets in the call; no two
// targets write the same bytes; every scratch byte a step reads was written by a put whose signal
// is the very slot the step waited for (put, signal, wait, read). Process mode's plans
// (Reach::process) run the same way, and no step of theirs reads another rank's buffer at all.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/collective_cases.hpp"
#include "common/compressed_cases.hpp"
#include "fusedcoll/communicator.hpp"
#include "fusedcoll/detail/validate.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "gpu/collective_exec.hpp"
#include "gpu/collective_plan.hpp"
#include "gpu/collective_process.hpp"

namespace {

namespace fc = fusedcoll;
namespace coll = fusedcoll::gpu::coll;
using namespace fctest::collectives;

/// Records the call a rank makes instead of running it, so that a case's per-rank calls can be
/// gathered into one world (the GPU backend's launcher gets all ranks' arguments at once).
struct Recorded {
  std::vector<fc::AllReduceArgs> all_reduce;
  std::vector<fc::ReduceScatterArgs> reduce_scatter;
  std::vector<fc::AllGatherArgs> all_gather;
  std::vector<fc::AllToAllvArgs> all_to_allv;
  std::vector<fc::BroadcastArgs> broadcast;
};

class Recorder final : public fc::Backend {
 public:
  Recorder(int rank, int size, Recorded& out) : rank_(rank), size_(size), out_(out) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  void barrier() override {}
  void embedding_alltoall(const fc::EmbeddingAllToAllArgs&, fc::Mode) override { unexpected(); }
  void gemv_allreduce(const fc::GemvAllReduceArgs&, fc::Mode) override { unexpected(); }
  void gemm_alltoall(const fc::GemmAllToAllArgs&, fc::Mode) override { unexpected(); }
  void all_reduce(const fc::AllReduceArgs& a) override { out_.all_reduce.push_back(a); }
  void all_to_allv(const fc::AllToAllvArgs& a) override { out_.all_to_allv.push_back(a); }
  void reduce_scatter(const fc::ReduceScatterArgs& a) override { out_.reduce_scatter.push_back(a); }
  void all_gather(const fc::AllGatherArgs& a) override { out_.all_gather.push_back(a); }
  void broadcast(const fc::BroadcastArgs& a) override { out_.broadcast.push_back(a); }

 private:
  [[noreturn]] static void unexpected() { throw fc::InternalError("not a collective"); }
  int rank_, size_;
  Recorded& out_;
};

/// One rank's memory: the four buffers of a call, 16-byte aligned, scratch poisoned.
struct RankMemory {
  std::array<std::vector<coll::exec::Unit16>, coll::kNumBufs> buf;
  std::array<unsigned char*, coll::kNumBufs> base() {
    std::array<unsigned char*, coll::kNumBufs> b{};
    for (int i = 0; i < coll::kNumBufs; ++i) b[i] = reinterpret_cast<unsigned char*>(buf[i].data());
    return b;
  }
};

std::string where(const coll::Plan& p, int rank, std::size_t step) {
  std::ostringstream os;
  os << p.name << " rank " << rank << " step " << step;
  return os.str();
}

/// The protocol checks on the plan alone (see the file comment).
void check_protocol(const coll::Plan& p) {
  const auto counts = coll::signal_counts(p);
  // Byte ranges written per (rank, buf), with the signal that publishes each.
  struct Write {
    std::int64_t begin, end;
    int signal_rank, signal_slot;
  };
  std::map<std::pair<int, int>, std::vector<Write>> writes;
  auto width = [&](coll::Access a) {
    return a == coll::Access::wire ? static_cast<std::int64_t>(fc::wire_size(p.wire.format))
                                   : static_cast<std::int64_t>(p.elem);
  };
  for (int r = 0; r < p.P; ++r)
    for (const coll::Step& s : p.steps[r])
      for (int d = s.dst_begin; d < s.dst_begin + s.dst_count; ++d) {
        const coll::Target& t = p.targets[d];
        ASSERT_NE(t.at.buf, coll::Buf::send) << p.name << ": a step writes an input";
        const std::int64_t b = t.at.offset, e = b + s.n * width(t.access);
        ASSERT_LE(e, p.buf_bytes[static_cast<int>(t.at.buf)][t.at.rank])
            << p.name << ": target past its buffer";
        auto& list = writes[{t.at.rank, static_cast<int>(t.at.buf)}];
        for (const Write& w : list)
          ASSERT_FALSE(b < w.end && w.begin < e && b < e)
              << p.name << ": two targets write bytes [" << b << ", " << e << ") of rank "
              << t.at.rank << " buffer " << static_cast<int>(t.at.buf);
        list.push_back({b, e, t.signal_rank, t.signal_slot});
      }
  for (int r = 0; r < p.P; ++r)
    for (std::size_t i = 0; i < p.steps[r].size(); ++i) {
      const coll::Step& s = p.steps[r][i];
      if (s.wait_slot >= 0) {
        ASSERT_GT(counts[r][s.wait_slot], 0u) << where(p, r, i) << " waits for nothing";
      }
      for (int k = s.src_begin; k < s.src_begin + s.src_count; ++k) {
        const coll::Source& src = p.sources[k];
        const std::int64_t b = src.at.offset, e = b + s.n * width(src.access);
        ASSERT_LE(e, p.buf_bytes[static_cast<int>(src.at.buf)][src.at.rank]) << where(p, r, i);
        // Process mode: a step reads its own rank's buffers only (a proxied peer's cannot be
        // read, an IPC peer's input is uploaded whenever that peer gets there).
        if (p.reach == coll::Reach::process) {
          ASSERT_EQ(src.at.rank, r) << where(p, r, i) << " reads rank " << src.at.rank
                                    << "'s buffer in a process-mode plan";
        }
        // Inputs: uploaded before the launch and never a target, so any rank may read them in
        // place (all ranks share one device).
        if (src.at.buf == coll::Buf::send) continue;
        // Scratch: every byte put by a target signalling (r, the step's wait slot).
        ASSERT_EQ(src.at.rank, r) << where(p, r, i) << " reads another rank's scratch";
        std::int64_t covered = 0;
        for (const Write& w : writes[{r, static_cast<int>(src.at.buf)}]) {
          const std::int64_t lo = std::max(b, w.begin), hi = std::min(e, w.end);
          if (lo >= hi) continue;
          ASSERT_EQ(w.signal_rank, r)
              << where(p, r, i) << " reads bytes whose put signals another rank";
          ASSERT_EQ(w.signal_slot, s.wait_slot)
              << where(p, r, i) << " reads bytes published on a slot it does not wait for";
          covered += hi - lo;
        }
        ASSERT_EQ(covered, e - b) << where(p, r, i) << " reads scratch nobody put";
      }
    }
}

/// Runs `plan` on host memory with G simulated blocks per rank (seeded order), downloading into
/// the callers' memory as the launcher does.
void simulate(const coll::Plan& p, int G, std::uint64_t seed) {
  const int P = p.P;
  std::vector<RankMemory> mem(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r)
    for (int b = 0; b < coll::kNumBufs; ++b) {
      auto& v = mem[r].buf[b];
      v.resize(static_cast<std::size_t>(p.buf_bytes[b][r] + 15) / 16 + 1);
      fc::poison(v.data(), v.size() * sizeof(v[0]));
    }
  std::vector<std::array<unsigned char*, coll::kNumBufs>> base;
  for (auto& m : mem) base.push_back(m.base());
  for (const coll::Upload& u : p.uploads)
    std::memcpy(base[u.at.rank][static_cast<int>(u.at.buf)] + u.at.offset, u.host, u.bytes);

  // The agreed scales: every run's |values| folded into one table (the max-AllReduce), then
  // make_plan, exactly what the launcher does after its amax kernel.
  std::vector<float> scales;
  fc::detail::WirePlan wp;
  if (p.compressed()) {
    std::vector<float> table = fc::detail::empty_amax(p.wire);
    for (const coll::AmaxRun& run : p.amax_runs) {
      std::vector<float> y(static_cast<std::size_t>(run.n));
      std::memcpy(y.data(), base[run.rank][0] + run.offset, y.size() * 4);
      if (p.amax_predivide)
        for (float& v : y) v = v / static_cast<float>(P);
      fc::detail::accumulate_amax(p.wire, table, y.data(), run.index0, run.n);
    }
    ASSERT_LE(static_cast<std::int64_t>(table.size()), std::max<std::int64_t>(p.amax_entries, 1));
    wp = fc::detail::make_plan(p.wire, table, p.headroom);
  }

  // Slot ids start past some earlier calls' (the targets are cumulative).
  const int slot0 = 3;
  const auto counts = coll::signal_counts(p);
  std::vector<std::vector<std::uint64_t>> slots(
      P, std::vector<std::uint64_t>(slot0 + p.slot_count, 7));
  const coll::Resolved x =
      coll::resolve(p, base, slot0, [&](int r, int s) { return 7 + counts[r][s]; });
  coll::Exec e{};
  e.P = P;
  e.dtype = static_cast<int>(p.dtype);
  e.op = static_cast<int>(p.reduce);
  e.elem = static_cast<int>(p.elem);
  if (p.compressed())
    e.wire = {static_cast<int>(wp.format), wp.overflow == fc::Overflow::saturate, wp.block,
              wp.scales.empty() ? nullptr : wp.scales.data()};
  e.steps = x.steps.data();
  e.step_begin = x.step_begin.data();
  e.sources = x.sources.data();
  e.targets = x.targets.data();

  struct Block {
    int rank;
    std::vector<int> steps;
    std::size_t next = 0;
  };
  std::vector<Block> blocks;
  for (int r = 0; r < P; ++r)
    for (int g = 0; g < G; ++g) {
      Block b{r, {}};
      for (int i = x.step_begin[r] + g; i < x.step_begin[r + 1]; i += G) b.steps.push_back(i);
      blocks.push_back(std::move(b));
    }
  std::mt19937_64 rng(seed);
  for (;;) {
    std::vector<std::size_t> ready;
    bool left = false;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const Block& b = blocks[i];
      if (b.next == b.steps.size()) continue;
      left = true;
      const coll::XStep& s = x.steps[b.steps[b.next]];
      if (s.wait_slot < 0 || slots[b.rank][s.wait_slot] >= s.wait_target) ready.push_back(i);
    }
    if (!left) break;
    ASSERT_FALSE(ready.empty()) << p.name << ": deadlock with " << G << " blocks per rank";
    Block& b = blocks[ready[rng() % ready.size()]];
    const coll::XStep& s = x.steps[b.steps[b.next++]];
    // Three "threads", one after the other: the striding of the block's threads.
    for (int tid = 0; tid < 3; ++tid) coll::run_step(e, s, tid, 3);
    for (int d = s.dst_begin; d < s.dst_begin + s.dst_count; ++d)
      if (x.targets[d].signal_slot >= 0)
        ++slots[x.targets[d].signal_rank][x.targets[d].signal_slot];
  }
  for (int r = 0; r < P; ++r)
    for (int s = 0; s < p.slot_count; ++s)
      ASSERT_EQ(slots[r][slot0 + s], 7 + counts[r][s]) << p.name << ": rank " << r << " slot " << s;
  for (const coll::Download& d : p.downloads)
    std::memcpy(d.host, base[d.from.rank][static_cast<int>(d.from.buf)] + d.from.offset, d.bytes);
}

template <class Args>
coll::Plan plan_of(std::span<const Args> all, coll::Reach reach) {
  fc::detail::check_world_calls(all);
  if (reach == coll::Reach::process) return coll::process_plan(all);
  if constexpr (std::is_same_v<Args, fc::AllReduceArgs>)
    return coll::plan_all_reduce(all);
  else if constexpr (std::is_same_v<Args, fc::ReduceScatterArgs>)
    return coll::plan_reduce_scatter(all);
  else if constexpr (std::is_same_v<Args, fc::AllGatherArgs>)
    return coll::plan_all_gather(all);
  else if constexpr (std::is_same_v<Args, fc::AllToAllvArgs>)
    return coll::plan_all_to_allv(all);
  else
    return coll::plan_broadcast(all);
}

/// Runs every case through the plan simulation (G blocks per rank), then ref/, and compares.
void run_simulated(Cases& cases, int P, int G, std::uint64_t seed,
                   coll::Reach reach = coll::Reach::device) {
  for (auto& c : cases) {
    Recorded rec;
    for (int r = 0; r < P; ++r) {
      fc::Communicator comm(std::make_shared<Recorder>(r, P, rec));
      c->on_block(comm, c->got[r].data());
    }
    coll::Plan plan;
    if (!rec.all_reduce.empty())
      plan = plan_of<fc::AllReduceArgs>(rec.all_reduce, reach);
    else if (!rec.reduce_scatter.empty())
      plan = plan_of<fc::ReduceScatterArgs>(rec.reduce_scatter, reach);
    else if (!rec.all_gather.empty())
      plan = plan_of<fc::AllGatherArgs>(rec.all_gather, reach);
    else if (!rec.all_to_allv.empty())
      plan = plan_of<fc::AllToAllvArgs>(rec.all_to_allv, reach);
    else
      plan = plan_of<fc::BroadcastArgs>(rec.broadcast, reach);
    SCOPED_TRACE(c->what);
    check_protocol(plan);
    simulate(plan, G, seed++);
    if (::testing::Test::HasFatalFailure()) return;
    c->on_ref();
    for (std::size_t r = 0; r < c->got.size(); ++r) {
      const std::string diff = first_difference(*c, r, "gpu plan");
      if (diff.empty()) continue;
      ADD_FAILURE() << diff;
      break;
    }
  }
}

class GpuPlan : public ::testing::TestWithParam<int> {};

TEST_P(GpuPlan, AllReduceMatchesRef) {
  const int P = GetParam();
  Cases cases;
  add_all_reduce_grid(cases, P, 3 * 16384 * P + 11);
  for (ReduceOp op : kOps)
    for (AllReduceAlgo algo : kAlgos) {
      add_special_values_all_reduce(cases, P, 50, op, algo, 900);
      // Chunks of whole 16-byte units at aligned offsets: the vector fold, with NaNs and infs.
      add_special_values_all_reduce(cases, P, 64 * P, op, algo, 950);
    }
  run_simulated(cases, P, 1 + P % 3, 11);
}

TEST_P(GpuPlan, AllToAllvMatchesRef) {
  const int P = GetParam();
  Cases cases;
  add_all_to_allv_grid(cases, P);
  run_simulated(cases, P, 2, 12);
}

TEST_P(GpuPlan, ReduceScatterMatchesRef) {
  const int P = GetParam();
  Cases cases;
  add_reduce_scatter_grid(cases, P);
  run_simulated(cases, P, 3, 13);
}

TEST_P(GpuPlan, AllGatherMatchesRef) {
  const int P = GetParam();
  Cases cases;
  add_all_gather_grid(cases, P);
  run_simulated(cases, P, 1, 14);
}

TEST_P(GpuPlan, BroadcastMatchesRef) {
  const int P = GetParam();
  Cases cases;
  add_broadcast_grid(cases, P);
  run_simulated(cases, P, 2, 15);
}

TEST_P(GpuPlan, CompressedMatchesRef) {
  const int P = GetParam();
  Cases cases;
  add_compressed(cases, P, 1000);
  add_compressed_large(cases, P, 2000);
  run_simulated(cases, P, 1 + P % 2, 16);
}

TEST_P(GpuPlan, CompressedChainMatchesRef) {
  const int P = GetParam();
  Cases cases;
  add_compressed_chain(cases, P, 3000);
  run_simulated(cases, P, 1 + P % 2, 17);
}

// Process mode's plans: the reductions put every contribution to its owner first (the other
// collectives' plans are the same in both modes), plain and compressed.
TEST_P(GpuPlan, ProcessModeMatchesRef) {
  const int P = GetParam();
  Cases cases;
  add_all_reduce_grid(cases, P, 3 * 16384 * P + 11);
  add_reduce_scatter_grid(cases, P);
  add_all_gather_grid(cases, P);
  add_all_to_allv_grid(cases, P);
  add_broadcast_grid(cases, P);
  add_compressed(cases, P, 4000);
  add_compressed_chain(cases, P, 5000);
  run_simulated(cases, P, 1 + P % 3, 18, coll::Reach::process);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GpuPlan, ::testing::Values(1, 2, 3, 4, 7, 8),
                         [](const auto& p) { return std::to_string(p.param) + "ranks"; });

// The schedule does not depend on how many blocks a rank has or in which order they move.
TEST(GpuPlanSchedule, AnyBlockCountAndOrder) {
  for (int G : {1, 2, 5, 64})
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      Cases cases;
      add_all_reduce(cases, 4, 5 * 16384 + 3, DType::f32, ReduceOp::sum, AllReduceAlgo::ring, false,
                     seed);
      add_all_reduce(
          cases, 4, 5 * 16384 + 3, DType::f32, ReduceOp::avg, AllReduceAlgo::direct, true, seed,
          {.format = fc::WireFormat::fp8_e4m3, .scaling = fc::Scaling::per_block, .block = 333});
      add_all_to_allv(cases, 4, DType::f32, 1000, seed, {.format = fc::WireFormat::bf16});
      add_all_reduce(cases, 4, 5 * 16384 + 3, DType::f32, ReduceOp::sum, AllReduceAlgo::chain,
                     false, seed, {.format = fc::WireFormat::f16});
      run_simulated(cases, 4, G, seed);
    }
}

// The plans are tiled like the emulator's: no segment has more than kMaxTiles tiles, so slot use
// stays bounded whatever the size.
TEST(GpuPlanSchedule, SlotsStayBounded) {
  const std::int64_t n = 1 << 26;
  std::vector<fc::AllReduceArgs> all(8);
  for (auto& a : all) {
    a.send = reinterpret_cast<const void*>(0x1000);
    a.recv = reinterpret_cast<void*>(0x100000000);
    a.count = n;
    a.algo = AllReduceAlgo::ring;
  }
  const coll::Plan p = coll::plan_all_reduce(all);
  EXPECT_LE(p.slot_count, 8 * coll::kMaxTiles + 7 * coll::kMaxTiles + 1);
  for (const auto& steps : p.steps) EXPECT_LE(steps.size(), 8u * coll::kMaxTiles + 1);
  // Compressed chain: one chain and one final slot per tile of the whole buffer.
  for (auto& a : all) {
    a.algo = AllReduceAlgo::chain;
    a.wire.format = fc::WireFormat::fp8_e4m3;
  }
  const coll::Plan c = coll::plan_all_reduce(all);
  EXPECT_LE(c.slot_count, 2 * coll::kMaxTiles);
  for (const auto& steps : c.steps) EXPECT_LE(steps.size(), 2u * coll::kMaxTiles);
}

}  // namespace
