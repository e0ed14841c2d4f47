// fusedcoll-perf's Open MPI side (perf_ompi.hpp).

#include "perf_ompi.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/inputs.hpp"

namespace perf {
namespace {

using Clock = std::chrono::steady_clock;

int int_count(std::int64_t n) {
  if (n > INT_MAX)
    throw fc::UnsupportedError(fc::detail::make_string(
        "fusedcoll-perf: ", n, " elements exceed Open MPI's int counts; use a smaller -e"));
  return static_cast<int>(n);
}

MPI_Op mpi_op(fc::ReduceOp op) {
  switch (op) {
    case fc::ReduceOp::min:
      return MPI_MIN;
    case fc::ReduceOp::max:
      return MPI_MAX;
    default:
      return MPI_SUM;  // sum; avg divides afterwards, as MPI has no average
  }
}

}  // namespace

bool fit_world(Options& o, int P, int me) {
  std::string bad;
  if (o.ranks != 0 && o.ranks != P)
    bad = fc::detail::make_string("-g ", o.ranks, " is not the MPI world size ", P,
                                  " (omit -g under mpiexec)");
  else if (o.root >= P)
    bad = "--root is not a rank";
  if (!bad.empty()) {
    if (me == 0) {
      try {
        usage_error(bad);
      } catch (const fc::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
      }
    }
    return false;
  }
  o.ranks = P;
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &o.processes_per_host);
  MPI_Comm_free(&node);
  return true;
}

