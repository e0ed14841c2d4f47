// fusedcoll-transport-bench: what the MPI backend's own transport (mpi/runtime.hpp: rma on one
// host, p2p across hosts) costs per put, per byte and per wait when 4 ranks share 2 cores, as in
// the validation matrix's cells. The cost model's presets of ranks sharing this machine take
// `put_us`, `nic_cpu_gbps`, `nic_us` and `handover_us` from it (scripts/calibrate-host-preset
// --all; docs/simulation.md, "Calibrating a preset"); fusedcoll-put-bench, one rank a core with
// plain MPI calls that spin, sees none of them.
//
//   scripts/netns-cluster -H 2 -r 2 -- fusedcoll-transport-bench [--quick]   (p2p over TCP)
//   mpiexec --oversubscribe -n 4 fusedcoll-transport-bench [--quick]          (one host: rma)
//
// Every rank takes part; rank r's partner is r + size/2 (mod size): on the namespace cluster the
// rank of the same index on the other host. All ranks move at once, as in the operators, and
// each figure is the median over repetitions of the slowest rank's time:
//
// - exchange: every rank puts 256 KiB to its partner in puts of s bytes (256 B, the rows
//   scale-up puts, up to one put of 256 KiB), signals it once and waits for its partner's signal.
//   The exchange of 256-byte puts beyond that of 4 KiB puts, over the puts added, is what a
//   small put costs the rank's core, sending one and receiving one (`put_cost_us`).
// - stream: the same with n bytes in puts of 1 MiB, n = 256 KiB ... 16 MiB: the long streams of
//   a large collective, every rank's network stack on the shared cores (`stream_us` of the
//   largest: the presets' `nic_cpu_gbps`).
// - ping-pong: an 8-byte put with its signal, and back, between partners; the one-way time.
//   "alone": pair 0 only, the other ranks asleep between tests of a barrier; "loaded": every
//   pair at once. The difference is what a waiter loses when every rank is busy on the shared
//   cores (`handover_loaded_us`, the presets' `handover_us`).

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <thread>
#include <vector>

#include "fusedcoll/mpi.hpp"
#include "mpi/runtime.hpp"

