// fusedcoll-perf --backend mpi (docs/benchmarking.md, "--backend mpi"): one rank per process
// under mpiexec. Collectives: fusedcoll's call against Open MPI's own collective on the same
// buffers; fused operators: unfused against scale_up and scale_out.
//
// Timing: the variants of a size (fusedcoll and Open MPI, or the three modes) run once per round,
// in an order shuffled per round with the same seed on every rank, so that the noise of a shared
// host hits them alike; each call is MPI_Barrier, clock, call, MPI_Barrier, clock, i.e. the time
// until the slowest rank is done; rank 0 reports medians over the timed rounds.
//
// Check (-c 1): inputs are pure functions of (seed, rank), so every rank rebuilds the whole
// world's inputs, runs ref/ locally and compares its own output bit for bit; the counts are
// summed over ranks. Open MPI's result is checked too, on integer-valued inputs of the same shape
// (sums of small integers are exact in any order, and MPI fixes none).

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
#include "fusedcoll/fusedcoll.hpp"
#include "fusedcoll/mpi.hpp"
#include "perf_common.hpp"

namespace perf {
namespace {

using Clock = std::chrono::steady_clock;

/// Runs warm-up + timed rounds of `variants`, shuffled per round by `rng` (seeded alike on every
/// rank, so every rank calls the collectives in the same order). Returns each variant's median
/// seconds per call, as timed on this rank.
std::vector<double> time_interleaved(const std::vector<std::function<void()>>& variants,
                                     const Options& o, std::mt19937& rng) {
  std::vector<std::vector<double>> times(variants.size());
  std::vector<std::size_t> order(variants.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int round = 0; round < o.warmup + o.iters; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    for (const std::size_t i : order) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = Clock::now();
      variants[i]();
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t1 = Clock::now();
      if (round >= o.warmup) times[i].push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(std::move(t)));
  return medians;
}

/// The sums (counts) and maxima (errors) of every rank's `e`, on rank 0.
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

std::int64_t sum_over_ranks(std::int64_t v) {
  std::int64_t all = 0;
  MPI_Reduce(&v, &all, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  return all;
}

int int_count(std::int64_t n) {
  if (n > INT_MAX)
    throw fc::UnsupportedError(fc::detail::make_string(
        "fusedcoll-perf: ", n, " elements exceed Open MPI's int counts; use a smaller -e"));
  return static_cast<int>(n);
}

/// The name of Open MPI's collective compared with `o.op`.
std::string baseline_name(const Options& o) {
  if (o.op == "allreduce")
    return o.redop == fc::ReduceOp::avg ? "MPI_Allreduce (sum, then / P)" : "MPI_Allreduce";
  if (o.op == "reducescatter")
    return o.redop == fc::ReduceOp::avg ? "MPI_Reduce_scatter_block (sum, then / P)"
                                        : "MPI_Reduce_scatter_block";
  if (o.op == "allgather") return "MPI_Allgather";
  if (o.op == "alltoall") return "MPI_Alltoall";
  return "MPI_Bcast (the root copies send to recv first)";
}

MPI_Op mpi_op(fc::ReduceOp op) {
  switch (op) {
    case fc::ReduceOp::min: return MPI_MIN;
    case fc::ReduceOp::max: return MPI_MAX;
    default: return MPI_SUM;  // sum; avg divides afterwards, as MPI has no average
  }
}

/// Open MPI's collective of `o.op` on rank `me`'s buffers of `c`, into `c.recv[me]`. The sizes
/// of a sweep are multiples of P elements (collective_bytes), so the even-count calls apply.
std::function<void()> ompi_call(const Options& o, CollectiveCase& c, int me, int P) {
  float* send = c.send[me].data();
  float* recv = c.recv[me].data();
  const MPI_Op op = mpi_op(o.redop);
  const bool avg = o.redop == fc::ReduceOp::avg;
  const bool even =
      std::all_of(c.pieces.begin(), c.pieces.end(), [&](auto n) { return n == c.pieces[0]; });
  if ((o.op == "reducescatter" || o.op == "allgather") && !even)
    throw fc::InternalError("fusedcoll-perf: uneven pieces in a sweep size");
  if (o.op == "allreduce") {
    const int n = int_count(c.count);
    return [=] {
      MPI_Allreduce(send, recv, n, MPI_FLOAT, op, MPI_COMM_WORLD);
      if (avg) fc::detail::finish_average(recv, n, fc::DType::f32, P);
    };
  }
  if (o.op == "reducescatter") {
    const int n = int_count(c.pieces[0]);
    return [=] {
      MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, op, MPI_COMM_WORLD);
      if (avg) fc::detail::finish_average(recv, n, fc::DType::f32, P);
    };
  }
  if (o.op == "allgather") {
    const int n = int_count(c.pieces[0]);
    return [=] { MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD); };
  }
  if (o.op == "alltoall") {
    const int n = int_count(c.per_peer);
    return [=] { MPI_Alltoall(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD); };
  }
  // Broadcast: fusedcoll's is out of place and writes the root's recv too, so the baseline
  // copies it there and broadcasts from it.
  const int n = int_count(c.count);
  const int root = o.root;
  return [=] {
    if (me == root) std::memcpy(recv, send, static_cast<std::size_t>(n) * sizeof(float));
    MPI_Bcast(recv, n, MPI_FLOAT, root, MPI_COMM_WORLD);
  };
}

std::int64_t run_collectives(const Options& o, fc::Communicator& comm, Printer& out) {
  const int P = comm.size(), me = comm.rank();
  std::mt19937 rng(12345);
  return collective_sweep(o, P, out, me == 0, [&](CollectiveCase& c, Row& row) {
    // --symmetric: fusedcoll's collective receives into a SymmetricBuffer (peers put straight
    // into it); the check copies it out to the case's receive buffer.
    std::unique_ptr<fc::mpi::SymmetricBuffer> sym;
    std::function<void()> ours = [&] { c.call(comm); };
    if (o.symmetric) {
      sym = std::make_unique<fc::mpi::SymmetricBuffer>(comm, c.recv[me].size() * sizeof(float));
      ours = [&] { c.call_into(comm, sym->as<float>()); };
    }
    const auto times = time_interleaved({ours, ompi_call(o, c, me, P)}, o, rng);
    row.seconds = times[0];
    row.base_seconds = times[1];
    if (o.check) {
      row.err = reduce_errors(check_collective(
          c, o,
          [&] {
            if (sym) fc::poison(sym->data(), sym->size());
            ours();
            if (sym) std::memcpy(c.recv[me].data(), sym->data(), sym->size());
          },
          me));
      // Open MPI's result on integer inputs.
      row.base_wrong = sum_over_ranks(
          check_baseline(c, o, P, [&](CollectiveCase& ints) { ompi_call(o, ints, me, P)(); }, me)
              .wrong);
    }
  });
}

std::int64_t run_fused(const Options& o, fc::Communicator& comm, Printer& out) {
  const int P = comm.size(), me = comm.rank();
  std::mt19937 rng(12345);
  return fused_sweep(o, P, out, me == 0, [&](FusedCase& c, Row& row) {
    // --symmetric: this rank's output lives in a SymmetricBuffer (scale-up stores into it).
    std::vector<float>& mine = *c.outputs()[static_cast<std::size_t>(me)];
    std::unique_ptr<fc::mpi::SymmetricBuffer> sym;
    if (o.symmetric)
      sym = std::make_unique<fc::mpi::SymmetricBuffer>(comm, mine.size() * sizeof(float));
    auto run = [&](fc::Mode m) {
      if (sym)
        c.call_into(comm, m, sym->as<float>());
      else
        c.call(comm, m);
    };
    std::vector<std::function<void()>> variants;
    for (fc::Mode m : kModes) variants.push_back([&run, m] { run(m); });
    const auto times = time_interleaved(variants, o, rng);
    row.seconds = times[0];
    row.up_seconds = times[1];
    row.out_seconds = times[2];
    if (o.check) {
      const auto expect = fused_expected(c);
      float* got = sym ? sym->as<float>() : mine.data();
      Errors err;
      for (fc::Mode m : kModes) {
        fc::poison(got, mine.size() * 4);
        run(m);
        err.add(got, expect[static_cast<std::size_t>(me)].data(), nullptr, mine.size());
      }
      row.err = reduce_errors(err);
    }
  });
}

/// The first line of MPI_Get_library_version ("Open MPI v4.1.4, ...").
std::string library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<std::size_t>(len));
  return s.substr(0, std::min(s.find_first_of(",\n"), s.size()));
}

}  // namespace

