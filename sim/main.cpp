// fusedcoll-sim: the scale-out simulator's command line (docs/simulation.md, "Scale-out").
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/detail/cli.hpp"
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
  fusedcoll-sim sweep [--workload dlrm,gemv,moe|all] [--quick|--fine] [--csv FILE] [--jobs J]
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
sweep:    --workload (all)  --quick: 2 x 2 maps on 8 nodes (a test)  --fine: the finer grid
          --csv FILE (sim_sweep.csv)  --merge-us (5)  --preset  --network-model  --precision-us
          --jobs J: points simulated at once, each in its own process (the CPUs)
          scripts/plot-sim-sweep.py FILE OUT.png draws the maps
)";

/// The options of each command: a flag takes no value, the others one. Anything else is an error
/// naming it, as is a value that is not a number in its option's range.
const std::set<std::string> kFlags{"one-hot", "fuse-backward", "fine", "quick", "help"};
const std::set<std::string> kCluster{"preset",  "nodes",         "gpus-per-node", "radix",
                                     "taper",   "merge-us",      "network-model", "precision-us"};
const std::map<std::string, std::set<std::string>> kCommandOptions{
    {"dlrm", {"sharding", "one-hot", "fuse-backward", "interaction", "batch", "csv"}},
    {"op",
     {"tables", "dim", "batch", "bags", "pooling", "experts", "tokens", "k", "n", "m",
      "perf-bytes"}},
    {"transfer", {"src", "dst", "bytes"}},
    {"sweep", {"workload", "fine", "quick", "csv", "jobs"}},
};
/// Positional arguments of each command, the command's own name included.
const std::map<std::string, std::size_t> kPositionals{
    {"dlrm", 1}, {"op", 2}, {"transfer", 1}, {"sweep", 1}};

struct Args {
  std::map<std::string, std::string> kv;
  std::vector<std::string> pos;
};

bool known(const std::string& key) {
  if (kFlags.count(key) || kCluster.count(key)) return true;
  return std::any_of(kCommandOptions.begin(), kCommandOptions.end(),
                     [&](const auto& c) { return c.second.count(key) > 0; });
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      const std::string key = s.substr(2);
      if (!known(key)) throw fc::InvalidArgument("unknown option '" + s + "' (see --help)");
      std::string value = "1";
      if (!kFlags.count(key)) {
        if (i + 1 >= argc) throw fc::InvalidArgument("option --" + key + " needs a value");
        value = argv[++i];
      }
      if (!a.kv.emplace(key, value).second)
        throw fc::InvalidArgument("option --" + key + " given twice");
    } else if (s.size() > 1 && s[0] == '-' && !std::isdigit(static_cast<unsigned char>(s[1]))) {
      throw fc::InvalidArgument("unknown option '" + s + "' (options start with --; see --help)");
    } else {
      a.pos.push_back(s);
    }
  }
  return a;
}

/// Rejects what `command` does not take: another command's options, extra arguments.
void check_args(const Args& a, const std::string& command) {
  const auto& mine = kCommandOptions.at(command);
  for (const auto& [key, value] : a.kv) {
    const bool cluster = kCluster.count(key) > 0 && command != "sweep";
    const bool sweep_cluster = command == "sweep" && (key == "preset" || key == "merge-us" ||
                                                      key == "network-model" ||
                                                      key == "precision-us");
    if (!mine.count(key) && !cluster && !sweep_cluster && key != "help")
      throw fc::InvalidArgument(command + ": --" + key + " is not an option of '" + command +
                                "' (see --help)");
  }
  if (a.pos.size() > kPositionals.at(command))
    throw fc::InvalidArgument(command + ": unexpected argument '" + a.pos[kPositionals.at(command)] +
                              "'");
}

std::string get(const Args& a, const std::string& k, const std::string& d) {
  auto it = a.kv.find(k);
  return it == a.kv.end() ? d : it->second;
}

/// `s` as an integer in [lo, hi], all of it (no "5x", "1.5" or "1e3"); `what` names it.
std::int64_t to_integer(const std::string& what, const std::string& s, std::int64_t lo,
                        std::int64_t hi) {
  return fc::detail::cli::parse_integer(what, s, lo, hi);
}

/// Option `k` as an integer in [lo, hi], or `d` when absent.
std::int64_t integer(const Args& a, const std::string& k, std::int64_t d, std::int64_t lo,
                     std::int64_t hi) {
  const auto it = a.kv.find(k);
  return it == a.kv.end() ? d : to_integer("--" + k, it->second, lo, hi);
}

/// Option `k` as a number in [lo, hi] ((lo, hi] when `open`), or `d` when absent.
double real(const Args& a, const std::string& k, double d, double lo, double hi, bool open) {
  const auto it = a.kv.find(k);
  if (it == a.kv.end()) return d;
  const double v = fc::detail::cli::parse_number("--" + k, it->second, lo, hi);
  if (open && !(v > lo))
    throw fc::InvalidArgument("--" + k + " '" + it->second + "' must be > " +
                              fc::detail::make_string(lo));
  return v;
}

