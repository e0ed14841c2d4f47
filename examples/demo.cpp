// The README's first command: runs the three fused operators for default DLRM-, Transformer- and
// MoE-shaped problems on the reference backend and prints what each rank received.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "fusedcoll/fusedcoll.hpp"

namespace fc = fusedcoll;

namespace {

struct Row {
  std::string op;
  std::string shape;
  std::vector<std::int64_t> bytes_sent;  // per rank
  std::vector<std::uint64_t> checksums;  // per rank output
  double seconds = 0;
};

template <class F>
double time_it(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string human_bytes(std::int64_t b) {
  char buf[32];
  if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / 1048576.0);
  else if (b >= (1 << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

Row run_embedding(int world) {
  const auto problem = fc::EmbeddingProblem::dlrm(world);
  auto data = fc::make_world(problem);
  auto args = fc::args_of(data);
  Row row{"EmbeddingAllToAll", "", {}, {}, 0};
  row.seconds = time_it([&] { fc::ref::embedding_alltoall(args); });
  row.shape = "T=" + std::to_string(problem.num_tables()) + " D=" + std::to_string(problem.dim) +
              " B=" + std::to_string(problem.global_batch()) + " bags " +
              std::to_string(problem.min_bag) + ".." + std::to_string(problem.max_bag) +
              " -> [" + std::to_string(problem.batch_sizes[0]) + ", " +
              std::to_string(problem.num_tables()) + ", " + std::to_string(problem.dim) + "]/rank";
  for (int r = 0; r < world; ++r) {
    row.bytes_sent.push_back(fc::bytes_sent(args[r], r));
    row.checksums.push_back(fc::checksum(data[r].output.data(), data[r].output.size() * 4));
  }
  return row;
}

Row run_gemv(int world) {
  const auto problem = fc::GemvProblem::transformer(world);
  auto data = fc::make_world(problem);
  auto args = fc::args_of(data);
  Row row{"GemvAllReduce", "", {}, {}, 0};
  row.seconds = time_it([&] { fc::ref::gemv_allreduce(args); });
  row.shape = "M=" + std::to_string(problem.m) + " N=" + std::to_string(problem.n) +
              " K=" + std::to_string(problem.k()) + " (K/rank " +
              std::to_string(problem.k_splits[0]) + ") -> [" + std::to_string(problem.m) + ", " +
              std::to_string(problem.n) + "]/rank";
  for (int r = 0; r < world; ++r) {
    row.bytes_sent.push_back(fc::bytes_sent(args[r], r));
    row.checksums.push_back(fc::checksum(data[r].y.data(), data[r].y.size() * 4));
  }
  return row;
}

Row run_gemm(int world) {
  const auto problem = fc::GemmProblem::moe(world);
  auto data = fc::make_world(problem);
  auto args = fc::args_of(data);
  Row row{"GemmAllToAll", "", {}, {}, 0};
  row.seconds = time_it([&] { fc::ref::gemm_alltoall(args); });
  std::int64_t rows = 0;
  for (auto c : problem.counts) rows += c;
  row.shape = "E=" + std::to_string(problem.num_experts()) + " K=" + std::to_string(problem.k) +
              " N=" + std::to_string(problem.n) + " rows=" + std::to_string(rows) +
              " -> [rows_s, " + std::to_string(problem.n) + "]/rank";
  for (int r = 0; r < world; ++r) {
    row.bytes_sent.push_back(fc::bytes_sent(args[r], r));
    row.checksums.push_back(fc::checksum(data[r].output.data(), data[r].output.size() * 4));
  }
  return row;
}

void usage(const char* argv0) {
  std::printf("usage: %s [--ranks P]\n  Runs the three fused operators on the reference backend.\n",
              argv0);
}

}  // namespace

int main(int argc, char** argv) {
  int world = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--ranks" || arg == "-g") && i + 1 < argc) {
      world = std::atoi(argv[++i]);
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", arg.c_str());
      usage(argv[0]);
      return 2;
    }
  }
  if (world < 1 || world > 64) {
    std::fprintf(stderr, "--ranks must be in [1, 64]\n");
    return 2;
  }
  try {
    std::printf("fusedcoll %s demo: backend ref (sequential bit-exact oracle), %d ranks\n\n",
                fc::kVersion, world);
    const std::vector<Row> rows = {run_embedding(world), run_gemv(world), run_gemm(world)};
    for (const Row& row : rows) {
      std::printf("%-18s %s\n", row.op.c_str(), row.shape.c_str());
      std::printf("  %-6s %-14s %-18s\n", "rank", "bytes sent", "output checksum");
      for (int r = 0; r < world; ++r)
        std::printf("  %-6d %-14s %016llx\n", r, human_bytes(row.bytes_sent[r]).c_str(),
                    static_cast<unsigned long long>(row.checksums[r]));
      std::printf("  ref time %.1f ms\n\n", row.seconds * 1e3);
    }
    std::printf("Checksums are FNV-1a of each rank's output bytes; every backend must match them.\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