int finish_world(Printer& out, std::int64_t wrong, int me) {
  if (me == 0) {
    out.footer();
    if (wrong > 0)
      std::fprintf(stderr, "fusedcoll-perf: %lld elements differ from ref/\n",
                   static_cast<long long>(wrong));
  }
  // Only rank 0 holds the sums; every rank exits with the same status.
  std::int64_t any = wrong > 0 ? 1 : 0;
  MPI_Bcast(&any, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  return any ? 1 : 0;
}

std::vector<double> time_interleaved(const std::vector<std::function<void()>>& variants,
                                     const Options& o, std::mt19937& rng) {
  std::vector<std::vector<double>> times(variants.size());
  std::vector<std::size_t> order(variants.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  double timed = 0;  // seconds of the timed calls, all variants
  for (int round = 0;; ++round) {
    const int done = round - o.warmup;  // timed rounds behind us
    if (done >= 0) {
      // --min-time: rank 0's clock decides for every rank, so that all call alike.
      int more = more_rounds(o, done, o.iters, timed / static_cast<double>(variants.size()));
      if (o.min_time > 0 && done >= o.iters) MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
      if (!more) break;
    }
    std::shuffle(order.begin(), order.end(), rng);
    for (const std::size_t i : order) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = Clock::now();
      variants[i]();
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t1 = Clock::now();
      if (done >= 0) {
        const double s = std::chrono::duration<double>(t1 - t0).count();
        times[i].push_back(s);
        timed += s;
      }
    }
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(std::move(t)));
  return medians;
}

Errors reduce_errors(const Errors& e) {
  std::int64_t counts[2] = {e.wrong, e.n}, counts_sum[2] = {0, 0};
  double maxima[2] = {e.max_abs, e.max_rel}, maxima_max[2] = {0, 0};
  double sq = 0;
  MPI_Reduce(counts, counts_sum, 2, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(maxima, maxima_max, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&e.sq, &sq, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  Errors all;
  all.wrong = counts_sum[0];
  all.n = counts_sum[1];
  all.max_abs = maxima_max[0];
  all.max_rel = maxima_max[1];
  all.sq = sq;
  return all;
}

std::int64_t fused_world(const Options& o, fc::Communicator& comm, Printer& out,
                         const std::function<FusedRun(FusedCase&)>& bind) {
  const int P = comm.size(), me = comm.rank();
  std::mt19937 rng(12345);
  return fused_sweep(o, P, out, me == 0, [&](FusedCase& c, Row& row) {
    const FusedRun run = bind(c);
    std::vector<std::function<void()>> variants;
    for (fc::Mode m : kModes) variants.push_back([&run, m] { run.call(m); });
    const auto times = time_interleaved(variants, o, rng);
    row.seconds = times[0];
    row.up_seconds = times[1];
    row.out_seconds = times[2];
    if (o.check) {
      const auto expect = fused_expected(c);
      Errors err;
      for (fc::Mode m : kModes) {
        fc::poison(run.output, run.floats * 4);
        run.call(m);
        err.add(run.output, expect[static_cast<std::size_t>(me)].data(), nullptr, run.floats);
      }
      row.err = reduce_errors(err);
    }
  });
}

std::int64_t sum_over_ranks(std::int64_t v) {
  std::int64_t all = 0;
  MPI_Reduce(&v, &all, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  return all;
}

std::string ompi_baseline_name(const Options& o) {
  if (o.op == "allreduce")
    return o.redop == fc::ReduceOp::avg ? "MPI_Allreduce (sum, then / P)" : "MPI_Allreduce";
  if (o.op == "reducescatter")
    return o.redop == fc::ReduceOp::avg ? "MPI_Reduce_scatter_block (sum, then / P)"
                                        : "MPI_Reduce_scatter_block";
  if (o.op == "allgather") return "MPI_Allgather";
  if (o.op == "alltoall") return "MPI_Alltoall";
  return "MPI_Bcast (the root copies send to recv first)";
}

std::int64_t ompi_recv_count(const Options& o, const CollectiveCase& c) {
  return o.op == "reducescatter" ? (c.pieces.empty() ? 0 : c.pieces[0]) : c.count;
}

std::function<void()> mpi_collective(const Options& o, const CollectiveCase& c, const float* send,
                                     float* recv) {
  const MPI_Op op = mpi_op(o.redop);
  const bool even =
      std::all_of(c.pieces.begin(), c.pieces.end(), [&](auto n) { return n == c.pieces[0]; });
  if ((o.op == "reducescatter" || o.op == "allgather") && !even)
    throw fc::InternalError("fusedcoll-perf: uneven pieces in a sweep size");
  // MPI's send buffers are const void* since MPI 3.
  if (o.op == "allreduce") {
    const int n = int_count(c.count);
    return [=] { MPI_Allreduce(send, recv, n, MPI_FLOAT, op, MPI_COMM_WORLD); };
  }
  if (o.op == "reducescatter") {
    const int n = int_count(c.pieces[0]);
    return [=] { MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, op, MPI_COMM_WORLD); };
  }
  if (o.op == "allgather") {
    const int n = int_count(c.pieces[0]);
    return [=] { MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD); };
  }
  if (o.op == "alltoall") {
    const int n = int_count(c.per_peer);
    return [=] { MPI_Alltoall(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD); };
  }
  const int n = int_count(c.count);
  const int root = o.root;
  return [=] { MPI_Bcast(recv, n, MPI_FLOAT, root, MPI_COMM_WORLD); };
}

std::function<void()> ompi_call(const Options& o, CollectiveCase& c, int me, int P) {
  const float* send = c.send[me].data();
  float* recv = c.recv[me].data();
  const std::function<void()> call = mpi_collective(o, c, send, recv);
  // avg: MPI has none, so the baseline divides the sum afterwards.
  const bool avg = o.redop == fc::ReduceOp::avg && (o.op == "allreduce" || o.op == "reducescatter");
  const std::int64_t n = ompi_recv_count(o, c);
  // Broadcast: fusedcoll's is out of place and writes the root's recv too, so the baseline
  // copies it there and broadcasts from it.
  const bool copy_root = o.op == "broadcast" && me == o.root;
  return [=] {
    if (copy_root) std::memcpy(recv, send, static_cast<std::size_t>(n) * sizeof(float));
    call();
    if (avg) fc::detail::finish_average(recv, n, fc::DType::f32, P);
  };
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<std::size_t>(len));
  return s.substr(0, std::min(s.find_first_of(",\n"), s.size()));
}

}  // namespace perf
