// fusedcoll-ag-gemm: what fusing AllGather + GEMM (examples/kernels/ag_gemm.hpp) saves on a
// machine, predicted by the emulator's virtual time on the built-in presets (docs/kernels.md,
// "AllGather + GEMM"). Each (preset, mode) runs twice on a fresh World; the second call is timed,
// between two barriers. Results are checked against the oracle with --check.
//
//   fusedcoll-ag-gemm [--ranks P] [--rows R] [--k K] [--n N] [--presets a,b] [--check]

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/emu.hpp"
#include "kernels/ag_gemm.hpp"
#include "kernels/ag_gemm_oracle.hpp"

namespace fc = fusedcoll;

namespace {

struct Options {
  int ranks = 4;
  std::int64_t rows = 128, k = 2048, n = 512;
  std::vector<std::string> presets{"mi250x", "h100"};
  bool check = false;
};

std::int64_t number(const char* flag, const char* v) {
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || x < 1 || x > (1 << 20)) {
    std::fprintf(stderr, "fusedcoll-ag-gemm: %s expects an integer in [1, 2^20], got '%s'\n", flag,
                 v);
    std::exit(2);
  }
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--check")
      o.check = true;
    else if (a == "--ranks" && has_value)
      o.ranks = static_cast<int>(number("--ranks", argv[++i]));
    else if (a == "--rows" && has_value)
      o.rows = number("--rows", argv[++i]);
    else if (a == "--k" && has_value)
      o.k = number("--k", argv[++i]);
    else if (a == "--n" && has_value)
      o.n = number("--n", argv[++i]);
    else if (a == "--presets" && has_value) {
      o.presets.clear();
      std::stringstream ss(argv[++i]);
      for (std::string p; std::getline(ss, p, ',');) o.presets.push_back(p);
    } else {
      std::fprintf(stderr,
                   "usage: fusedcoll-ag-gemm [--ranks P] [--rows R] [--k K] [--n N] "
                   "[--presets a,b] [--check]\n");
      std::exit(a == "--help" ? 0 : 2);
    }
  }
  if (o.ranks > ag_gemm::kMaxRanks) {
    std::fprintf(stderr, "fusedcoll-ag-gemm: --ranks %d is above %d\n", o.ranks,
                 ag_gemm::kMaxRanks);
    std::exit(2);
  }
  return o;
}

/// Virtual microseconds of the second of two calls on a fresh World of `preset`.
double predict(const Options& o, const std::string& preset, bool fused) {
  fc::emu::World world({.world_size = o.ranks,
                        .device = {},
                        .clock = fc::emu::ClockKind::virtual_time,
                        .preset = preset});
  const std::vector<std::int64_t> rows(static_cast<std::size_t>(o.ranks), o.rows);
  std::vector<double> t(2 * static_cast<std::size_t>(o.ranks));
  std::vector<int> wrong(static_cast<std::size_t>(o.ranks), 0);
  world.run([&](fc::Communicator& comm) {
    const int r = comm.rank();
    const auto a = ag_gemm::a_rows_of(r, o.rows, o.k);
    const auto b = ag_gemm::b_of(r, o.k, o.n);
    std::vector<float> c;
    for (int call = 0; call < 2; ++call) {
      fc::barrier(comm);
      t[2 * r] = world.virtual_seconds(r);
      c = ag_gemm::run(comm, rows, o.k, o.n, a, b, fused);
      fc::barrier(comm);
      t[2 * r + 1] = world.virtual_seconds(r);
    }
    if (o.check) {
      const auto want = ag_gemm::oracle(r, rows, o.k, o.n);
      wrong[r] = std::memcmp(want.data(), c.data(), want.size() * sizeof(float)) != 0;
    }
  });
  for (int r = 0; r < o.ranks; ++r)
    if (wrong[r]) {
      std::fprintf(stderr, "fusedcoll-ag-gemm: rank %d's C differs from the oracle (%s, %s)\n", r,
                   preset.c_str(), fused ? "fused" : "unfused");
      std::exit(1);
    }
  return (t[1] - t[0]) * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    std::printf(
        "AllGather + GEMM: P = %d, A %lld rows per rank (M = %lld), K = %lld, N = %lld per "
        "rank; virtual time%s\n",
        o.ranks, static_cast<long long>(o.rows), static_cast<long long>(o.rows * o.ranks),
        static_cast<long long>(o.k), static_cast<long long>(o.n),
        o.check ? ", results checked against the oracle" : "");
    std::printf("%-10s %14s %14s %14s\n", "preset", "unfused us", "fused us", "fused/unfused");
    for (const std::string& preset : o.presets) {
      const double unfused = predict(o, preset, false), fused = predict(o, preset, true);
      std::printf("%-10s %14.1f %14.1f %14.3f\n", preset.c_str(), unfused, fused, fused / unfused);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedcoll-ag-gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
