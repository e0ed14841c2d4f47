// fusedcoll-emu-bench: the three fused operators on the emulator, unfused against scale_up and
// scale_out, at three sizes each (docs/results/emulator.md, "Emulator: fused vs unfused").
//
// For every (op, size):
//   1. One set of seeded inputs (fc::make_world) serves every mode; ref/ computes the expected
//      outputs first. Each mode then runs once on a poisoned output and every rank's output is
//      memcmp'd against ref/'s: any difference aborts the benchmark (exit 1).
//   2. One emu::World per (op, size) runs all three modes and is reused for every repetition, so
//      its scratch buffers, signal slots and threads are in place after the warm-up. Not one
//      World per mode: all Worlds of a process share oneTBB's one pool of worker threads, and
//      alternating between Worlds slowed every call, the fused ones more (GemvAllReduce small,
//      61 rounds: unfused 1.15 -> 1.42 ms, scale_out 1.04 -> 1.51 ms). A fused workgroup
//      suspends and is resumed by a task enqueued from another device's thread; apparently those
//      resumes wait for workers still held by the other Worlds' arenas. A real job has one
//      World; so does this benchmark (--world-per-mode shows the other setup).
//   3. Warm-up rounds, then N rounds; each round runs every mode once, in an order shuffled per
//      round (seeded), so that drift of a shared machine affects the three modes alike.
//   4. CPU time of the whole process over the same interval is recorded too: it is immune to
//      time the machine gives to other processes, though it counts spinning idle workers.
//
// What is timed: inside `World::run`, every rank passes a barrier, rank 0 reads the clock, every
// rank calls the op, every rank passes a second barrier, rank 0 reads the clock again. That is
// the op's own time (its entry rendezvous, kernels and exit, up to the slowest rank), without the
// per-run host-thread spawn and join of `World::run`, which is identical for every mode. The time
// of the whole `run()` seen from the host is measured too (--csv prints both).
//
// Flags: -g P (ranks, default 4), -c C (compute units per virtual GPU, default 2), -n N
// (rounds, default 41), -w W (warm-up rounds, default 3), --op emb|gemv|gemm,
// --size small|medium|large (both repeatable filters), --csv (machine-readable rows instead of
// the table), --quick (tiny shapes, 2 repetitions: a smoke test, not a measurement),
// --world-per-mode (one World per mode instead of one shared World, see 2).
//
// --link: instead, the link model's wall-clock accuracy (docs/emulator.md, "Link model";
// docs/benchmarking.md): rank 0 puts to rank 1 and signals, rank 1 waits; the time from the first
// put to rank 1 seeing the signal, against what the model books. The bytes are copied when the
// put is issued, so a trial whose copy outlasts the modelled link time lands when the copy ends:
// the model's time is judged over the trials whose copy finished within 90% of it (at least 3;
// otherwise the case says the machine cannot show that link now). Exit status 1 when a judged
// median is more than 10% off (not with --quick, a smoke run). tests/emu_link_test.cpp checks
// the model's arithmetic exactly.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "emu/runtime.hpp"
#include "emu/state.hpp"
#include "fusedcoll/detail/cli.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"

namespace fc = fusedcoll;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int ranks = 4;
  int compute_units = 2;
  int repeats = 41;
  int warmup = 3;
  bool csv = false;
  bool quick = false;
  bool world_per_mode = false;
  bool link = false;
  std::vector<std::string> ops;    // empty: all
  std::vector<std::string> sizes;  // empty: all
};

constexpr std::array<fc::Mode, 3> kModes = {fc::Mode::unfused, fc::Mode::scale_up,
                                            fc::Mode::scale_out};

