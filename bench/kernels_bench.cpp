// fusedcoll-kernel-bench: the shared tile kernels (core/kernels.cpp) next to reference points, all
// measured in one run with the repetitions randomly interleaved, so that drift of a noisy machine
// hits every measurement alike. Ends with a table of ratios computed from the medians.
//
//   gemm_tile 512^3 (one tile)   vs  Eigen's single-threaded SGEMM, built with the project's
//                                    default flags (SSE2 only) and with -mavx2 -mfma
//   embedding_bag_rows (DLRM)    vs  memcpy of 256 MiB
//   gemv_rows, reduce_into       (memory-bound; the cost model's host calibration reads them,
//                                 scripts/calibrate-host-preset)
//   gemm_tile on GemmAllToAll's tile (16 x 64 of a K = 1024, N = 512 expert), embedding_bag_rows
//                                 on EmbeddingProblem::dlrm's tables, memcpy on every core at once
//                                 (the cost model's host calibration: the operators' shapes, the
//                                 node's memory bandwidth)
//   memcpy on every core at once over working sets of 16-192 MiB in all (memcpy/node/ws*): where
//                                 the last-level cache ends and how fast it is (the host
//                                 calibration's cache_mib and cache_gbps)
//
// Byte convention for both GB/s figures: bytes read + bytes written (rows gathered x D x 4 plus
// the pooled output; twice the size for memcpy). 1 GB = 1e9 bytes.
//
// Flags: --quick (tiny sizes, two repetitions: a smoke test), plus every Google Benchmark flag;
// the defaults set below come first on the command line, so a flag given by the caller wins.

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"

#if !defined(FUSEDCOLL_BENCH_NO_EIGEN_NATIVE)
namespace fusedcoll::bench {
// bench/eigen_native.cpp, compiled with -mavx2 -mfma.
void eigen_native_gemm(const float* a, const float* b, float* c, std::int64_t n);
}  // namespace fusedcoll::bench
#endif

