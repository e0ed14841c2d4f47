// "Where fusion pays": the sweep's maps and their points (sim/sweep.hpp, docs/simulation.md).
#include "sim/sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "fusedcoll/error.hpp"
#include "sim/dlrm.hpp"
#include "sim/ops.hpp"

namespace fusedcoll::sim {
namespace {

/// Tensor-parallel decode: the FFN's down projection of a 70B-class model (28672 -> 8192, as
/// Llama 2 70B's), its K split over the ranks.
constexpr std::int64_t kGemvK = 28672;
/// MoE: one expert per device, each an FFN's down projection (14336 -> 4096, as Mixtral's).
constexpr std::int64_t kMoeK = 14336;

/// A map's axis: its values in each grid.
struct Axis {
  std::string name;
  std::vector<double> quick, coarse, fine;
  const std::vector<double>& values(Grid g) const {
    return g == Grid::quick ? quick : g == Grid::fine ? fine : coarse;
  }
};

void set(SweepPoint& p, const std::string& axis, double v) {
  if (axis == "nodes")
    p.nodes = static_cast<int>(v);
  else if (axis == "nic_gbit")
    p.nic_gbit = v;
  else if (axis == "samples" || axis == "tokens" || axis == "batch")
    p.samples = static_cast<std::int64_t>(v);
  else if (axis == "dim" || axis == "hidden")
    p.dim = static_cast<std::int64_t>(v);
  else if (axis == "pooling")
    p.pooling = v;
  else if (axis == "gpus_per_node")
    p.gpus_per_node = static_cast<int>(v);
}

/// Every point of the map y x x through `base`.
void add_map(std::vector<SweepPoint>& out, const SweepPoint& base, const Axis& y, const Axis& x,
             Grid grid) {
  for (double yv : y.values(grid))
    for (double xv : x.values(grid)) {
      SweepPoint p = base;
      p.map = y.name + "-" + x.name;
      p.y_name = y.name;
      p.x_name = x.name;
      p.y = yv;
      p.x = xv;
      set(p, y.name, yv);
      set(p, x.name, xv);
      out.push_back(p);
    }
}

const Axis kNic{"nic_gbit", {25, 400}, {25, 100, 400}, {25, 50, 100, 200, 400}};
const Axis kNodes{"nodes", {8, 16}, {8, 32, 128}, {8, 16, 32, 64, 128}};
const Axis kGpus{"gpus_per_node", {2, 8}, {1, 2, 8}, {1, 2, 4, 8}};

Dlrm dlrm_of(const SweepPoint& p, int ranks) {
  Dlrm m = mlperf_dlrm(p.pooling == 0);
  if (p.pooling > 0)
    for (auto& l : m.pooling)
      l = std::max<std::int64_t>(1, std::llround(p.pooling * static_cast<double>(l)));
  m.dim = p.dim;
  m.bottom.back() = p.dim;
  m.global_batch = p.samples * ranks;
  return m;
}

/// The fused variant's flows: its slices leave while the kernel runs, each to its own node at
/// its own time, and SimGrid's max-min solver pays for every distinct completion among the flows
/// in flight (128 nodes, 4096 samples per device at 25 Gbit/s: 97 s of CPU with 5 us windows).
/// Sends to one node within 1/500 of the baseline's exchange are one flow: a send leaves at most
/// that late (4096 samples: 60 us windows, 16 s, the iteration 0.6% longer than with 5 us).
Options fused_options(const Options& o, double exchange) {
  Options f = o;
  f.merge_window = std::max(o.merge_window, exchange / 500);
  return f;
}

double phase(const Result& r, const std::string& name) {
  for (const auto& [n, t] : r.phases)
    if (n == name) return t;
  return 0;
}

}  // namespace

std::vector<SweepPoint> sweep_points(const std::string& workloads, Grid grid) {
  std::vector<std::string> which;
  std::stringstream ss(workloads);
  for (std::string w; std::getline(ss, w, ',');) {
    if (w == "all") {
      which.insert(which.end(), {"dlrm", "gemv", "moe"});
    } else if (w == "dlrm" || w == "gemv" || w == "moe") {
      which.push_back(w);
    } else {
      throw InvalidArgument("sweep: unknown workload '" + w + "' (dlrm, gemv, moe or all)");
    }
  }
  if (which.empty())
    throw InvalidArgument("sweep: no workload in '" + workloads + "' (dlrm, gemv, moe or all)");
  // The quick grid puts every workload's default point on 8 nodes: a test of the whole path in
  // seconds, not a map to read.
  const int quick_nodes = 8;
  std::vector<SweepPoint> out;
  for (const std::string& w : which) {
    SweepPoint base;
    base.workload = w;
    if (w == "dlrm") {
      // MLPerf DLRM-DCNv2 at its global batch of 65,536 on 128 nodes x 8: 64 samples per device.
      base.nodes = grid == Grid::quick ? quick_nodes : 128;
      base.samples = 64;
      base.dim = 128;
      add_map(out, base, kNodes, kNic, grid);
      add_map(out, base, {"samples", {64, 512}, {64, 512, 4096}, {64, 128, 256, 512, 1024, 2048, 4096}},
              kNic, grid);
      // At least 64: 26 tables x 40 columns are the fewest that give each of 1,024 ranks one.
      add_map(out, base, {"dim", {32, 128}, {64, 128, 512}, {64, 96, 128, 256, 512}},
              {"pooling", {0, 1}, {0, 1, 8}, {0, 0.5, 1, 2, 4, 8, 16}}, grid);
      add_map(out, base, kGpus, kNic, grid);
    } else if (w == "gemv") {
      // Decode of 16 tokens at once, tensor-parallel over 8 nodes.
      base.nodes = 8;
      base.samples = 16;
      base.dim = 8192;
      add_map(out, base, kNodes, kNic, grid);
      add_map(out, base, {"batch", {1, 16}, {1, 16, 256}, {1, 4, 16, 64, 256}}, kNic, grid);
      add_map(out, base, kGpus, kNic, grid);
    } else {
      // 4096 tokens per device, one expert per device, over 8 nodes.
      base.nodes = 8;
      base.samples = 4096;
      base.dim = 4096;
      add_map(out, base, kNodes, kNic, grid);
      add_map(out, base,
              {"tokens", {512, 4096}, {512, 4096, 32768}, {512, 2048, 4096, 8192, 32768}}, kNic,
              grid);
      add_map(out, base, kGpus, kNic, grid);
    }
  }
  return out;
}

namespace {

Cluster cluster_of(const SweepPoint& p, const model::Preset& preset) {
  Cluster c;
  c.preset = preset;
  c.preset.links.gpus_per_node = p.gpus_per_node;
  c.preset.links.nic_gbps = p.nic_gbit / 8;
  c.nodes = p.nodes;
  check(c);
  return c;
}

}  // namespace

void check_point(const SweepPoint& p, const model::Preset& preset) {
  const Cluster c = cluster_of(p, preset);
  const int P = c.ranks();
  if (p.workload == "dlrm")
    (void)shard(dlrm_of(p, P), P);
  else if (p.workload == "gemv")
    (void)gemv_problem({p.samples, kGemvK, p.dim}, P);
  else
    (void)gemm_problem({0, p.samples, kMoeK, p.dim}, P);
}

SweepResult run_point(const SweepPoint& p, const model::Preset& preset, const Options& o) {
  const Cluster c = cluster_of(p, preset);
  const int P = c.ranks();
  SweepResult out;
  Result res[2];
  if (p.workload == "dlrm") {
    const Dlrm m = dlrm_of(p, P);
    const auto shards = shard(m, P);
    const auto programs = dlrm_programs(m, c, shards, false);
    res[0] = run_isolated([&] { return simulate(c, programs, o); });
    // The busiest rank's embedding kernel (column-wise shards of the 100-hot table pool ~3x the
    // average) and what the forward takes after it: every rank leaves the baseline's exchange at
    // once, at rank 0's emb_fwd + a2a_fwd.
    for (int r = 0; r < P; ++r) out.kernel = std::max(out.kernel, programs(r).front().seconds);
    out.exchange = phase(res[0], "emb_fwd") + phase(res[0], "a2a_fwd") - out.kernel;
    const Options of = fused_options(o, out.exchange);
    res[1] = run_isolated([&] { return simulate(c, dlrm_programs(m, c, shards, true), of); });
  } else {
    std::function<Program(int, Mode)> prog;
    if (p.workload == "gemv") {
      const GemvProblem pb = gemv_problem({p.samples, kGemvK, p.dim}, P);
      prog = [pb, &c](int r, Mode mode) { return gemv_program(pb, c, r, mode); };
    } else {
      const GemmProblem pb = gemm_problem({0, p.samples, kMoeK, p.dim}, P);
      prog = [pb, &c](int r, Mode mode) { return gemm_program(pb, c, r, mode); };
    }
    res[0] = run_isolated([&] {
      return simulate(
          c, [&](int r) { return prog(r, Mode::unfused); }, o);
    });
    out.kernel = prog(0, Mode::unfused).front().seconds;
    out.exchange = res[0].iteration - out.kernel;
    const Options of = fused_options(o, out.exchange);
    res[1] = run_isolated([&] {
      return simulate(
          c, [&](int r) { return prog(r, Mode::scale_out); }, of);
    });
  }
  out.base = res[0].iteration;
  out.fused = res[1].iteration;
  out.cpu = res[0].wall + res[1].wall;
  return out;
}

std::string sweep_csv_header() {
  return "workload,map,y_name,y,x_name,x,preset,nodes,gpus_per_node,ranks,nic_gbit,samples,dim,"
         "pooling,base_us,fused_us,reduction_pct,kernel_us,exchange_us,overlap_bound_pct,cpu_s";
}

std::string sweep_csv_row(const SweepPoint& p, const SweepResult& r, const std::string& preset) {
  char b[512];
  std::snprintf(b, sizeof b,
                "%s,%s,%s,%g,%s,%g,%s,%d,%d,%d,%g,%lld,%lld,%g,%.2f,%.2f,%.3f,%.2f,%.2f,%.3f,%.2f",
                p.workload.c_str(), p.map.c_str(), p.y_name.c_str(), p.y, p.x_name.c_str(), p.x,
                preset.c_str(), p.nodes, p.gpus_per_node, p.nodes * p.gpus_per_node, p.nic_gbit,
                static_cast<long long>(p.samples), static_cast<long long>(p.dim), p.pooling,
                r.base * 1e6, r.fused * 1e6, 100 * (1 - r.fused / r.base), r.kernel * 1e6,
                r.exchange * 1e6, 100 * std::min(r.kernel, r.exchange) / r.base, r.cpu);
  return b;
}

}  // namespace fusedcoll::sim
