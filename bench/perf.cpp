// fusedcoll-perf: nccl-tests-style benchmark of fusedcoll's collectives and fused operators.
//
//   fusedcoll-perf allreduce -b 1K -e 64M -f 4 -g 4
//   fusedcoll-perf embedding -b 64K -e 16M -f 4 --link-gbps 10
//   mpiexec -n 4 fusedcoll-perf allreduce --backend mpi -b 8K -e 64M -f 8
//   fusedcoll-perf alltoall --backend gpu -g 8
//
// Subcommands: allreduce, alltoall, reducescatter, allgather, broadcast (one row per size), and
// the fused operators embedding, gemv, gemm (unfused vs scale_up vs scale_out per size).
//
// Sizes follow nccl-tests: `size` is the bytes of the whole (uncompressed) buffer a rank holds —
// AllReduce and Broadcast: the buffer; AllGather: the gathered output; ReduceScatter: the input
// of all chunks; All-to-All: the send buffer. algbw = size / time; busbw = algbw x the factor of
// docs/benchmarking.md (AllReduce 2(P-1)/P, the others (P-1)/P, Broadcast 1), the bandwidth each
// rank's link must carry with an optimal algorithm. `wire` is measured on the emulator: the bytes
// a rank's device actually put or stored into peers during one call (mean over ranks).
//
// This file is the emulator backend (timing: the n iterations are split into batches, with
// --min-time more batches until they last that long; each batch is barrier, clock, back-to-back
// calls, barrier, clock, and the time of a call is the median over batches of batch time / calls)
// and main; --backend mpi is perf_mpi.cpp, --backend gpu
// perf_gpu.cpp, and what they share (flags, cases, checks, printer) perf_common.cpp. Check (-c 1,
// default): after timing, outputs are poisoned, the op runs once more, and every rank's output is
// compared bit for bit with ref/ on the same inputs: `#wrong` counts differing elements (it must
// be 0; the exit status is 1 otherwise).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"
#include "perf_common.hpp"

using namespace perf;