/// Option `k` as a byte count (K, M, G suffixes) in [1, hi], or `d` when absent.
std::int64_t bytes(const Args& a, const std::string& k, std::int64_t d, std::int64_t hi) {
  const auto it = a.kv.find(k);
  if (it == a.kv.end()) return d;
  const std::int64_t v = fc::detail::cli::parse_bytes("--" + k, it->second);
  if (v < 1 || v > hi)
    throw fc::InvalidArgument("--" + k + " '" + it->second + "' is not a byte count in [1, " +
                              std::to_string(hi) + "]");
  return v;
}

/// Counts (sizes, samples, bytes) up to 2^40: more would not fit a simulation in memory or time.
constexpr std::int64_t kMaxCount = std::int64_t{1} << 40;
/// Node and device counts: check() bounds the ranks at 2^20.
constexpr std::int64_t kMaxNodes = 1 << 20;

std::vector<int> nodes_list(const Args& a, const std::string& d) {
  std::vector<int> out;
  const std::string list = get(a, "nodes", d);
  std::stringstream ss(list);
  const auto bad = [&] {
    return fc::InvalidArgument("--nodes = '" + list + "': a comma-separated list of node counts");
  };
  for (std::string t; std::getline(ss, t, ',');) {
    if (t.empty()) throw bad();
    out.push_back(static_cast<int>(to_integer("--nodes", t, 1, kMaxNodes)));
  }
  if (out.empty() || list.back() == ',') throw bad();
  return out;
}

sim::Cluster cluster(const Args& a, int nodes) {
  sim::Cluster c;
  c.preset = fc::model::load_preset(get(a, "preset", "mi250x"));
  if (a.kv.count("gpus-per-node")) c.preset.links.gpus_per_node = static_cast<int>(integer(a, "gpus-per-node", 0, 1, kMaxNodes));
  c.nodes = nodes;
  c.radix = static_cast<int>(integer(a, "radix", 8, 1, kMaxNodes));
  c.taper = real(a, "taper", 1, 1, 1e6, false);
  sim::check(c);
  return c;
}

