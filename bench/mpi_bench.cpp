// fusedcoll-mpi-bench: the MPI backend under mpiexec (docs/results.md, "MPI backend").
//
//   1. The three fused operators, unfused against scale_up and scale_out, at a DLRM-like,
//      a Transformer-decode and an MoE size (the emulator benchmark's "medium" shapes).
//   2. fusedcoll's AllReduce (direct, ring) against Open MPI's MPI_Allreduce, and fusedcoll's
//      All-to-All against MPI_Alltoall, at 8 KiB, 1 MiB and 64 MiB per rank (f32, sum).
//
// Every variant is checked once before timing: the fused modes' outputs memcmp-equal the unfused
// one (which the mpi tests check against ref/), fusedcoll's All-to-All equals MPI_Alltoall's, and
// fusedcoll's AllReduce of integers equals MPI_Allreduce's (integer sums are exact in any order).
// A difference aborts the job.
//
// Timing: a round runs every variant once, in an order shuffled per round (the same seed on
// every rank); each variant is MPI_Barrier, clock, call, MPI_Barrier, clock on rank 0, i.e. the
// time until the slowest rank is done. Medians (and quartiles) over the rounds after warm-up.
//
// Flags: -n N rounds (default 21; 64 MiB collectives use max(5, N / 4)), -w W warm-up rounds
// (default 2), --only ops|coll, --quick (tiny shapes, 2 rounds: a smoke test).

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusedcoll/fusedcoll.hpp"
#include "fusedcoll/mpi.hpp"

namespace fc = fusedcoll;

namespace {

struct Flags {
  int rounds = 21;
  int warmup = 2;
  std::string only;
  bool quick = false;
};

struct Variant {
  std::string name;
  std::function<void()> run;
  std::vector<double> ms;
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

/// Runs warm-up + `rounds` rounds over `vs`, shuffled per round, recording rank 0's times.
void measure(std::vector<Variant>& vs, int rounds, int warmup) {
  std::mt19937 rng(12345);
  std::vector<std::size_t> order(vs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int r = 0; r < warmup + rounds; ++r) {
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i : order) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now_ms();
      vs[i].run();
      MPI_Barrier(MPI_COMM_WORLD);
      const double t1 = now_ms();
      if (r >= warmup) vs[i].ms.push_back(t1 - t0);
    }
  }
}

void require(bool ok, int rank, const std::string& what) {
  if (!ok) throw std::runtime_error("rank " + std::to_string(rank) + ": check failed: " + what);
}

