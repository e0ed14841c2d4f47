// The README's first command: runs the three fused operators for default DLRM-, Transformer- and
// MoE-shaped problems on the emulator (4 virtual GPUs by default), unfused and in both fused
// variants, checks every rank's output bit for bit against the ref/ oracle, and prints a table.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "fusedcoll/detail/cli.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"

namespace fc = fusedcoll;

namespace {

struct Options {
  int ranks = 4;
  int compute_units = 2;
  int repeats = 5;
};

struct Timing {
  double ms = 0;
  bool exact = false;
};

template <class F>
double median_ms(int repeats, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Runs one op on the emulator in `mode` and compares every rank's output with ref's.
template <class Problem, class Run, class Output>
Timing measure(const Options& o, const Problem& problem, fc::Mode mode, Run run, Output output) {
  auto expect = fc::make_world(problem);
  auto expect_args = fc::args_of(expect);
  run.ref(expect_args);
  auto got = fc::make_world(problem);
  auto got_args = fc::args_of(got);
  fc::emu::World world({.world_size = o.ranks, .device = {.compute_units = o.compute_units}});
  Timing t;
  t.ms = median_ms(o.repeats, [&] {
    world.run([&](fc::Communicator& comm) { run.emu(comm, got_args[comm.rank()], mode); });
  });
  t.exact = true;
  for (int r = 0; r < o.ranks; ++r) {
    const auto& a = output(expect[r]);
    const auto& b = output(got[r]);
    t.exact = t.exact && a.size() == b.size() &&
              std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }
  return t;
}

struct EmbeddingRun {
  static void ref(std::vector<fc::EmbeddingAllToAllArgs>& a) { fc::ref::embedding_alltoall(a); }
  static void emu(fc::Communicator& c, const fc::EmbeddingAllToAllArgs& a, fc::Mode m) {
    fc::embedding_alltoall(c, a, m);
  }
};
struct GemvRun {
  static void ref(std::vector<fc::GemvAllReduceArgs>& a) { fc::ref::gemv_allreduce(a); }
  static void emu(fc::Communicator& c, const fc::GemvAllReduceArgs& a, fc::Mode m) {
    fc::gemv_allreduce(c, a, m);
  }
};
struct GemmRun {
  static void ref(std::vector<fc::GemmAllToAllArgs>& a) { fc::ref::gemm_alltoall(a); }
  static void emu(fc::Communicator& c, const fc::GemmAllToAllArgs& a, fc::Mode m) {
    fc::gemm_alltoall(c, a, m);
  }
};

template <class Problem, class Run, class Output>
bool row(const Options& o, const char* name, const std::string& shape, const Problem& problem,
         Run run, Output output) {
  const Timing unfused = measure(o, problem, fc::Mode::unfused, run, output);
  const Timing up = measure(o, problem, fc::Mode::scale_up, run, output);
  const Timing out = measure(o, problem, fc::Mode::scale_out, run, output);
  const bool ok = unfused.exact && up.exact && out.exact;
  std::printf("%-18s %-34s %9.2f %9.2f %6.2f %9.2f %6.2f  %s\n", name, shape.c_str(), unfused.ms,
              up.ms, up.ms / unfused.ms, out.ms, out.ms / unfused.ms,
              ok ? "bit-exact" : "MISMATCH");
  return ok;
}

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--ranks P] [--cus C] [--repeats N]\n"
      "  Runs the three fused operators on P virtual GPUs of C compute units (emulator),\n"
      "  unfused and fused, checks them bit for bit against ref/, and times them.\n",
      argv0);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](int lo, int hi) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value in [%d, %d]\n", arg.c_str(), lo, hi);
        std::exit(2);
      }
      try {
        return fusedcoll::detail::cli::parse_int(arg, argv[++i], lo, hi);
      } catch (const fusedcoll::InvalidArgument& e) {
        std::fprintf(stderr, "%s\n", e.what());
        std::exit(2);
      }
    };
    if (arg == "--ranks" || arg == "-g") o.ranks = value(1, 64);
    else if (arg == "--cus") o.compute_units = value(1, 64);
    else if (arg == "--repeats") o.repeats = value(1, 1000);
    else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", arg.c_str());
      usage(argv[0]);
      return 2;
    }
  }
  try {
    std::printf(
        "fusedcoll %s demo: emulator, %d virtual GPUs x %d compute units, median of %d runs\n"
        "(no link model: communication is a memcpy, so this shows correctness and overheads,\n"
        " not the overlap a real interconnect rewards)\n\n",
        fc::kVersion, o.ranks, o.compute_units, o.repeats);
    std::printf("%-18s %-34s %9s %9s %6s %9s %6s  %s\n", "op", "shape", "unfused", "scale-up",
                "ratio", "scale-out", "ratio", "check vs ref");
    std::printf("%-18s %-34s %9s %9s %6s %9s %6s\n", "", "", "ms", "ms", "", "ms", "");
    bool ok = true;

    const auto emb = fc::EmbeddingProblem::dlrm(o.ranks);
    ok &= row(o, "EmbeddingAllToAll",
              "T=" + std::to_string(emb.num_tables()) + " D=" + std::to_string(emb.dim) +
                  " B=" + std::to_string(emb.global_batch()) + " bags " +
                  std::to_string(emb.min_bag) + ".." + std::to_string(emb.max_bag),
              emb, EmbeddingRun{}, [](const fc::EmbeddingRankData& d) -> const auto& { return d.output; });

    const auto gemv = fc::GemvProblem::transformer(o.ranks);
    ok &= row(o, "GemvAllReduce",
              "M=" + std::to_string(gemv.m) + " N=" + std::to_string(gemv.n) +
                  " K=" + std::to_string(gemv.k()),
              gemv, GemvRun{}, [](const fc::GemvRankData& d) -> const auto& { return d.y; });

    const auto gemm = fc::GemmProblem::moe(o.ranks);
    std::int64_t rows = 0;
    for (auto c : gemm.counts) rows += c;
    ok &= row(o, "GemmAllToAll",
              "E=" + std::to_string(gemm.num_experts()) + " K=" + std::to_string(gemm.k) +
                  " N=" + std::to_string(gemm.n) + " rows=" + std::to_string(rows),
              gemm, GemmRun{}, [](const fc::GemmRankData& d) -> const auto& { return d.output; });

    std::printf("\nratio = fused time / unfused time (lower is better); %s\n",
                ok ? "every output is bit-identical to ref/." : "SOME OUTPUTS DIFFER FROM ref/!");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
