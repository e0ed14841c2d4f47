// fusedcoll-sim: the scale-out simulator's command line (docs/simulation.md, "Scale-out").
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/error.hpp"
#include "sim/dlrm.hpp"
#include "sim/ops.hpp"
#include "sim/sim.hpp"
#include "sim/sweep.hpp"

namespace fc = fusedcoll;
namespace sim = fusedcoll::sim;

namespace {

const char* kUsage = R"(usage:
  fusedcoll-sim dlrm [options]        the DLRM training iteration, baseline vs fused, per node count
  fusedcoll-sim op embedding|gemm|gemv [options]   one operator, baseline vs fused
  fusedcoll-sim transfer --src R --dst R --bytes B   one transfer on an idle cluster
  fusedcoll-sim sweep [--workload dlrm,gemv,moe|all] [--fine] [--csv FILE] [--jobs J]
                                      where fusion pays: maps of the reduction (docs/simulation.md)
cluster:  --preset NAME|FILE (mi250x)  --nodes N[,N...] (dlrm: 8,16,32,64,128; op: 2)
          --gpus-per-node G (the preset's)  --radix R (8)  --taper T (1)
          --merge-us U (1): sends to one node within U us are one flow
          --network-model M (CM02)  --precision-us U (1): SimGrid's time precision
dlrm:     MLPerf DLRM-DCNv2 by default. --sharding auto|table|column|row (auto)  --one-hot
          --fuse-backward  --interaction dcn|dot (dcn)  --batch B (65536)  --csv FILE
op:       embedding: --tables T (26) --dim D (128) --batch B (65536) --bags L|MIN-MAX (1)
          gemm: --experts E (ranks) --tokens T (4096) --k K (1024) --n N (1024)
          gemv: --m M (1) --k K (8192) --n N (8192)
          --perf-bytes B: instead, the problem fusedcoll-perf OP runs at size B
sweep:    --workload (all)  --fine: the finer grid  --csv FILE (sim_sweep.csv)  --merge-us (5)
          --jobs J: points simulated at once, each in its own process (the CPUs)
          scripts/plot-sim-sweep.py FILE OUT.png draws the maps
)";

struct Args {
  std::map<std::string, std::string> kv;
  std::vector<std::string> pos;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      const std::string key = s.substr(2);
      if (key == "one-hot" || key == "fuse-backward" || key == "fine" || key == "help") {
        a.kv[key] = std::string(1, '1');
      } else {
        if (i + 1 >= argc) throw fc::InvalidArgument("option --" + key + " needs a value");
        a.kv[key] = argv[++i];
      }
    } else {
      a.pos.push_back(s);
    }
  }
  return a;
}

std::string get(const Args& a, const std::string& k, const std::string& d) {
  auto it = a.kv.find(k);
  return it == a.kv.end() ? d : it->second;
}

double num(const Args& a, const std::string& k, double d) {
  const std::string s = get(a, k, "");
  if (s.empty()) return d;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') throw fc::InvalidArgument("--" + k + " = '" + s + "' is not a number");
  return v;
}