bool same(const void* a, const void* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

/// Prints "what | variant | median | q1-q3 | ratio to the first variant" rows on rank 0.
void report(int rank, const std::string& what, const std::vector<Variant>& vs) {
  if (rank != 0) return;
  const double base = quantile(vs[0].ms, 0.5);
  for (const auto& v : vs) {
    const double med = quantile(v.ms, 0.5);
    std::printf("| %s | %s | %.3f | %.3f-%.3f | %.2f |\n", what.c_str(), v.name.c_str(), med,
                quantile(v.ms, 0.25), quantile(v.ms, 0.75), med / base);
  }
  std::fflush(stdout);
}

template <class Data, class Call>
void bench_op(fc::Communicator& comm, const Flags& f, const std::string& what, Data& data,
              std::vector<float>& out, Call call) {
  const auto args = data.args();
  std::vector<std::vector<float>> outs;
  std::vector<Variant> vs;
  for (fc::Mode m : {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out}) {
    fc::poison(out.data(), out.size() * sizeof(float));
    call(comm, args, m);
    outs.push_back(out);
    vs.push_back({fc::to_string(m), [&comm, &args, call, m] { call(comm, args, m); }, {}});
  }
  for (std::size_t i = 1; i < outs.size(); ++i)
    require(same(outs[0].data(), outs[i].data(), outs[0].size() * sizeof(float)), comm.rank(),
            what + ": " + vs[i].name + " differs from unfused");
  measure(vs, f.rounds, f.warmup);
  report(comm.rank(), what, vs);
}

void bench_ops(fc::Communicator& comm, const Flags& f) {
  const int P = comm.size(), me = comm.rank();
  {
    auto pb = fc::EmbeddingProblem::dlrm(P);  // 8 tables/rank, D 64, batch 256/rank, bags 1..40
    pb.batch_sizes.assign(static_cast<std::size_t>(P), f.quick ? 16 : 1024);
    if (f.quick) pb.table_rows.assign(pb.table_rows.size(), 100);
    fc::EmbeddingRankData d(pb, me);
    bench_op(comm, f,
             fc::detail::make_string("EmbeddingAllToAll T=", pb.num_tables(), " D=", pb.dim,
                                     " B=", pb.global_batch()),
             d, d.output, [](fc::Communicator& c, const fc::EmbeddingAllToAllArgs& a, fc::Mode m) {
               fc::embedding_alltoall(c, a, m);
             });
  }
  {
    auto pb = fc::GemvProblem::transformer(P);  // M 4, N 4096, K 11008
    if (f.quick) {
      pb.n = 256;
      pb.k_splits = fc::split_evenly(512, P);
    }
    fc::GemvRankData d(pb, me);
    bench_op(comm, f, fc::detail::make_string("GemvAllReduce M=", pb.m, " N=", pb.n, " K=", pb.k()),
             d, d.y, [](fc::Communicator& c, const fc::GemvAllReduceArgs& a, fc::Mode m) {
               fc::gemv_allreduce(c, a, m);
             });
  }
  {
    auto pb = fc::GemmProblem::moe(P);  // 2 experts/rank, K 1024, N 512
    if (f.quick) {
      pb.k = 64;
      pb.n = 64;
      pb.random_routing(8);
    }
    std::int64_t rows = 0;
    for (auto c : pb.counts) rows += c;
    fc::GemmRankData d(pb, me);
    bench_op(comm, f, fc::detail::make_string("GemmAllToAll K=", pb.k, " N=", pb.n, " rows=", rows),
             d, d.output, [](fc::Communicator& c, const fc::GemmAllToAllArgs& a, fc::Mode m) {
               fc::gemm_alltoall(c, a, m);
             });
  }
}

void bench_collectives(fc::Communicator& comm, const Flags& f) {
  const int P = comm.size(), me = comm.rank();
  std::vector<std::size_t> sizes = {std::size_t{8} << 10, std::size_t{1} << 20,
                                    std::size_t{64} << 20};
  if (f.quick) sizes = {std::size_t{8} << 10};
  for (const std::size_t bytes : sizes) {
    const auto count = static_cast<std::int64_t>(bytes / sizeof(float));
    const int rounds = bytes >= (std::size_t{64} << 20) ? std::max(5, f.rounds / 4) : f.rounds;
    const std::string label = bytes >= (std::size_t{1} << 20)
                                  ? fc::detail::make_string(bytes >> 20, " MiB")
                                  : fc::detail::make_string(bytes >> 10, " KiB");
    std::vector<float> send(static_cast<std::size_t>(count)), recv(send.size()), check(send.size());

    // AllReduce, checked on integers first.
    {
      auto* si = reinterpret_cast<std::int32_t*>(send.data());
      fc::fill_values(si, count, fc::DType::i32, 7, 1, me, fc::ValueMode::integer);
      for (auto algo : {fc::AllReduceAlgo::direct, fc::AllReduceAlgo::ring}) {
        fc::all_reduce(comm,
                       {send.data(), recv.data(), count, fc::DType::i32, fc::ReduceOp::sum, algo});
        MPI_Allreduce(send.data(), check.data(), static_cast<int>(count), MPI_INT32_T, MPI_SUM,
                      MPI_COMM_WORLD);
        require(same(recv.data(), check.data(), bytes), me,
                std::string("all_reduce ") + fc::to_string(algo) + " differs from MPI_Allreduce");
      }
    }
    fc::fill_values(send.data(), count, fc::DType::f32, 7, 2, me, fc::ValueMode::random);
    std::vector<Variant> ar = {
        {"MPI_Allreduce",
         [&] {
           MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD);
         },
         {}},
        {"fusedcoll direct",
         [&] {
           fc::all_reduce(comm, {send.data(), recv.data(), count, fc::DType::f32, fc::ReduceOp::sum,
                                 fc::AllReduceAlgo::direct});
         },
         {}},
        {"fusedcoll ring",
         [&] {
           fc::all_reduce(comm, {send.data(), recv.data(), count, fc::DType::f32, fc::ReduceOp::sum,
                                 fc::AllReduceAlgo::ring});
         },
         {}}};
    measure(ar, rounds, f.warmup);
    report(me, "AllReduce " + label, ar);

    // All-to-All: `bytes` per rank in total, bytes / P to each peer.
    const std::int64_t per_peer = count / P;
    const auto a2a = fc::make_alltoall(send.data(), recv.data(), per_peer, fc::DType::f32, P);
    fc::all_to_allv(comm, a2a);
    MPI_Alltoall(send.data(), static_cast<int>(per_peer), MPI_FLOAT, check.data(),
                 static_cast<int>(per_peer), MPI_FLOAT, MPI_COMM_WORLD);
    require(same(recv.data(), check.data(), static_cast<std::size_t>(per_peer * P) * sizeof(float)),
            me, "all_to_allv differs from MPI_Alltoall");
    std::vector<Variant> aa = {{"MPI_Alltoall",
                                [&] {
                                  MPI_Alltoall(send.data(), static_cast<int>(per_peer), MPI_FLOAT,
                                               recv.data(), static_cast<int>(per_peer), MPI_FLOAT,
                                               MPI_COMM_WORLD);
                                },
                                {}},
                               {"fusedcoll all_to_allv", [&] { fc::all_to_allv(comm, a2a); }, {}}};
    measure(aa, rounds, f.warmup);
    report(me, "All-to-All " + label, aa);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-n" && i + 1 < argc) {
      f.rounds = std::stoi(argv[++i]);
    } else if (a == "-w" && i + 1 < argc) {
      f.warmup = std::stoi(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      f.only = argv[++i];
    } else if (a == "--quick") {
      f.quick = true;
      f.rounds = 2;
      f.warmup = 1;
    }
  }
  return fc::mpi::run(argc, argv, [&](fc::Communicator& comm) {
    if (comm.rank() == 0) {
      std::printf(
          "# fusedcoll-mpi-bench: %d ranks, %d rounds (medians, ms; ratio = median / first "
          "row's)\n",
          comm.size(), f.rounds);
      std::printf(
          "| what | variant | median ms | q1-q3 ms | ratio |\n| --- | --- | ---: | --- | ---: |\n");
    }
    if (f.only.empty() || f.only == "ops") bench_ops(comm, f);
    if (f.only.empty() || f.only == "coll") bench_collectives(comm, f);
  });
}