namespace {

using std::int64_t;

struct Sizes {
  int64_t gemm_n;      // square GEMM, computed as a single tile
  int64_t table_rows;  // embedding table [table_rows, dim] f32
  int64_t dim;
  int64_t bags;        // bags per call
  int64_t bag_len;     // indices per bag
  int64_t index_sets;  // distinct index arrays, cycled per iteration, so that no call re-reads
                       // the rows of the previous one from cache
  int64_t copy_bytes;  // memcpy size
  int64_t gemv_n;      // GEMV: W is [gemv_n, gemv_k], x is [4, gemv_k] (a decode step's M)
  int64_t gemv_k;
  int64_t reduce_count;  // reduce_into: f32 elements per operand
  const char* repetitions;
  const char* min_time;
};

// Full: the table (256 MiB) and the memcpy buffers are 8x the 32 MiB L3 of the AMD EPYC VM and
// 2.5x the ~100 MiB the Intel Xeon VM's cores get (its memcpy/node/ws sweep; it reports 480 MiB).
// GEMV: W of 16,384 x 5,504 (one rank's of GemvAllReduce at 2 ranks, N = 16384: the 256K cell of
// docs/results/model-validation) is 361 MB: the operators stream their W from memory (90 MB-1.4
// GB a rank), and a W that fits the cache ran 1.45x faster (45 MB: 17.5 GB/s against 12 beyond,
// 2026-11-29, docs/simulation.md). Reduce: two operands of 128 MiB. Both exceed the cache.
constexpr Sizes kFullSizes{512,  512 * 1024,        128, 4096, 32, 8, int64_t{256} << 20, 16384,
                           5504, int64_t{32} << 20, "7", "0.5"};
constexpr Sizes kQuickSizes{
    64, 4096, 128, 64, 32, 2, int64_t{4} << 20, 256, 256, int64_t{1} << 16, "2", "0.01"};

// Page-aligned, fully written before any timing, so page faults stay out of the measurements.
struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
template <class T>
using Buffer = std::unique_ptr<T[], FreeDeleter>;

template <class T>
Buffer<T> make_buffer(int64_t count) {
  constexpr std::size_t kAlign = 4096;
  const std::size_t bytes = (count * sizeof(T) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) {
    std::fprintf(stderr, "fusedcoll-kernel-bench: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  std::memset(p, 0, bytes);
  return Buffer<T>(static_cast<T*>(p));
}

void fill_uniform(float* p, int64_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < count; ++i) p[i] = dist(rng);
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void eigen_default_gemm(const float* a, const float* b, float* c, int64_t n) {
  const Eigen::Map<const RowMatrix> am(a, n, n);
  const Eigen::Map<const RowMatrix> bm(b, n, n);
  Eigen::Map<RowMatrix> cm(c, n, n);
  cm.noalias() = am * bm;
}

#if !defined(FUSEDCOLL_BENCH_NO_EIGEN_NATIVE)
bool cpu_has_avx2_fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

// Keeps the console output and remembers the median of every counter (or the single value when
// the caller asked for one repetition).
class MedianReporter : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal: a reporter passed in does not see --benchmark_color.
  MedianReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& reports) override {
    ConsoleReporter::ReportRuns(reports);
    for (const Run& run : reports) {
      if (run.error_occurred) continue;
      const std::string& name = run.run_name.function_name;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      const bool single = run.run_type == Run::RT_Iteration && run.repetitions <= 1;
      if (!median && !single) continue;
      for (const auto& [counter, value] : run.counters) values_[name][counter] = value.value;
    }
  }

  // NaN when the benchmark did not run (filtered out, or not registered on this CPU).
  double value(const std::string& benchmark, const std::string& counter) const {
    const auto it = values_.find(benchmark);
    if (it == values_.end()) return std::nan("");
    const auto jt = it->second.find(counter);
    return jt == it->second.end() ? std::nan("") : jt->second;
  }

 private:
  std::map<std::string, std::map<std::string, double>> values_;
};

void print_value_row(const char* what, double value, const char* unit) {
  if (std::isnan(value)) {
    std::printf("  %-58s %10s\n", what, "not run");
  } else {
    std::printf("  %-58s %10.2f %s\n", what, value, unit);
  }
}

void print_ratio_row(const char* what, double num, double den, const char* target) {
  if (std::isnan(num) || std::isnan(den) || den == 0.0) {
    std::printf("  %-58s %10s   %s\n", what, "n/a", target);
  } else {
    std::printf("  %-58s %10.2f   %s\n", what, num / den, target);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<char*> user_args;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--quick") {
      quick = true;
    } else {
      user_args.push_back(argv[i]);
    }
  }
  const Sizes& sz = quick ? kQuickSizes : kFullSizes;