std::vector<int> nodes_list(const Args& a, const std::string& d) {
  std::vector<int> out;
  std::stringstream ss(get(a, "nodes", d));
  for (std::string t; std::getline(ss, t, ',');) {
    char* end = nullptr;
    const long v = std::strtol(t.c_str(), &end, 10);
    if (end == t.c_str() || *end != '\0') throw fc::InvalidArgument("--nodes: '" + t + "' is not an integer");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

sim::Cluster cluster(const Args& a, int nodes) {
  sim::Cluster c;
  c.preset = fc::model::load_preset(get(a, "preset", "mi250x"));
  if (a.kv.count("gpus-per-node")) c.preset.links.gpus_per_node = static_cast<int>(num(a, "gpus-per-node", 0));
  c.nodes = nodes;
  c.radix = static_cast<int>(num(a, "radix", 8));
  c.taper = num(a, "taper", 1);
  sim::check(c);
  return c;
}

sim::Options options(const Args& a) {
  sim::Options o;
  o.merge_window = num(a, "merge-us", 1) * 1e-6;
  o.network_model = get(a, "network-model", "CM02");
  o.time_precision = num(a, "precision-us", 1) * 1e-6;
  return o;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

std::string phases(const sim::Result& r) {
  std::string s;
  for (const auto& [n, t] : r.phases) {
    char b[96];
    std::snprintf(b, sizeof b, "%s%s=%.1f", s.empty() ? "" : " ", n.c_str(), t * 1e6);
    s += b;
  }
  return s;
}

int dlrm(const Args& a) {
  sim::Dlrm m = sim::mlperf_dlrm(a.kv.count("one-hot") > 0);
  m.global_batch = static_cast<std::int64_t>(num(a, "batch", 65536));
  m.sharding = sim::parse_sharding(get(a, "sharding", "auto"));
  m.fuse_backward = a.kv.count("fuse-backward") > 0;
  m.interaction = sim::parse_interaction(get(a, "interaction", "dcn"));
  const sim::Options o = options(a);
  std::ofstream csv;
  if (a.kv.count("csv")) {
    csv.open(get(a, "csv", ""));
    if (!csv) throw fc::InvalidArgument("cannot write --csv " + get(a, "csv", ""));
    csv << "preset,nodes,ranks,sharding,pooling,base_iter_us,base_compute_us,base_exposed_us,"
           "fused_iter_us,fused_compute_us,fused_exposed_us,reduction_pct,ab_base_us,ab_fused_us,"
           "ab_reduction_pct,sim_wall_s,interaction\n";
  }
  std::printf(
      "DLRM (%zu tables, dim %lld, batch %lld, bottom 13-512-256-128, %s interaction, top "
      "1024-1024-512-256-1), pooling %s, fuse backward %s\n",
      m.rows.size(), static_cast<long long>(m.dim), static_cast<long long>(m.global_batch),
      m.interaction == sim::Interaction::dcn ? "DCNv2 (3 layers, rank 512)" : "dot",
      a.kv.count("one-hot") ? "one-hot" : "multi-hot", m.fuse_backward ? "yes" : "no");
  std::printf("%6s %6s %-7s | %10s %9s %9s | %10s %9s %9s | %7s | %9s %9s %7s | %6s\n", "nodes", "ranks",
              "shard", "base us", "compute", "exposed", "fused us", "compute", "exposed", "reduct",
              "a-b base", "a-b fused", "a-b red", "wall s");
  for (int n : nodes_list(a, "8,16,32,64,128")) {
    const sim::Cluster c = cluster(a, n);
    const int P = c.ranks();
    const auto shards = sim::shard(m, P);
    sim::Result res[2];
    for (int f = 0; f < 2; ++f)
      res[f] = sim::run_isolated(
          [&] { return sim::simulate(c, sim::dlrm_programs(m, c, shards, f == 1), o); });
    const sim::Estimate e0 = sim::alpha_beta(m, c, shards, false);
    const sim::Estimate e1 = sim::alpha_beta(m, c, shards, true);
    const double red = 100 * (1 - res[1].iteration / res[0].iteration);
    const double ab_red = 100 * (1 - e1.iteration / e0.iteration);
    const double wall = std::max(res[0].wall, res[1].wall);
    std::printf("%6d %6d %-7s | %10.1f %9.1f %9.1f | %10.1f %9.1f %9.1f | %6.1f%% | %9.1f %9.1f %6.1f%% | %6.2f\n",
                n, P, sim::to_string(sim::effective(m, P)), res[0].iteration * 1e6,
                res[0].compute * 1e6, res[0].exposed * 1e6, res[1].iteration * 1e6,
                res[1].compute * 1e6, res[1].exposed * 1e6, red, e0.iteration * 1e6,
                e1.iteration * 1e6, ab_red, wall);
    std::printf("         base  phases (rank 0, us): %s (%lld flows, %.2f s)\n"
                "         fused phases (rank 0, us): %s (%lld flows, %.2f s)\n",
                phases(res[0]).c_str(), static_cast<long long>(res[0].flows), res[0].wall,
                phases(res[1]).c_str(), static_cast<long long>(res[1].flows), res[1].wall);
    if (csv)
      csv << c.preset.name << ',' << n << ',' << P << ',' << sim::to_string(sim::effective(m, P))
          << ',' << (a.kv.count("one-hot") ? "one-hot" : "multi-hot") << ','
          << res[0].iteration * 1e6 << ',' << res[0].compute * 1e6 << ',' << res[0].exposed * 1e6
          << ',' << res[1].iteration * 1e6 << ',' << res[1].compute * 1e6 << ','
          << res[1].exposed * 1e6 << ',' << red << ',' << e0.iteration * 1e6 << ','
          << e1.iteration * 1e6 << ',' << ab_red << ',' << wall << ','
          << sim::to_string(m.interaction) << '\n';
  }
  std::printf("paper (SC'24, simulated): 21%% at 128 nodes. peak simulation RSS %.0f MB\n", peak_rss_mb());
  return 0;
}

int op(const Args& a) {
  if (a.pos.size() < 2) throw fc::InvalidArgument("op: which operator? embedding, gemm or gemv");
  const std::string which = a.pos[1];
  if (which != "embedding" && which != "gemm" && which != "gemv")
    throw fc::InvalidArgument("op: unknown operator '" + which + "' (embedding, gemm or gemv)");
  const sim::Options o = options(a);
  const bool perf = a.kv.count("perf-bytes") > 0;
  const auto perf_bytes = static_cast<std::int64_t>(num(a, "perf-bytes", 0));
  for (int n : nodes_list(a, "2")) {
    const sim::Cluster c = cluster(a, n);
    const int P = c.ranks();
    std::function<sim::Program(int, fc::Mode)> prog;
    if (which == "embedding") {
      fc::EmbeddingProblem pb;
      if (perf) {
        pb = sim::perf_embedding(P, perf_bytes);
      } else {
        sim::EmbeddingOp e;
        e.tables = static_cast<std::int64_t>(num(a, "tables", 26));
        e.dim = static_cast<std::int64_t>(num(a, "dim", 128));
        e.global_batch = static_cast<std::int64_t>(num(a, "batch", 65536));
        const std::string bags = get(a, "bags", get(a, "pooling", "1"));
        const auto dash = bags.find('-');
        char* end = nullptr;
        e.min_bag = std::strtol(bags.c_str(), &end, 10);
        e.max_bag = dash == std::string::npos ? e.min_bag : std::strtol(bags.c_str() + dash + 1, &end, 10);
        if (end == bags.c_str() || *end != '\0')
          throw fc::InvalidArgument("--bags '" + bags + "': L or MIN-MAX lookups per bag");
        pb = sim::embedding_problem(e, P);
      }
      prog = [pb, c](int r, fc::Mode m) { return sim::embedding_program(pb, c, r, m); };
    } else if (which == "gemm") {
      fc::GemmProblem pb;
      if (perf) {
        pb = sim::perf_gemm(P, perf_bytes);
      } else {
        sim::GemmOp g;
        g.experts = static_cast<std::int64_t>(num(a, "experts", 0));
        g.tokens = static_cast<std::int64_t>(num(a, "tokens", 4096));
        g.k = static_cast<std::int64_t>(num(a, "k", 1024));
        g.n = static_cast<std::int64_t>(num(a, "n", 1024));
        pb = sim::gemm_problem(g, P);
      }
      prog = [pb, c](int r, fc::Mode m) { return sim::gemm_program(pb, c, r, m); };
    } else {
      fc::GemvProblem pb;
      if (perf) {
        pb = sim::perf_gemv(P, perf_bytes);
      } else {
        sim::GemvOp g;
        g.m = static_cast<std::int64_t>(num(a, "m", 1));
        g.k = static_cast<std::int64_t>(num(a, "k", 8192));
        g.n = static_cast<std::int64_t>(num(a, "n", 8192));
        pb = sim::gemv_problem(g, P);
      }
      prog = [pb, c](int r, fc::Mode m) { return sim::gemv_program(pb, c, r, m); };
    }
    prog(0, fc::Mode::unfused);  // bad arguments are reported here, before forking
    const fc::Mode modes[] = {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out};
    sim::Result res[3];
    for (int f = 0; f < 3; ++f)
      res[f] = sim::run_isolated([&] {
        return sim::simulate(c, [&](int r) { return prog(r, modes[f]); }, o);
      });
    std::printf("%s on %d nodes x %d (%s): unfused %.1f us, scale_up %.1f us, scale_out %.1f us "
                "(up/unf %.3f, out/unf %.3f)\n",
                which.c_str(), n, c.preset.links.gpus_per_node, c.preset.name.c_str(),
                res[0].iteration * 1e6, res[1].iteration * 1e6, res[2].iteration * 1e6,
                res[1].iteration / res[0].iteration, res[2].iteration / res[0].iteration);
  }
  return 0;
}

/// Runs `points` in forked processes, `jobs` at a time, printing each as it ends; returns their
/// results in the points' order. A point that fails reports its message, rethrown here.
std::vector<std::string> run_sweep(const std::vector<sim::SweepPoint>& points,
                                   const fc::model::Preset& preset, const sim::Options& o,
                                   int jobs) {
  std::vector<std::string> rows(points.size());
  struct Child {
    std::size_t point;
    int fd;
  };
  std::map<pid_t, Child> running;
  std::size_t next = 0, done = 0;
  std::string failure;
  while (done < points.size()) {
    while (failure.empty() && next < points.size() && static_cast<int>(running.size()) < jobs) {
      std::fflush(nullptr);
      int fd[2];
      if (pipe(fd) != 0)
        throw fc::BackendError(std::string("sweep: pipe: ") + std::strerror(errno));
      const pid_t pid = fork();
      if (pid < 0) throw fc::BackendError(std::string("sweep: fork: ") + std::strerror(errno));
      if (pid == 0) {
        close(fd[0]);
        std::string out;
        try {
          const sim::SweepResult r = sim::run_point(points[next], preset, o);
          char b[160];
          std::snprintf(b, sizeof b, "ok %.17g %.17g %.17g %.17g %.17g", r.base, r.fused, r.kernel,
                        r.exchange, r.cpu);
          out = b;
        } catch (const std::exception& e) {
          out = std::string("error ") + e.what();
        }
        for (std::size_t w = 0; w < out.size();) {
          const ssize_t k = write(fd[1], out.data() + w, out.size() - w);
          if (k <= 0) break;
          w += static_cast<std::size_t>(k);
        }
        _exit(0);
      }
      close(fd[1]);
      running[pid] = {next++, fd[0]};
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    auto it = running.find(pid);
    if (it == running.end()) continue;
    std::string text;
    char buf[4096];
    for (ssize_t k; (k = read(it->second.fd, buf, sizeof buf)) > 0;)
      text.append(buf, static_cast<std::size_t>(k));
    close(it->second.fd);
    const sim::SweepPoint& p = points[it->second.point];
    if (text.rfind("ok ", 0) == 0) {
      rows[it->second.point] = text.substr(3);
      std::istringstream in(rows[it->second.point]);
      sim::SweepResult r;
      in >> r.base >> r.fused >> r.kernel >> r.exchange >> r.cpu;
      std::printf(
          "%s %s = %g, %s = %g (%d x %d, %g Gbit/s): baseline %.1f us, fused %.1f us, "
          "reduction %.1f%%, overlap bound %.1f%% (%.1f s)\n",
          p.workload.c_str(), p.y_name.c_str(), p.y, p.x_name.c_str(), p.x, p.nodes,
          p.gpus_per_node, p.nic_gbit, r.base * 1e6, r.fused * 1e6, 100 * (1 - r.fused / r.base),
          100 * std::min(r.kernel, r.exchange) / r.base, r.cpu);
      std::fflush(stdout);
    } else if (failure.empty()) {
      failure =
          p.workload + " " + p.map + " (" + p.y_name + " " + std::to_string(p.y) + ", " + p.x_name +
          " " + std::to_string(p.x) + "): " +
          (text.rfind("error ", 0) == 0 ? text.substr(6) : "the process ended without a result");
    }
    running.erase(it);
    ++done;
    if (!failure.empty() && running.empty()) break;
  }
  if (!failure.empty()) throw fc::InvalidArgument("sweep: " + failure);
  return rows;
}

/// The machine and problem of a point, not its map: maps through one default point share it.
std::string config_of(const sim::SweepPoint& p) {
  std::ostringstream k;
  k << p.workload << ' ' << p.nodes << ' ' << p.gpus_per_node << ' ' << p.nic_gbit << ' '
    << p.samples << ' ' << p.dim << ' ' << p.pooling;
  return k.str();
}

int sweep(const Args& a) {
  const fc::model::Preset preset = fc::model::load_preset(get(a, "preset", "mi250x"));
  // Sends to one node within 5 us are one flow (--merge-us): a fused kernel's slices leave over
  // milliseconds at large batches, and SimGrid's max-min solver is quadratic in concurrent flows
  // (128 nodes, 512 samples per device at 25 Gbit/s: 52 s at 1 us, 15 s at 5 us, the
  // iteration 16738.2 and 16736.3 us).
  Args with = a;
  with.kv.emplace("merge-us", "5");
  const sim::Options o = options(with);
  const auto points = sim::sweep_points(get(a, "workload", "all"), a.kv.count("fine") > 0);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const int jobs = static_cast<int>(num(a, "jobs", static_cast<double>(std::max(1L, cpus))));
  if (jobs < 1) throw fc::InvalidArgument("--jobs must be >= 1");
  const std::string path = get(a, "csv", "sim_sweep.csv");
  std::ofstream csv(path);
  if (!csv) throw fc::InvalidArgument("cannot write --csv " + path);
  // Each configuration once, however many maps it lies on.
  std::vector<sim::SweepPoint> unique;
  std::map<std::string, std::size_t> index;
  for (const sim::SweepPoint& p : points)
    if (index.emplace(config_of(p), unique.size()).second) unique.push_back(p);
  std::printf("sweep: %zu points (%zu configurations), %d at a time\n", points.size(),
              unique.size(), jobs);
  const std::vector<std::string> results = run_sweep(unique, preset, o, jobs);
  csv << sim::sweep_csv_header() << '\n';
  for (const sim::SweepPoint& p : points) {
    std::istringstream in(results[index.at(config_of(p))]);
    sim::SweepResult r;
    in >> r.base >> r.fused >> r.kernel >> r.exchange >> r.cpu;
    csv << sim::sweep_csv_row(p, r, preset.name) << '\n';
  }
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

int transfer(const Args& a) {
  const sim::Cluster c = cluster(a, nodes_list(a, "2").at(0));
  const int src = static_cast<int>(num(a, "src", 0));
  const int dst = static_cast<int>(num(a, "dst", c.preset.links.gpus_per_node));
  const auto bytes = static_cast<std::int64_t>(num(a, "bytes", 1 << 20));
  const sim::Options o = options(a);
  const sim::Result r = sim::run_isolated([&] {
    sim::Result x;
    x.iteration = sim::simulate_transfer(c, src, dst, bytes, o);
    return x;
  });
  std::printf("transfer %d -> %d, %lld B: simgrid %.3f us, model %.3f us\n", src, dst,
              static_cast<long long>(bytes), r.iteration * 1e6,
              fc::model::transfer_seconds(c.preset, src, dst, bytes) * 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (a.pos.empty() || a.kv.count("help")) {
      std::fputs(kUsage, a.pos.empty() && !a.kv.count("help") ? stderr : stdout);
      return a.kv.count("help") ? 0 : 2;
    }
    if (a.pos[0] == "dlrm") return dlrm(a);
    if (a.pos[0] == "op") return op(a);
    if (a.pos[0] == "transfer") return transfer(a);
    if (a.pos[0] == "sweep") return sweep(a);
    throw fc::InvalidArgument("unknown command '" + a.pos[0] + "' (dlrm, op, sweep or transfer)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedcoll-sim: %s\n", e.what());
    return 1;
  }
}