struct Stats {
  double median = 0, q1 = 0, q3 = 0, min = 0, max = 0;
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

Stats stats_of(const std::vector<double>& v) {
  Stats s;
  s.median = quantile(v, 0.5);
  s.q1 = quantile(v, 0.25);
  s.q3 = quantile(v, 0.75);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// One (op, size) case, type-erased: the per-rank call, and access to every rank's output.
struct Case {
  std::string op, size, shape;
  std::function<void(fc::Communicator&, fc::Mode)> call;
  std::function<void()> ref;                                             // ref/ on the same inputs
  std::function<std::vector<std::pair<float*, std::size_t>>()> outputs;  // per rank
};

template <class Problem, class RefFn, class EmuFn, class OutFn>
Case make_case(std::string op, std::string size, std::string shape, const Problem& problem,
               RefFn ref_fn, EmuFn emu_fn, OutFn out_fn) {
  // Shared by the closures: the inputs and outputs of every rank, and their argument views.
  auto world = std::make_shared<decltype(fc::make_world(problem))>(fc::make_world(problem));
  auto args = std::make_shared<decltype(fc::args_of(*world))>(fc::args_of(*world));
  Case c;
  c.op = std::move(op);
  c.size = std::move(size);
  c.shape = std::move(shape);
  c.call = [args, emu_fn](fc::Communicator& comm, fc::Mode mode) {
    emu_fn(comm, (*args)[static_cast<std::size_t>(comm.rank())], mode);
  };
  c.ref = [args, ref_fn] { ref_fn(*args); };
  c.outputs = [world, out_fn] {
    std::vector<std::pair<float*, std::size_t>> out;
    for (auto& r : *world) {
      auto& v = out_fn(r);
      out.emplace_back(v.data(), v.size());
    }
    return out;
  };
  return c;
}

// --- the problems: medium = the library's default shape for P ranks; small ~ 1/8 and large ~ 4x
// --- the work of medium, scaled along the axis that grows in practice.

fc::EmbeddingProblem embedding_problem(int P, const std::string& size, bool quick) {
  auto p = fc::EmbeddingProblem::dlrm(P);  // 8 tables/rank of 10k..14k rows, D 64, batch 256/rank
  std::int64_t batch = size == "small" ? 32 : size == "large" ? 1024 : 256;  // samples per rank
  if (quick) {
    batch = 8;
    for (auto& r : p.table_rows) r = 100;
  }
  p.batch_sizes.assign(static_cast<std::size_t>(P), batch);
  return p;
}

fc::GemvProblem gemv_problem(int P, const std::string& size, bool quick) {
  auto p = fc::GemvProblem::transformer(P);  // M 4, N 4096, K 11008
  std::int64_t n = 4096, k = 11008;
  if (size == "small") n = 1024, k = 5504;   // 1/8 the weights
  if (size == "large") n = 8192, k = 22016;  // 4x the weights
  if (quick) n = 256, k = 512;
  p.n = n;
  p.k_splits = fc::split_evenly(k, P);
  return p;
}

fc::GemmProblem gemm_problem(int P, const std::string& size, bool quick) {
  auto p = fc::GemmProblem::moe(P);  // 2 experts/rank, K 1024, N 512, ~256 rows per source
  // Tokens routed: counts uniform in [0, max_rows] per (source, expert); moe() uses 64 at P = 4.
  const std::int64_t base = 2 * 256 / p.num_experts();
  std::int64_t max_rows = size == "small" ? base / 8 : size == "large" ? base * 4 : base;
  if (quick) {
    p.k = 64;
    p.n = 64;
    max_rows = 8;
  }
  p.random_routing(max_rows);
  return p;
}

std::int64_t total_rows(const fc::GemmProblem& p) {
  std::int64_t rows = 0;
  for (auto c : p.counts) rows += c;
  return rows;
}

Case build_case(const std::string& op, const std::string& size, const Options& o) {
  const int P = o.ranks;
  if (op == "emb") {
    const auto p = embedding_problem(P, size, o.quick);
    return make_case(
        "EmbeddingAllToAll", size,
        "T=" + std::to_string(p.num_tables()) + " D=" + std::to_string(p.dim) +
            " B=" + std::to_string(p.global_batch()) + " bags " + std::to_string(p.min_bag) + ".." +
            std::to_string(p.max_bag),
        p, [](std::vector<fc::EmbeddingAllToAllArgs>& a) { fc::ref::embedding_alltoall(a); },
        [](fc::Communicator& c, const fc::EmbeddingAllToAllArgs& a, fc::Mode m) {
          fc::embedding_alltoall(c, a, m);
        },
        [](fc::EmbeddingRankData& d) -> std::vector<float>& { return d.output; });
  }
  if (op == "gemv") {
    const auto p = gemv_problem(P, size, o.quick);
    return make_case(
        "GemvAllReduce", size,
        "M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k()), p,
        [](std::vector<fc::GemvAllReduceArgs>& a) { fc::ref::gemv_allreduce(a); },
        [](fc::Communicator& c, const fc::GemvAllReduceArgs& a, fc::Mode m) {
          fc::gemv_allreduce(c, a, m);
        },
        [](fc::GemvRankData& d) -> std::vector<float>& { return d.y; });
  }
  const auto p = gemm_problem(P, size, o.quick);
  return make_case(
      "GemmAllToAll", size,
      "E=" + std::to_string(p.num_experts()) + " K=" + std::to_string(p.k) +
          " N=" + std::to_string(p.n) + " rows=" + std::to_string(total_rows(p)),
      p, [](std::vector<fc::GemmAllToAllArgs>& a) { fc::ref::gemm_alltoall(a); },
      [](fc::Communicator& c, const fc::GemmAllToAllArgs& a, fc::Mode m) {
        fc::gemm_alltoall(c, a, m);
      },
      [](fc::GemmRankData& d) -> std::vector<float>& { return d.output; });
}

struct Sample {
  double op_ms = 0;   // barrier; op; barrier, on rank 0 (wall clock)
  double cpu_ms = 0;  // CPU time of the whole process over the same interval (all threads)
  double run_ms = 0;  // the whole World::run from the host (wall clock)
};

/// CPU time consumed so far by every thread of this process.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

/// One repetition: one `World::run` with the op inside, timed both ways.
Sample run_once(fc::emu::World& world, const Case& c, fc::Mode mode) {
  Clock::time_point t0, t1;
  double c0 = 0, c1 = 0;
  const auto r0 = Clock::now();
  world.run([&](fc::Communicator& comm) {
    fc::barrier(comm);
    if (comm.rank() == 0) {
      t0 = Clock::now();
      c0 = process_cpu_ms();
    }
    c.call(comm, mode);
    fc::barrier(comm);
    if (comm.rank() == 0) {
      t1 = Clock::now();
      c1 = process_cpu_ms();
    }
  });
  const auto r1 = Clock::now();
  return {ms_between(t0, t1), c1 - c0, ms_between(r0, r1)};
}

struct Result {
  std::array<std::vector<Sample>, 3> samples;
};

Result measure(const Case& c, const Options& o) {
  // Expected outputs from ref/, on the very inputs the emulator will read.
  c.ref();
  std::vector<std::vector<float>> expect;
  for (auto [data, n] : c.outputs()) expect.emplace_back(data, data + n);

  // One World serves the three modes (see the file comment for why not one World per mode);
  // --world-per-mode gives each mode its own, to show the effect.
  std::vector<std::unique_ptr<fc::emu::World>> worlds;
  for (int m = 0; m < (o.world_per_mode ? 3 : 1); ++m)
    worlds.push_back(std::make_unique<fc::emu::World>(fc::emu::WorldOptions{
        .world_size = o.ranks, .device = {.compute_units = o.compute_units}}));
  auto world_of = [&](std::size_t m) -> fc::emu::World& {
    return *worlds[o.world_per_mode ? m : 0];
  };

  // Verify every mode once, bit for bit, before any timing.
  for (std::size_t m = 0; m < kModes.size(); ++m) {
    for (auto [data, n] : c.outputs()) fc::poison(data, n * sizeof(float));
    run_once(world_of(m), c, kModes[m]);
    const auto got = c.outputs();
    for (std::size_t r = 0; r < got.size(); ++r) {
      if (got[r].second != expect[r].size() ||
          std::memcmp(got[r].first, expect[r].data(), expect[r].size() * sizeof(float)) != 0) {
        std::fprintf(stderr,
                     "fusedcoll-emu-bench: %s %s (%s): rank %zu's output in mode %s differs from "
                     "ref/\n",
                     c.op.c_str(), c.size.c_str(), c.shape.c_str(), r, fc::to_string(kModes[m]));
        std::exit(1);
      }
    }
  }

  // Rounds: every mode once per round, in an order shuffled per round (seeded, so reruns see the
  // same orders), so that no mode always follows the same other one.
  std::mt19937 rng(20240603);
  std::array<std::size_t, 3> order = {0, 1, 2};
  for (int i = 0; i < o.warmup; ++i)
    for (std::size_t m : order) run_once(world_of(m), c, kModes[m]);
  Result res;
  for (int i = 0; i < o.repeats; ++i) {
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t m : order) res.samples[m].push_back(run_once(world_of(m), c, kModes[m]));
  }
  return res;
}

std::vector<double> op_times(const std::vector<Sample>& s) {
  std::vector<double> v;
  for (const auto& x : s) v.push_back(x.op_ms);
  return v;
}
std::vector<double> cpu_times(const std::vector<Sample>& s) {
  std::vector<double> v;
  for (const auto& x : s) v.push_back(x.cpu_ms);
  return v;
}
std::vector<double> run_times(const std::vector<Sample>& s) {
  std::vector<double> v;
  for (const auto& x : s) v.push_back(x.run_ms);
  return v;
}
/// Median over repetitions i of fused_i / unfused_i: the ratio within each interleaved round.
double paired_ratio(const std::vector<Sample>& fused, const std::vector<Sample>& unfused) {
  std::vector<double> r;
  for (std::size_t i = 0; i < fused.size(); ++i) r.push_back(fused[i].op_ms / unfused[i].op_ms);
  return quantile(r, 0.5);
}

// --- --link: the link model against the wall clock.

struct LinkTrial {
  double copy_ms = 0;      // rank 0's puts, from issue to return (the host copies the bytes)
  double delivery_ms = 0;  // from issuing the first put to rank 1 observing the signal
};

/// `trials` times: rank 0 issues `puts` puts of `bytes` each, then one signal; rank 1 waits.
std::vector<LinkTrial> link_trials(fc::emu::World& world, std::size_t bytes, int puts,
                                   int trials) {
  using fc::emu::WgContext;
  using fc::emu::WgTask;
  std::vector<Clock::time_point> sent(trials), copied(trials), got(trials);
  std::vector<std::byte> src(bytes * puts, std::byte{1});
  world.run([&](fc::Communicator& comm) {
    auto& rk = *world.state().ranks[comm.rank()];
    const auto box = rk.alloc(bytes * puts, "box");
    const int slot = rk.slots("delivered", 1);
    for (int t = 0; t < trials; ++t) {
      rk.begin_op();
      rk.barrier("trial");
      const std::uint64_t target = rk.expect(slot, comm.rank() == 1 ? 1 : 0);
      rk.launch("transfer", 1, [&](WgContext& wg) -> WgTask {
        if (wg.rank() == 0) {
          sent[t] = Clock::now();
          for (int i = 0; i < puts; ++i) wg.put(1, box, i * bytes, src.data() + i * bytes, bytes);
          copied[t] = Clock::now();
          wg.signal(1, slot, fc::emu::SignalOp::add, 1);
        } else {
          co_await wg.wait_until(slot, fc::emu::Cmp::ge, target);
          got[t] = Clock::now();
        }
        co_return;
      });
    }
  });
  std::vector<LinkTrial> out;
  for (int t = 0; t < trials; ++t) out.push_back({ms_between(sent[t], copied[t]), ms_between(sent[t], got[t])});
  return out;
}

/// Runs the link cases; returns the exit status (1 when a judged median is more than 10% off).
int link_bench(const Options& o) {
  struct LinkCase {
    double gbps, latency_us;
    std::size_t bytes;
    int puts;
  };
  const int trials = o.quick ? 2 : 15;
  const std::size_t mib = std::size_t{1} << 20;
  std::vector<LinkCase> cases = {{10, 0, 64 * mib, 1}, {1, 0, 64 * mib, 1}, {1, 5000, 4 * mib, 4}};
  if (o.quick) cases = {{1, 0, 4 * mib, 1}, {1, 1000, mib, 4}};  // a smoke run: never judged
  std::printf("fusedcoll %s emu bench --link: 2 virtual GPUs x 1 compute unit, %d trials per "
              "case\n"
              "delivery: first put issued -> rank 1 sees the signal; copy: the puts' host memcpy\n"
              "judged: median delivery of the trials whose copy took < 90%% of the model's time\n\n",
              fc::kVersion, trials);
  std::printf("%-9s %-8s %-13s %9s | %9s %9s | %6s %9s %7s\n", "link", "latency", "puts",
              "model ms", "delivery", "copy ms", "judged", "median", "off");
  int status = 0;
  for (const LinkCase& c : cases) {
    fc::emu::World world({.world_size = 2, .device = {.compute_units = 1}, .timeout_s = 60,
                          .link_gbps = c.gbps, .link_latency_us = c.latency_us});
    const double model_ms =
        static_cast<double>(c.bytes * c.puts) / (c.gbps * 1e9) * 1e3 + c.latency_us / 1e3;
    std::vector<double> delivery, copy, fast;
    for (const LinkTrial& t : link_trials(world, c.bytes, c.puts, trials)) {
      delivery.push_back(t.delivery_ms);
      copy.push_back(t.copy_ms);
      if (t.copy_ms < 0.9 * model_ms) fast.push_back(t.delivery_ms);
    }
    char link[32], latency[32], puts[32];
    std::snprintf(link, sizeof link, "%g GB/s", c.gbps);
    std::snprintf(latency, sizeof latency, "%g us", c.latency_us);
    std::snprintf(puts, sizeof puts, "%d x %zu KiB", c.puts, c.bytes >> 10);
    std::printf("%-9s %-8s %-13s %9.2f | %9.2f %9.2f | %2zu/%-3d", link, latency, puts, model_ms,
                quantile(delivery, 0.5), quantile(copy, 0.5), fast.size(), trials);
    if (fast.size() < std::min<std::size_t>(3, static_cast<std::size_t>(trials))) {
      std::printf(" %9s %7s  (copies too slow: this machine cannot show this link now)\n", "-",
                  "-");
    } else {
      const double m = quantile(fast, 0.5), off = m / model_ms - 1;
      std::printf(" %9.2f %+6.1f%%%s\n", m, 100 * off, std::abs(off) > 0.1 ? "  OFF BY > 10%" : "");
      if (std::abs(off) > 0.1 && !o.quick) status = 1;
    }
    std::fflush(stdout);
  }
  return status;
}

void usage(const char* argv0) {
  std::printf(
      "usage: %s [-g P] [-c C] [-n N] [-w W] [--op emb|gemv|gemm]... "
      "[--size small|medium|large]... [--csv] [--quick] [--world-per-mode] [--link]\n"
      "  Times EmbeddingAllToAll, GemvAllReduce and GemmAllToAll on the emulator (P virtual GPUs\n"
      "  of C compute units each), unfused vs fused scale_up and scale_out, after checking every\n"
      "  output bit for bit against ref/. Medians of N rounds; each round runs every mode once.\n"
      "  A compute unit is one worker-thread slot of a device's oneTBB arena: P x C threads in\n"
      "  all, and at most 4 x C workgroups resident per device.\n"
      "  --link: the link model's delivery times against the wall clock instead.\n",
      argv0);
}

bool wanted(const std::vector<std::string>& filter, const std::string& x) {
  return filter.empty() || std::find(filter.begin(), filter.end(), x) != filter.end();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](int lo, int hi) {
      const std::string text = next();
      try {
        return fc::detail::cli::parse_int(arg, text, lo, hi);
      } catch (const fc::InvalidArgument& e) {
        std::fprintf(stderr, "%s\n", e.what());
        std::exit(2);
      }
    };
    if (arg == "-g" || arg == "--ranks")
      o.ranks = number(1, 64);
    else if (arg == "-c" || arg == "--cus")
      o.compute_units = number(1, 64);
    else if (arg == "-n" || arg == "--repeats")
      o.repeats = number(1, 100000);
    else if (arg == "-w" || arg == "--warmup")
      o.warmup = number(0, 1000);
    else if (arg == "--op")
      o.ops.push_back(next());
    else if (arg == "--size")
      o.sizes.push_back(next());
    else if (arg == "--csv")
      o.csv = true;
    else if (arg == "--quick")
      o.quick = true;
    else if (arg == "--world-per-mode")
      o.world_per_mode = true;
    else if (arg == "--link")
      o.link = true;
    else if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", arg.c_str());
      usage(argv[0]);
      return 2;
    }
  }
  for (const auto& op : o.ops)
    if (op != "emb" && op != "gemv" && op != "gemm") {
      std::fprintf(stderr, "--op takes emb, gemv or gemm, not '%s'\n", op.c_str());
      return 2;
    }
  for (const auto& s : o.sizes)
    if (s != "small" && s != "medium" && s != "large") {
      std::fprintf(stderr, "--size takes small, medium or large, not '%s'\n", s.c_str());
      return 2;
    }
  if (o.quick) {
    o.repeats = std::min(o.repeats, 2);
    o.warmup = std::min(o.warmup, 1);
    if (o.sizes.empty()) o.sizes = {"small"};  // the quick shapes ignore the size
  }

  try {
    if (o.link) return link_bench(o);
    if (o.csv) {
      std::printf(
          "op,size,shape,mode,median_ms,q1_ms,q3_ms,min_ms,max_ms,ratio_of_medians,"
          "median_paired_ratio,cpu_median_ms,cpu_ratio_of_medians,run_median_ms\n");
    } else {
      std::printf(
          "fusedcoll %s emu bench: %d virtual GPUs x %d compute units (%d worker threads), "
          "max_resident_wgs %d\n"
          "(a compute unit is one worker-thread slot of a device's oneTBB arena)\n"
          "%d warm-up rounds, then %d timed rounds; a round runs every mode once, shuffled\n"
          "time: barrier; op; barrier inside World::run, on rank 0 (no thread spawn)\n"
          "communication is a memcpy (no link model): this measures the fused kernels' cost\n\n",
          fc::kVersion, o.ranks, o.compute_units, o.ranks * o.compute_units, 4 * o.compute_units,
          o.warmup, o.repeats);
      std::printf("%-17s %-6s %-29s %8s | %8s %5s %6s | %9s %5s %6s\n", "", "", "", "unfused",
                  "scale-up", "", "", "scale-out", "", "");
      std::printf("%-17s %-6s %-29s %8s | %8s %5s %6s | %9s %5s %6s\n", "op", "size", "shape", "ms",
                  "ms", "ratio", "paired", "ms", "ratio", "paired");
    }
    std::fflush(stdout);
    struct Row {
      std::string op, size;
      std::array<Stats, 3> time, cpu;
    };
    std::vector<Row> rows;
    for (const std::string op : {"emb", "gemv", "gemm"}) {
      if (!wanted(o.ops, op)) continue;
      for (const std::string size : {"small", "medium", "large"}) {
        if (!wanted(o.sizes, size)) continue;
        const Case c = build_case(op, size, o);
        const Result r = measure(c, o);
        Row row{c.op, c.size, {}, {}};
        std::array<double, 3> paired{1.0, 1.0, 1.0};
        for (std::size_t m = 0; m < 3; ++m) {
          row.time[m] = stats_of(op_times(r.samples[m]));
          row.cpu[m] = stats_of(cpu_times(r.samples[m]));
          if (m > 0) paired[m] = paired_ratio(r.samples[m], r.samples[0]);
        }
        const auto& st = row.time;
        if (o.csv) {
          for (std::size_t m = 0; m < 3; ++m)
            std::printf("%s,%s,%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n",
                        c.op.c_str(), c.size.c_str(), c.shape.c_str(), fc::to_string(kModes[m]),
                        st[m].median, st[m].q1, st[m].q3, st[m].min, st[m].max,
                        st[m].median / st[0].median, paired[m], row.cpu[m].median,
                        row.cpu[m].median / row.cpu[0].median,
                        stats_of(run_times(r.samples[m])).median);
        } else {
          std::printf("%-17s %-6s %-29s %8.3f | %8.3f %5.2f %6.2f | %9.3f %5.2f %6.2f\n",
                      c.op.c_str(), c.size.c_str(), c.shape.c_str(), st[0].median, st[1].median,
                      st[1].median / st[0].median, paired[1], st[2].median,
                      st[2].median / st[0].median, paired[2]);
        }
        std::fflush(stdout);
        rows.push_back(std::move(row));
      }
    }
    if (!o.csv) {
      std::printf(
          "\nms: median over the rounds; ratio: fused median / unfused median; paired: median "
          "over\n"
          "the rounds of fused / unfused within the round (lower is better). Every mode's output\n"
          "was checked bit for bit against ref/ before timing.\n\n");
      std::printf("%-17s %-6s | %-35s | %-23s | %s\n", "spread", "", "IQR ms: unfused / up / out",
                  "min ms: unfused/up/out", "cpu ratio up, out");
      for (const Row& row : rows) {
        const auto& st = row.time;
        char iqr[96], mins[64];
        std::snprintf(iqr, sizeof iqr, "%.2f-%.2f / %.2f-%.2f / %.2f-%.2f", st[0].q1, st[0].q3,
                      st[1].q1, st[1].q3, st[2].q1, st[2].q3);
        std::snprintf(mins, sizeof mins, "%.2f / %.2f / %.2f", st[0].min, st[1].min, st[2].min);
        std::printf("%-17s %-6s | %-35s | %-23s | %.2f, %.2f\n", row.op.c_str(), row.size.c_str(),
                    iqr, mins, row.cpu[1].median / row.cpu[0].median,
                    row.cpu[2].median / row.cpu[0].median);
      }
      std::printf(
          "\ncpu ratio: median CPU time of the whole process (all threads) over the same "
          "interval,\n"
          "fused / unfused; it does not count time the machine gave to other processes.\n");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedcoll-emu-bench: error: %s\n", e.what());
    return 1;
  }
}