sim::Options options(const Args& a) {
  sim::Options o;
  o.merge_window = real(a, "merge-us", 1, 0, 1e9, false) * 1e-6;
  o.network_model = get(a, "network-model", "CM02");
  o.time_precision = real(a, "precision-us", 1, 0, 1e6, true) * 1e-6;
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
  m.global_batch = integer(a, "batch", 65536, 1, kMaxCount);
  m.sharding = sim::parse_sharding(get(a, "sharding", "auto"));
  m.fuse_backward = a.kv.count("fuse-backward") > 0;
  m.interaction = sim::parse_interaction(get(a, "interaction", "dcn"));
  const sim::Options o = options(a);
  // Every node count's cluster and shards checked before anything is printed or simulated.
  const std::vector<int> nodes = nodes_list(a, "8,16,32,64,128");
  for (int n : nodes) (void)sim::shard(m, cluster(a, n).ranks());
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
  for (int n : nodes) {
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
  // Each operator's own sizes; --perf-bytes replaces them all.
  const std::map<std::string, std::set<std::string>> sizes{
      {"embedding", {"tables", "dim", "batch", "bags", "pooling"}},
      {"gemm", {"experts", "tokens", "k", "n"}},
      {"gemv", {"m", "k", "n"}}};
  const auto own = sizes.find(which);
  if (own == sizes.end())
    throw fc::InvalidArgument("op: unknown operator '" + which + "' (embedding, gemm or gemv)");
  for (const auto& [key, value] : a.kv) {
    const bool size = kCommandOptions.at("op").count(key) > 0 && key != "perf-bytes";
    if (size && !own->second.count(key))
      throw fc::InvalidArgument("op " + which + ": --" + key + " is not a size of " + which);
    if (size && a.kv.count("perf-bytes"))
      throw fc::InvalidArgument("op " + which + ": --" + key +
                                " with --perf-bytes (which sets the problem)");
  }
  if (a.kv.count("bags") && a.kv.count("pooling"))
    throw fc::InvalidArgument("op embedding: --bags and --pooling are one option; give one");
  const sim::Options o = options(a);
  const std::vector<int> nodes = nodes_list(a, "2");
  for (int n : nodes) (void)cluster(a, n);
  const bool perf = a.kv.count("perf-bytes") > 0;
  const auto perf_bytes = bytes(a, "perf-bytes", 0, kMaxCount);
  for (int n : nodes) {
    const sim::Cluster c = cluster(a, n);
    const int P = c.ranks();
    std::function<sim::Program(int, fc::Mode)> prog;
    if (which == "embedding") {
      fc::EmbeddingProblem pb;
      if (perf) {
        pb = sim::perf_embedding(P, perf_bytes);
      } else {
        sim::EmbeddingOp e;
        e.tables = integer(a, "tables", 26, 1, kMaxCount);
        e.dim = integer(a, "dim", 128, 1, kMaxCount);
        e.global_batch = integer(a, "batch", 65536, 1, kMaxCount);
        const std::string key = a.kv.count("pooling") ? "pooling" : "bags";
        const std::string bags = get(a, key, "1");
        const auto dash = bags.find('-');
        e.min_bag = to_integer("--" + key + " (lookups per bag, L or MIN-MAX)",
                               bags.substr(0, dash), 0, kMaxCount);
        e.max_bag = dash == std::string::npos
                        ? e.min_bag
                        : to_integer("--" + key + " (lookups per bag, L or MIN-MAX)",
                                     bags.substr(dash + 1), 0, kMaxCount);
        if (e.max_bag < e.min_bag)
          throw fc::InvalidArgument("--" + key + " = " + bags + ": MIN > MAX");
        pb = sim::embedding_problem(e, P);
      }
      prog = [pb, c](int r, fc::Mode m) { return sim::embedding_program(pb, c, r, m); };
    } else if (which == "gemm") {
      fc::GemmProblem pb;
      if (perf) {
        pb = sim::perf_gemm(P, perf_bytes);
      } else {
        sim::GemmOp g;
        g.experts = integer(a, "experts", 0, 0, kMaxCount);
        g.tokens = integer(a, "tokens", 4096, 1, kMaxCount);
        g.k = integer(a, "k", 1024, 1, kMaxCount);
        g.n = integer(a, "n", 1024, 1, kMaxCount);
        pb = sim::gemm_problem(g, P);
      }
      prog = [pb, c](int r, fc::Mode m) { return sim::gemm_program(pb, c, r, m); };
    } else {
      fc::GemvProblem pb;
      if (perf) {
        pb = sim::perf_gemv(P, perf_bytes);
      } else {
        sim::GemvOp g;
        g.m = integer(a, "m", 1, 1, kMaxCount);
        g.k = integer(a, "k", 8192, 1, kMaxCount);
        g.n = integer(a, "n", 8192, 1, kMaxCount);
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
  if (a.kv.count("fine") && a.kv.count("quick"))
    throw fc::InvalidArgument("sweep: --fine or --quick, not both");
  const sim::Grid grid = a.kv.count("quick")  ? sim::Grid::quick
                         : a.kv.count("fine") ? sim::Grid::fine
                                              : sim::Grid::coarse;
  const auto points = sim::sweep_points(get(a, "workload", "all"), grid);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const int jobs = static_cast<int>(integer(a, "jobs", std::max(1L, cpus), 1, 1024));
  const std::string path = get(a, "csv", "sim_sweep.csv");
  std::ofstream csv(path);
  if (!csv) throw fc::InvalidArgument("cannot write --csv " + path);
  // Each configuration once, however many maps it lies on.
  std::vector<sim::SweepPoint> unique;
  std::map<std::string, std::size_t> index;
  for (const sim::SweepPoint& p : points)
    if (index.emplace(config_of(p), unique.size()).second) unique.push_back(p);
  for (const sim::SweepPoint& p : unique) sim::check_point(p, preset);
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
  const std::vector<int> nodes = nodes_list(a, "2");
  if (nodes.size() != 1) throw fc::InvalidArgument("transfer: --nodes takes one node count");
  const sim::Cluster c = cluster(a, nodes[0]);
  const int src = static_cast<int>(integer(a, "src", 0, 0, c.ranks() - 1));
  const int dst = static_cast<int>(integer(a, "dst", std::min(c.preset.links.gpus_per_node, c.ranks() - 1), 0, c.ranks() - 1));
  const std::int64_t size = bytes(a, "bytes", 1 << 20, kMaxCount);
  const sim::Options o = options(a);
  const sim::Result r = sim::run_isolated([&] {
    sim::Result x;
    x.iteration = sim::simulate_transfer(c, src, dst, size, o);
    return x;
  });
  std::printf("transfer %d -> %d, %lld B: simgrid %.3f us, model %.3f us\n", src, dst,
              static_cast<long long>(size), r.iteration * 1e6,
              fc::model::transfer_seconds(c.preset, src, dst, size) * 1e6);
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
    const std::string& command = a.pos[0];
    if (!kCommandOptions.count(command))
      throw fc::InvalidArgument("unknown command '" + command + "' (dlrm, op, sweep or transfer)");
    check_args(a, command);
    if (command == "dlrm") return dlrm(a);
    if (command == "op") return op(a);
    if (command == "transfer") return transfer(a);
    return sweep(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedcoll-sim: %s\n", e.what());
    return 1;
  }
}