  std::vector<std::string> defaults = {
      std::string("--benchmark_repetitions=") + sz.repetitions,
      "--benchmark_enable_random_interleaving=true",
      "--benchmark_report_aggregates_only=true",
      std::string("--benchmark_min_time=") + sz.min_time,
  };
  std::vector<char*> args = {argv[0]};
  for (std::string& d : defaults) args.push_back(d.data());
  args.insert(args.end(), user_args.begin(), user_args.end());
  int bench_argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&bench_argc, args.data());
  if (benchmark::ReportUnrecognizedArguments(bench_argc, args.data())) return 1;

  Eigen::setNbThreads(1);
  std::mt19937_64 rng(20240601);

  // --- GEMM: A, B, C row-major n x n ---
  const int64_t n = sz.gemm_n;
  Buffer<float> ga = make_buffer<float>(n * n);
  Buffer<float> gb = make_buffer<float>(n * n);
  Buffer<float> gc = make_buffer<float>(n * n);
  Buffer<float> ge = make_buffer<float>(n * n);
  fill_uniform(ga.get(), n * n, rng);
  fill_uniform(gb.get(), n * n, rng);
  // Guard against timing a wrong product: the kernel and Eigen must agree to rounding.
  fusedcoll::detail::gemm_tile(ga.get(), n, gb.get(), n, gc.get(), n, n, n, n);
  eigen_default_gemm(ga.get(), gb.get(), ge.get(), n);
  double max_diff = 0.0;
  for (int64_t i = 0; i < n * n; ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(gc[i] - ge[i])));
  }
  if (!(max_diff < 1e-3)) {
    std::fprintf(stderr, "gemm_tile and Eigen disagree: max |diff| = %g\n", max_diff);
    return 1;
  }
  const double gflop = 2.0 * static_cast<double>(n) * n * n * 1e-9;
  const std::string gemm_suffix = "/" + std::to_string(n);

  const std::string gemm_name = "gemm_tile" + gemm_suffix;
  benchmark::RegisterBenchmark(
      gemm_name.c_str(),
      [&](benchmark::State& state) {
        for (auto _ : state) {
          fusedcoll::detail::gemm_tile(ga.get(), n, gb.get(), n, gc.get(), n, n, n, n);
          benchmark::DoNotOptimize(gc.get());
          benchmark::ClobberMemory();
        }
        state.counters["GFLOP/s"] =
            benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  const std::string eigen_name = "eigen_gemm_default_flags" + gemm_suffix;
  benchmark::RegisterBenchmark(eigen_name.c_str(),
                               [&](benchmark::State& state) {
                                 for (auto _ : state) {
                                   eigen_default_gemm(ga.get(), gb.get(), ge.get(), n);
                                   benchmark::DoNotOptimize(ge.get());
                                   benchmark::ClobberMemory();
                                 }
                                 state.counters["GFLOP/s"] = benchmark::Counter(
                                     gflop, benchmark::Counter::kIsIterationInvariantRate);
                               })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  const std::string eigen_native_name = "eigen_gemm_avx2_fma" + gemm_suffix;
#if !defined(FUSEDCOLL_BENCH_NO_EIGEN_NATIVE)
  if (cpu_has_avx2_fma()) {
    benchmark::RegisterBenchmark(
        eigen_native_name.c_str(),
        [&](benchmark::State& state) {
          for (auto _ : state) {
            fusedcoll::bench::eigen_native_gemm(ga.get(), gb.get(), ge.get(), n);
            benchmark::DoNotOptimize(ge.get());
            benchmark::ClobberMemory();
          }
          state.counters["GFLOP/s"] =
              benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
#endif

  // --- gemm_tile on the operators' tile: rows x kColBlock of an expert's K x N weights, the
  // panels taken in turn as GemmAllToAll's tiles are; the cost model's gemm efficiency is this
  // rate over the 512^3 one (docs/simulation.md, "Calibrating a preset").
  constexpr int64_t kTileRows = 16, kTileCols = 64, kTileK = 1024, kTileN = 512;
  Buffer<float> ta = make_buffer<float>(kTileRows * kTileK);
  Buffer<float> tw = make_buffer<float>(kTileK * kTileN);
  Buffer<float> tc = make_buffer<float>(kTileRows * kTileN);
  fill_uniform(ta.get(), kTileRows * kTileK, rng);
  fill_uniform(tw.get(), kTileK * kTileN, rng);
  // 1 and 8 rows as well: a partial tile's cost (the panel's packing does not shrink with its
  // rows, and the micro-kernel computes whole blocks of `gemm_tile_row_block()` rows), which
  // the model's `device.gemm_pack_rows` prices.
  for (const int64_t rows : {kTileRows, int64_t{8}, int64_t{1}}) {
    const double tile_gflop = 2.0 * rows * kTileCols * kTileK * 1e-9;
    const std::string tile_name = "gemm_tile/op" + std::to_string(rows) + "x64x1024";
    benchmark::RegisterBenchmark(
        tile_name.c_str(),
        [&, rows, tile_gflop](benchmark::State& state) {
          int64_t panel = 0;
          for (auto _ : state) {
            fusedcoll::detail::gemm_tile(ta.get(), kTileK, tw.get() + panel * kTileCols, kTileN,
                                         tc.get() + panel * kTileCols, kTileN, rows, kTileCols,
                                         kTileK);
            benchmark::DoNotOptimize(tc.get());
            benchmark::ClobberMemory();
            panel = (panel + 1) % (kTileN / kTileCols);
          }
          state.counters["GFLOP/s"] =
              benchmark::Counter(tile_gflop, benchmark::Counter::kIsIterationInvariantRate);
          state.counters["row_block"] = fusedcoll::detail::gemm_tile_row_block();
        })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }

  // The same 16-row tile with its panel in memory, not cache: each call takes a panel of the next
  // of 32 experts' weights (64 MiB in all), so a panel comes back only after 64 MiB of others.
  // GemmAllToAll's first tile on each panel of a call packs it so (the model's
  // `device.gemm_cold_gbps`).
  constexpr int64_t kColdExperts = 32;
  Buffer<float> cold_w = make_buffer<float>(kColdExperts * kTileK * kTileN);
  fill_uniform(cold_w.get(), kColdExperts * kTileK * kTileN, rng);
  benchmark::RegisterBenchmark(
      "gemm_tile/op16x64x1024/cold",
      [&](benchmark::State& state) {
        int64_t i = 0;
        for (auto _ : state) {
          const int64_t expert = i % kColdExperts, panel = (i / kColdExperts) % (kTileN / kTileCols);
          fusedcoll::detail::gemm_tile(ta.get(), kTileK,
                                       cold_w.get() + expert * kTileK * kTileN + panel * kTileCols,
                                       kTileN, tc.get() + panel * kTileCols, kTileN, kTileRows,
                                       kTileCols, kTileK);
          benchmark::DoNotOptimize(tc.get());
          benchmark::ClobberMemory();
          ++i;
        }
        state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kTileRows * kTileCols * kTileK * 1e-9,
                                                       benchmark::Counter::kIsIterationInvariantRate);
      })
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);

  // --- Embedding: one table, `bags` bags of `bag_len` uniform random rows, sum pooling ---
  const int64_t dim = sz.dim;
  const int64_t bags = sz.bags;
  const int64_t per_set = bags * sz.bag_len;
  Buffer<float> table = make_buffer<float>(sz.table_rows * dim);
  fill_uniform(table.get(), sz.table_rows * dim, rng);
  Buffer<int64_t> offsets = make_buffer<int64_t>(bags + 1);
  for (int64_t b = 0; b <= bags; ++b) offsets[b] = b * sz.bag_len;
  Buffer<int64_t> indices = make_buffer<int64_t>(per_set * sz.index_sets);
  std::uniform_int_distribution<int64_t> row_dist(0, sz.table_rows - 1);
  for (int64_t i = 0; i < per_set * sz.index_sets; ++i) indices[i] = row_dist(rng);
  Buffer<float> pooled = make_buffer<float>(bags * dim);
  const double emb_gb = static_cast<double>(per_set * dim + bags * dim) * sizeof(float) * 1e-9;

  const std::string emb_name = "embedding_bag_rows/D" + std::to_string(dim);
  benchmark::RegisterBenchmark(
      emb_name.c_str(),
      [&](benchmark::State& state) {
        int64_t set = 0;
        for (auto _ : state) {
          fusedcoll::detail::embedding_bag_rows(
              table.get(), dim, dim, offsets.get(), indices.get() + set * per_set, nullptr,
              fusedcoll::PoolingMode::sum, 0, bags, pooled.get(), dim);
          benchmark::DoNotOptimize(pooled.get());
          benchmark::ClobberMemory();
          set = (set + 1) % sz.index_sets;
        }
        state.counters["GB/s"] =
            benchmark::Counter(emb_gb, benchmark::Counter::kIsIterationInvariantRate);
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  // --- embedding_bag_rows on the operators' problem: EmbeddingProblem::dlrm's tables of one rank
  // (8 tables of 10,000-14,000 rows, D = 64: 24.6 MB, within the L3 of the machine measured) as
  // one table, bags of 1-40 rows (mean 20.5); the cost model's host calibration reads it.
  constexpr int64_t kOpRows = 8 * 12000, kOpDim = 64, kOpBags = 512, kOpSets = 8;
  Buffer<float> op_table = make_buffer<float>(kOpRows * kOpDim);
  fill_uniform(op_table.get(), kOpRows * kOpDim, rng);
  std::vector<int64_t> op_offsets((kOpBags + 1) * kOpSets);
  std::vector<int64_t> op_indices;
  std::uniform_int_distribution<int64_t> op_len(1, 40), op_row(0, kOpRows - 1);
  for (int64_t set = 0; set < kOpSets; ++set) {
    op_offsets[set * (kOpBags + 1)] = 0;
    const auto base = static_cast<int64_t>(op_indices.size());
    for (int64_t b = 0; b < kOpBags; ++b) {
      const int64_t len = op_len(rng);
      for (int64_t i = 0; i < len; ++i) op_indices.push_back(op_row(rng));
      op_offsets[set * (kOpBags + 1) + b + 1] = static_cast<int64_t>(op_indices.size()) - base;
    }
  }
  std::vector<int64_t> op_first(kOpSets + 1, 0);
  for (int64_t set = 0; set < kOpSets; ++set)
    op_first[set + 1] = op_first[set] + op_offsets[set * (kOpBags + 1) + kOpBags];
  Buffer<float> op_pooled = make_buffer<float>(kOpBags * kOpDim);
  const double op_emb_gb =
      static_cast<double>(op_first[kOpSets] / kOpSets * kOpDim + kOpBags * kOpDim) * 4 * 1e-9;
  const std::string op_emb_name = "embedding_bag_rows/op_dlrm";
  benchmark::RegisterBenchmark(
      op_emb_name.c_str(),
      [&](benchmark::State& state) {
        int64_t set = 0;
        for (auto _ : state) {
          fusedcoll::detail::embedding_bag_rows(
              op_table.get(), kOpDim, kOpDim, op_offsets.data() + set * (kOpBags + 1),
              op_indices.data() + op_first[set], nullptr, fusedcoll::PoolingMode::sum, 0, kOpBags,
              op_pooled.get(), kOpDim);
          benchmark::DoNotOptimize(op_pooled.get());
          benchmark::ClobberMemory();
          set = (set + 1) % kOpSets;
        }
        state.counters["GB/s"] =
            benchmark::Counter(op_emb_gb, benchmark::Counter::kIsIterationInvariantRate);
        state.counters["rows"] = static_cast<double>(op_first[kOpSets]) / kOpSets;
      })
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);

  // --- memcpy ---
  Buffer<char> src = make_buffer<char>(sz.copy_bytes);
  Buffer<char> dst = make_buffer<char>(sz.copy_bytes);
  std::memset(src.get(), 0x5a, sz.copy_bytes);
  const double copy_gb = 2.0 * static_cast<double>(sz.copy_bytes) * 1e-9;
  const std::string copy_name = "memcpy/" + std::to_string(sz.copy_bytes >> 20) + "MiB";
  benchmark::RegisterBenchmark(copy_name.c_str(),
                               [&](benchmark::State& state) {
                                 for (auto _ : state) {
                                   std::memcpy(dst.get(), src.get(), sz.copy_bytes);
                                   benchmark::DoNotOptimize(dst.get());
                                   benchmark::ClobberMemory();
                                 }
                                 state.counters["GB/s"] = benchmark::Counter(
                                     copy_gb, benchmark::Counter::kIsIterationInvariantRate);
                               })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  // --- memcpy on every core at once, each thread its own buffers of copy_bytes: the node's
  // memory bandwidth, which the devices of the cost model's host preset share ---
  const int node_threads = std::max(2, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  std::vector<Buffer<char>> node_src, node_dst;
  for (int t = 1; t < node_threads; ++t) {
    node_src.push_back(make_buffer<char>(sz.copy_bytes));
    node_dst.push_back(make_buffer<char>(sz.copy_bytes));
    std::memset(node_src.back().get(), 0x5a, sz.copy_bytes);
    std::memset(node_dst.back().get(), 0, sz.copy_bytes);
  }
  const std::string node_copy_name = copy_name + "/node";
  benchmark::RegisterBenchmark(
      node_copy_name.c_str(),
      [&](benchmark::State& state) {
        for (auto _ : state) {
          std::vector<std::thread> others;
          for (int t = 1; t < node_threads; ++t)
            others.emplace_back([&, t] {
              std::memcpy(node_dst[t - 1].get(), node_src[t - 1].get(), sz.copy_bytes);
            });
          std::memcpy(dst.get(), src.get(), sz.copy_bytes);
          for (auto& th : others) th.join();
          benchmark::DoNotOptimize(dst.get());
          benchmark::ClobberMemory();
        }
        state.counters["GB/s"] = benchmark::Counter(
            copy_gb * node_threads, benchmark::Counter::kIsIterationInvariantRate);
        state.counters["threads"] = node_threads;
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  // --- memcpy on every core at once over a working set of `ws` bytes in all (each core copies
  // ws / cores / 2 bytes between its own buffers, prefixes of the node memcpy's): where the rate
  // falls from the cache's to the memory's is the cache the cores share (the host calibration's
  // cache_mib, cache_gbps: docs/simulation.md, "A working set in the cache") ---
  const std::vector<int64_t> sweep_mib =
      quick ? std::vector<int64_t>{1, 4}
            : std::vector<int64_t>{16, 32, 48, 64, 80, 96, 112, 128, 192};
  std::vector<std::string> sweep_names;
  for (const int64_t mib : sweep_mib) {
    const int64_t per_core = (mib << 20) / node_threads / 2;  // bytes copied by each core
    if (per_core > sz.copy_bytes) continue;
    // Each core copies its buffers `reps` times an iteration (at least 128 MiB), so that
    // starting the threads stays out of the rate (a sixth of a 4 MiB copy's time) and the
    // buffers stay wherever they fit.
    const int64_t reps = std::max<int64_t>(1, (int64_t{128} << 20) / per_core);
    sweep_names.push_back("memcpy/node/ws" + std::to_string(mib) + "MiB");
    benchmark::RegisterBenchmark(
        sweep_names.back().c_str(),
        [&, per_core, mib, reps](benchmark::State& state) {
          for (auto _ : state) {
            std::vector<std::thread> others;
            for (int t = 1; t < node_threads; ++t)
              others.emplace_back([&, t] {
                for (int64_t r = 0; r < reps; ++r)
                  std::memcpy(node_dst[t - 1].get(), node_src[t - 1].get(), per_core);
              });
            for (int64_t r = 0; r < reps; ++r) std::memcpy(dst.get(), src.get(), per_core);
            for (auto& th : others) th.join();
            benchmark::DoNotOptimize(dst.get());
            benchmark::ClobberMemory();
          }
          const double all_gb =
              2.0 * static_cast<double>(per_core * reps) * node_threads * 1e-9;
          state.counters["GB/s"] =
              benchmark::Counter(all_gb, benchmark::Counter::kIsIterationInvariantRate);
          state.counters["per_core_GB/s"] = benchmark::Counter(
              all_gb / node_threads, benchmark::Counter::kIsIterationInvariantRate);
          state.counters["ws_MiB"] = static_cast<double>(mib);
          state.counters["threads"] = node_threads;
        })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }

  // --- GEMV: y[4][n] = x[4][k] . W[n][k]^T, streaming W (bytes: W + x + y) ---
  constexpr int64_t kGemvM = 4;
  Buffer<float> gw = make_buffer<float>(sz.gemv_n * sz.gemv_k);
  Buffer<float> gx = make_buffer<float>(kGemvM * sz.gemv_k);
  Buffer<float> gy = make_buffer<float>(kGemvM * sz.gemv_n);
  fill_uniform(gw.get(), sz.gemv_n * sz.gemv_k, rng);
  fill_uniform(gx.get(), kGemvM * sz.gemv_k, rng);
  const double gemv_gb =
      static_cast<double>(sz.gemv_n * sz.gemv_k + kGemvM * (sz.gemv_k + sz.gemv_n)) * 4 * 1e-9;
  const std::string gemv_name = "gemv_rows/M4";
  benchmark::RegisterBenchmark(
      gemv_name.c_str(),
      [&](benchmark::State& state) {
        for (auto _ : state) {
          fusedcoll::detail::gemv_rows(gw.get(), sz.gemv_k, gx.get(), sz.gemv_k, kGemvM, sz.gemv_k,
                                       0, sz.gemv_n, gy.get(), sz.gemv_n);
          benchmark::DoNotOptimize(gy.get());
          benchmark::ClobberMemory();
        }
        state.counters["GB/s"] =
            benchmark::Counter(gemv_gb, benchmark::Counter::kIsIterationInvariantRate);
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  // --- reduce_into: acc += v over f32 (bytes: two read, one written) ---
  Buffer<float> racc = make_buffer<float>(sz.reduce_count);
  Buffer<float> rv = make_buffer<float>(sz.reduce_count);
  fill_uniform(racc.get(), sz.reduce_count, rng);
  fill_uniform(rv.get(), sz.reduce_count, rng);
  const double reduce_gb = 3.0 * static_cast<double>(sz.reduce_count) * 4 * 1e-9;
  const std::string reduce_name = "reduce_into/f32";
  benchmark::RegisterBenchmark(
      reduce_name.c_str(),
      [&](benchmark::State& state) {
        for (auto _ : state) {
          fusedcoll::detail::reduce_into(racc.get(), rv.get(), sz.reduce_count,
                                         fusedcoll::DType::f32, fusedcoll::ReduceOp::sum);
          benchmark::DoNotOptimize(racc.get());
          benchmark::ClobberMemory();
        }
        state.counters["GB/s"] =
            benchmark::Counter(reduce_gb, benchmark::Counter::kIsIterationInvariantRate);
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  MedianReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  const double fc_gemm = reporter.value(gemm_name, "GFLOP/s");
  const double eigen_default = reporter.value(eigen_name, "GFLOP/s");
  const double eigen_native = reporter.value(eigen_native_name, "GFLOP/s");
  const double emb = reporter.value(emb_name, "GB/s");
  const double copy = reporter.value(copy_name, "GB/s");
  const double gemv = reporter.value(gemv_name, "GB/s");
  const double reduce = reporter.value(reduce_name, "GB/s");
  const double tile = reporter.value("gemm_tile/op16x64x1024", "GFLOP/s");
  const double op_emb = reporter.value(op_emb_name, "GB/s");
  const double node_copy = reporter.value(node_copy_name, "GB/s");
  const std::string nnn = std::to_string(n) + "x" + std::to_string(n) + "x" + std::to_string(n);
  const std::string emb_what = "embedding_bag_rows: " + std::to_string(sz.table_rows) + " x " +
                               std::to_string(dim) + " f32 table, " + std::to_string(bags) +
                               " bags x " + std::to_string(sz.bag_len);
  const std::string copy_what = "memcpy " + std::to_string(sz.copy_bytes >> 20) + " MiB";

  std::printf("\nKernel speed (medians; bytes = read + written; 1 GB = 1e9 B)\n");
  print_value_row(("gemm_tile " + nnn + " (no FMA, pinned order)").c_str(), fc_gemm, "GFLOP/s");
  print_value_row(("Eigen " + nnn + ", default flags (SSE2)").c_str(), eigen_default, "GFLOP/s");
  print_value_row(("Eigen " + nnn + ", -mavx2 -mfma").c_str(), eigen_native, "GFLOP/s");
  print_value_row(emb_what.c_str(), emb, "GB/s");
  print_value_row("embedding_bag_rows: dlrm()'s tables of one rank, D = 64", op_emb, "GB/s");
  print_value_row(copy_what.c_str(), copy, "GB/s");
  print_value_row((copy_what + " on " + std::to_string(node_threads) + " threads at once, in all")
                      .c_str(),
                  node_copy, "GB/s");
for (std::size_t i = 0; i < sweep_names.size(); ++i) {
    print_value_row((sweep_names[i] + ", per core").c_str(),
                    reporter.value(sweep_names[i], "per_core_GB/s"), "GB/s");
  }
    print_value_row("gemm_tile 16 x 64, K = 1024 (GemmAllToAll's tile)", tile, "GFLOP/s");
  print_value_row(
      ("gemv_rows M = 4, W " + std::to_string(sz.gemv_n) + " x " + std::to_string(sz.gemv_k))
          .c_str(),
      gemv, "GB/s");
  print_value_row(("reduce_into f32, " + std::to_string(sz.reduce_count) + " elements").c_str(),
                  reduce, "GB/s");
  std::printf("\nRatios\n");
  print_ratio_row("gemm_tile / Eigen default flags", fc_gemm, eigen_default, "target >= 0.5");
  print_ratio_row("gemm_tile / Eigen -mavx2 -mfma", fc_gemm, eigen_native,
                  "(Eigen uses FMA; the kernel may not)");
  print_ratio_row("embedding_bag_rows / memcpy", emb, copy, "target >= 0.5");
  return 0;
}