int run_mpi(const Options& given, int argc, char** argv) {
  fc::mpi::Options mpi_options;
  mpi_options.workgroups = given.compute_units;  // 0: the backend's default
  int status = 0;
  fc::mpi::run(
      argc, argv,
      [&](fc::Communicator& comm) {
        const int P = comm.size(), me = comm.rank();
        Options o = given;
        // The same on every rank, so every rank leaves here alike and no one waits.
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
          status = 2;
          return;
        }
        o.ranks = P;
        // Every process builds every rank's inputs: the memory check counts this host's.
        MPI_Comm node = MPI_COMM_NULL;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_size(node, &o.processes_per_host);
        MPI_Comm_free(&node);
        const int default_wgs = fc::mpi::default_workgroups(MPI_COMM_WORLD);  // collective
        const std::string setup = fc::detail::make_string(
            "one MPI process each (", library_version(), ")",
            o.symmetric ? ", receive buffers / outputs in SymmetricBuffers" : "", ", workgroups ",
            o.compute_units > 0
                ? fc::detail::make_string(o.compute_units)
                : fc::detail::make_string("default (", default_wgs, ")"));
        Printer out(o, P, setup, baseline_name(o));
        if (me == 0) out.header();
        const std::int64_t wrong =
            is_fused(o.op) ? run_fused(o, comm, out) : run_collectives(o, comm, out);
        if (me == 0) {
          out.footer();
          if (wrong > 0)
            std::fprintf(stderr, "fusedcoll-perf: %lld elements differ from ref/\n",
                         static_cast<long long>(wrong));
        }
        // Only rank 0 holds the sums; every rank exits with the same status.
        std::int64_t any = wrong > 0 ? 1 : 0;
        MPI_Bcast(&any, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
        status = any ? 1 : 0;
      },
      mpi_options);
  return status;
}

}  // namespace perf
