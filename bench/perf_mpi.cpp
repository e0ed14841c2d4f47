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
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/fusedcoll.hpp"
#include "fusedcoll/mpi.hpp"
#include "perf_common.hpp"
#include "perf_ompi.hpp"

namespace perf {
namespace {

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
  const int me = comm.rank();
  // --symmetric: this rank's output lives in a SymmetricBuffer (scale-up stores into it).
  std::unique_ptr<fc::mpi::SymmetricBuffer> sym;
  return fused_world(o, comm, out, [&](FusedCase& c) {
    std::vector<float>& mine = *c.outputs()[static_cast<std::size_t>(me)];
    sym.reset();
    if (!o.symmetric)
      return FusedRun{[&c, &comm](fc::Mode m) { c.call(comm, m); }, mine.data(), mine.size()};
    sym = std::make_unique<fc::mpi::SymmetricBuffer>(comm, mine.size() * sizeof(float));
    float* into = sym->as<float>();
    return FusedRun{[&c, &comm, into](fc::Mode m) { c.call_into(comm, m, into); }, into,
                    mine.size()};
  });
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
        if (!fit_world(o, P, me)) {  // the same on every rank: every rank leaves alike
          status = 2;
          return;
        }
        const int default_wgs = fc::mpi::default_workgroups(MPI_COMM_WORLD);  // collective
        const std::string setup = fc::detail::make_string(
            "one MPI process each (", mpi_library_version(), ")",
            o.symmetric ? ", receive buffers / outputs in SymmetricBuffers" : "", ", workgroups ",
            o.compute_units > 0
                ? fc::detail::make_string(o.compute_units)
                : fc::detail::make_string("default (", default_wgs, ")"));
        Printer out(o, P, setup, ompi_baseline_name(o));
        if (me == 0) out.header();
        const std::int64_t wrong =
            is_fused(o.op) ? run_fused(o, comm, out) : run_collectives(o, comm, out);
        status = finish_world(out, wrong, me);
      },
      mpi_options);
  return status;
}

}  // namespace perf