namespace {

namespace fc = fusedcoll;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The slowest rank's time, on every rank.
double slowest(double t) {
  double m = 0;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

/// Waits for every rank without spinning: the ranks that sit out a test sleep between tests of
/// the barrier, so that the ranks under test have the cores.
void sleepy_barrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  int done = 0;
  for (;;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick = quick || std::string_view(argv[i]) == "--quick";
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2 || size % 2 != 0) {
    if (rank == 0) std::fprintf(stderr, "fusedcoll-transport-bench: run with an even rank count\n");
    MPI_Finalize();
    return 2;
  }
  int rc = 0;
  try {
    const int reps = quick ? 5 : 31;
    constexpr int kWarmup = 3;
    constexpr std::size_t kBytes = std::size_t{256} << 10;
    const int partner = (rank + size / 2) % size;
    fc::mpi::Runtime rt(MPI_COMM_WORLD, {});
    constexpr std::size_t kStream = std::size_t{16} << 20, kPut = std::size_t{1} << 20;
    rt.reserve(kBytes + 64 + kStream);
    std::vector<char> big(kStream, 0x3c);
    const int slot = rt.slots("bench.transport", 1);
    std::vector<char> src(kBytes, 0x5a);
    if (rank == 0)
      std::printf("ranks %d, hosts %d\n", size,
                  *std::max_element(rt.host_of().begin(), rt.host_of().end()) + 1);

    // exchange: 256 KiB to the partner in puts of s bytes, one signal, wait for the partner's.
    std::vector<std::size_t> sizes = {256, 4096, 65536, kBytes};
    std::vector<double> exchange_us;
    if (rank == 0) std::printf("%12s %8s %14s\n", "put_bytes", "puts", "exchange(us)");
    for (const std::size_t s : sizes) {
      std::vector<double> times;
      for (int r = 0; r < reps + kWarmup; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        rt.begin_call();
        for (std::size_t off = 0; off < kBytes; off += s) rt.put(partner, off, src.data() + off, s);
        rt.signal(partner, slot);
        rt.wait(slot, rt.expect(slot, 1), "bench.transport exchange");
        rt.end_call();
        const double t = slowest(MPI_Wtime() - t0);
        if (r >= kWarmup) times.push_back(t);
      }
      exchange_us.push_back(median(times) * 1e6);
      if (rank == 0) std::printf("%12zu %8zu %14.2f\n", s, kBytes / s, exchange_us.back());
    }
    // Both sizes travel as records inside the control messages (mpi/p2p.cpp's inline puts), so
    // their difference is the records' cost, not a change of protocol.
    const double puts_added = double(kBytes / sizes[0] - kBytes / sizes[1]);

    // stream: n bytes to the partner in puts of at most 1 MiB, all ranks at once, n from 256 KiB
    // to kStream: the long streams of a large collective, every rank's network stack on the
    // shared cores.
    const std::size_t stream = quick ? kStream / 8 : kStream;
    double stream_s = 0;
    std::size_t streamed = 0;
    if (rank == 0) std::printf("%12s %14s %14s\n", "stream_bytes", "time(us)", "GB/s/rank");
    for (std::size_t n = kBytes; n <= stream; n *= 4) {
      std::vector<double> stream_times;
      for (int r = 0; r < std::max(3, reps / 3) + 1; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        rt.begin_call();
        for (std::size_t off = 0; off < n; off += kPut)
          rt.put(partner, kBytes + 64 + off, big.data() + off, std::min(kPut, n - off));
        rt.signal(partner, slot);
        rt.wait(slot, rt.expect(slot, 1), "bench.transport stream");
        rt.end_call();
        const double t = slowest(MPI_Wtime() - t0);
        if (r >= 1) stream_times.push_back(t);
      }
      stream_s = median(stream_times);
      streamed = n;
      if (rank == 0)
        std::printf("%12zu %14.1f %14.4f\n", n, stream_s * 1e6, double(n) / stream_s / 1e9);
    }

    // ping-pong: 8 bytes and a signal to the partner, and back; `active` pairs at once.
    auto pingpong = [&](bool all) {
      const bool active = all || rank == 0 || partner == 0;
      const bool first = rank < partner;
      std::vector<double> times;
      constexpr int kRounds = 20;
      for (int r = 0; r < reps + kWarmup; ++r) {
        sleepy_barrier();
        if (!active) continue;
        rt.begin_call();
        const double t0 = MPI_Wtime();
        for (int i = 0; i < kRounds; ++i) {
          if (first) {
            rt.put(partner, kBytes, src.data(), 8);
            rt.signal(partner, slot);
            rt.wait(slot, rt.expect(slot, 1), "bench.transport ping");
          } else {
            rt.wait(slot, rt.expect(slot, 1), "bench.transport ping");
            rt.put(partner, kBytes, src.data(), 8);
            rt.signal(partner, slot);
          }
        }
        const double t = (MPI_Wtime() - t0) / (2 * kRounds);
        rt.end_call();
        if (r >= kWarmup) times.push_back(t);
      }
      double m = times.empty() ? 0.0 : median(times);
      double out = 0;
      MPI_Allreduce(&m, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      return out * 1e6;
    };
    const double alone = pingpong(false);
    const double loaded = pingpong(true);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("pingpong_alone_us %.3f\n", alone);
      std::printf("pingpong_loaded_us %.3f\n", loaded);
      std::printf("handover_loaded_us %.3f\n", std::max(0.0, loaded - alone));
      std::printf("stream_bytes %zu\nstream_us %.1f\n", streamed, stream_s * 1e6);
      std::printf("put_cost_us %.4f\n",
                  std::max(0.0, (exchange_us[0] - exchange_us[1]) / puts_added));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedcoll-transport-bench: rank %d: %s\n", rank, e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