// A GPU-only build (no emulator: FUSEDCOLL_BUILD_EMU=OFF) has --backend gpu alone.
#ifndef FUSEDCOLL_PERF_NO_EMU
namespace {

using Clock = std::chrono::steady_clock;

/// Seconds per call (the median over batches) and how many calls were made, warm-up included.
struct Timing {
  double seconds = 0;
  int calls = 0;
};

/// Times `call` on every rank: `batches` x (barrier, clock, `per_batch` calls, barrier, clock),
/// then more batches while --min-time asks for them. Returns the median seconds per call. In
/// virtual time the clock is the rank's virtual clock, which every rank reads alike after a
/// barrier: the time from the common start to the latest rank's end.
Timing time_calls(fc::emu::World& world, const std::function<void(fc::Communicator&)>& call,
                  const Options& o) {
  const int batches = std::min(o.iters, 5);
  const int per_batch = std::max(1, o.iters / batches);
  std::vector<double> per_call;
  double timed = 0;   // rank 0's: the batches' seconds so far
  bool more = false;  // rank 0's decision, read by every rank after a barrier
  const bool virtual_time = world.virtual_time();
  world.run([&](fc::Communicator& comm) {
    for (int i = 0; i < o.warmup; ++i) call(comm);
    for (int b = 0;; ++b) {
      if (b >= batches) {  // --min-time: rank 0's clock decides for every rank
        if (o.min_time <= 0) break;
        if (comm.rank() == 0) more = more_rounds(o, b, batches, timed);
        fc::barrier(comm);
        const bool go = more;
        fc::barrier(comm);  // nobody reads `more` while rank 0 writes the next one
        if (!go) break;
      }
      fc::barrier(comm);
      const auto t0 = Clock::now();
      const double v0 = virtual_time ? world.virtual_seconds(comm.rank()) : 0;
      for (int i = 0; i < per_batch; ++i) call(comm);
      fc::barrier(comm);
      if (comm.rank() == 0) {
        const double s = virtual_time ? world.virtual_seconds(0) - v0
                                      : std::chrono::duration<double>(Clock::now() - t0).count();
        per_call.push_back(s / per_batch);
        timed += s;
      }
    }
  });
  return {median(per_call), o.warmup + static_cast<int>(per_call.size()) * per_batch};
}

double wire_per_rank(fc::emu::World& world, std::vector<std::uint64_t>& last, double calls) {
  double total = 0;
  for (int r = 0; r < world.size(); ++r) {
    const std::uint64_t now = world.bytes_sent(r);
    total += static_cast<double>(now - last[r]);
    last[r] = now;
  }
  return total / world.size() / calls;
}

fc::emu::WorldOptions world_options(const Options& o) {
  fc::emu::WorldOptions w;
  w.world_size = o.ranks;
  w.device.compute_units = o.compute_units;
  w.link_gbps = o.link_gbps;
  w.link_latency_us = o.link_us;
  if (o.clock == "virtual") w.clock = fc::emu::ClockKind::virtual_time;
  w.preset = o.preset;
  return w;
}

std::int64_t run_collectives(fc::emu::World& world, const Options& o, Printer& out) {
  std::vector<std::uint64_t> sent(o.ranks, 0);
  return collective_sweep(o, o.ranks, out, true, [&](CollectiveCase& c, Row& row) {
    (void)wire_per_rank(world, sent, 1);
    const Timing t = time_calls(world, c.call, o);
    row.seconds = t.seconds;
    row.wire = wire_per_rank(world, sent, t.calls);
    if (o.check)
      row.err = check_collective(c, o, [&] {
        world.run([&](fc::Communicator& comm) { c.call(comm); });
        (void)wire_per_rank(world, sent, 1);
      });
  });
}

std::int64_t run_fused(fc::emu::World& world, const Options& o, Printer& out) {
  std::vector<std::uint64_t> sent(o.ranks, 0);
  return fused_sweep(o, o.ranks, out, true, [&](FusedCase& c, Row& row) {
    double* slot[] = {&row.seconds, &row.up_seconds, &row.out_seconds};
    for (int m = 0; m < 3; ++m) {
      (void)wire_per_rank(world, sent, 1);
      const Timing t = time_calls(
          world, [&](fc::Communicator& comm) { c.call(comm, kModes[m]); }, o);
      *slot[m] = t.seconds;
      const double wire = wire_per_rank(world, sent, t.calls);
      if (kModes[m] == fc::Mode::scale_up) row.wire = wire;
    }
    if (o.check) {
      const auto expect = fused_expected(c);
      for (fc::Mode m : kModes) {
        for (auto* v : c.outputs()) fc::poison(v->data(), v->size() * 4);
        world.run([&](fc::Communicator& comm) { c.call(comm, m); });
        auto outs = c.outputs();
        for (int r = 0; r < o.ranks; ++r)
          row.err.add(outs[r]->data(), expect[r].data(), nullptr, outs[r]->size());
      }
      (void)wire_per_rank(world, sent, 1);
    }
  });
}

/// The header's description of the machine.
std::string setup_text(const fc::emu::World& world, const Options& o) {
  if (!world.virtual_time())
    return fc::detail::make_string(o.compute_units, " compute units per virtual GPU");
  const fc::model::Preset& p = world.preset();
  return fc::detail::make_string(
      "virtual time on preset '", p.name, "' (", p.origin, ": ", p.device.compute_units,
      " CUs x ", p.device.cu_gflops, " GFLOP/s, ", p.device.memory_gbps, " GB/s, launch ",
      p.device.launch_us, " us; ", fc::model::to_string(p.links.peer_topology), " peer links ",
      p.links.peer_gbps, " GB/s + ", p.links.peer_us, " us, ", p.links.gpus_per_node,
      " per node, NIC ", p.links.nic_gbps, " GB/s + ", p.links.nic_us, " us",
      p.links.nics() < p.links.gpus_per_node
          ? fc::detail::make_string(", ", p.links.nics(), " per node")
          : std::string(),
      ")");
}

int run_emu(const Options& o) {
  fc::emu::World world(world_options(o));
  Printer out(o, o.ranks, setup_text(world, o), "");
  out.header();
  const std::int64_t wrong =
      is_fused(o.op) ? run_fused(world, o, out) : run_collectives(world, o, out);
  out.footer();
  if (wrong > 0) {
    std::fprintf(stderr, "fusedcoll-perf: %lld elements differ from ref/\n",
                 static_cast<long long>(wrong));
    return 1;
  }
  return 0;
}

}  // namespace
#endif

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.backend == "mpi") {
#ifdef FUSEDCOLL_PERF_MPI
      return run_mpi(o, argc, argv);
#else
      usage_error("--backend mpi: this build has no MPI backend (configure with "
                  "-DFUSEDCOLL_ENABLE_MPI=ON and an MPI installed)");
#endif
    }
    if (o.backend == "gpu") {
#ifdef FUSEDCOLL_PERF_GPU
      return run_gpu(o);
#else
      usage_error("--backend gpu: this build has no GPU backend (configure with "
                  "-DFUSEDCOLL_ENABLE_CUDA=ON or -DFUSEDCOLL_ENABLE_HIP=ON)");
#endif
    }
#ifdef FUSEDCOLL_PERF_NO_EMU
    usage_error("--backend emu: this build has no emulator (FUSEDCOLL_BUILD_EMU=OFF)");
#else
    return run_emu(o);
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
