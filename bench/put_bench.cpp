// fusedcoll-put-bench: what one put-with-signal costs between two MPI processes, the way the MPI
// backend signals (MPI_Put, MPI_Win_flush, MPI_Accumulate of the flag, MPI_Win_flush). The cost
// model's `host` preset takes its link from this (scripts/calibrate-host-preset).
//
//   mpiexec -n 2 fusedcoll-put-bench [--quick] [--p2p]
//
// Rank 0 puts n bytes into rank 1's window and signals, `reps` times per size, each timed alone
// on rank 0 from the first put to the return of the last flush; rank 1 meanwhile polls its flag
// as a receiving workgroup does. Prints one line per size (median microseconds and GB/s), then
// the fit the preset uses: latency = the time of an 8-byte put, bandwidth = bytes over the time
// added beyond that latency, at the largest size. Last, the sender's cost of one small put:
// 1024 puts of 256 B (an embedding row at D = 64, as scale-up puts them) to distinct offsets and
// one flush, timed on rank 0 and divided by the count (the cost model's `put_us`); and the share
// of a 16 MiB put's time that the MPI_Put call itself takes (`put_cu_share`: 1 when the caller
// copies the bytes, as into a shared-memory window).

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The link fit of a size sweep: the time at 8 B (latency) and the bandwidth from the largest
/// size beyond it.
struct Fit {
  double latency_s = 0;
  double gbps = 0;
};

/// Times `trial(n)` for n = 8, 64, ... up to `largest` bytes, `reps` times after `warmup`, each
/// after a barrier; rank 0 prints the median of each size (GB/s with `digits` decimals) and
/// returns the fit. `trial` returns the time of one transfer on rank 0 (ignored elsewhere).
template <class Trial>
Fit sweep(int rank, int reps, int warmup, std::int64_t largest, const char* time_header,
          int digits, Trial trial) {
  if (rank == 0) std::printf("%12s %12s %10s\n", "bytes", time_header, "GB/s");
  double latency_s = 0, last_s = 0;
  std::int64_t last_n = 0;
  for (std::int64_t n = 8; n <= largest; n *= 8) {
    std::vector<double> times;
    for (int r = 0; r < reps + warmup; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t = trial(n);
      if (r >= warmup) times.push_back(t);
    }
    if (rank == 0) {
      const double t = median(times);
      std::printf("%12lld %12.2f %10.*f\n", static_cast<long long>(n), t * 1e6, digits, n / t / 1e9);
      if (n == 8) latency_s = t;
      last_s = t;
      last_n = n;
    }
  }
  return {latency_s, last_s > latency_s ? last_n / (last_s - latency_s) / 1e9 : 0.0};
}

/// --p2p: where no RMA window spans the ranks (hosts joined by TCP), the MPI backend's p2p
/// transport sends messages; a ping-pong of n bytes, half the round trip, is the cost model's
/// link time for n bytes: latency at 8 B, bandwidth from the largest size beyond it.
int p2p_main(int rank, int reps, std::int64_t largest) {
  constexpr int kWarmup = 3;
  std::vector<char> buf(static_cast<std::size_t>(largest), 0x5a);
  const int peer = 1 - rank;
  const Fit fit = sweep(rank, reps, kWarmup, largest, "one-way(us)", 4, [&](std::int64_t n) {
    const double t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buf.data(), static_cast<int>(n), MPI_BYTE, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), static_cast<int>(n), MPI_BYTE, peer, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf.data(), static_cast<int>(n), MPI_BYTE, peer, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), static_cast<int>(n), MPI_BYTE, peer, 0, MPI_COMM_WORLD);
    }
    return (MPI_Wtime() - t0) / 2;
  });
  if (rank == 0) {
    std::printf("latency_us %.3f\n", fit.latency_s * 1e6);
    std::printf("bandwidth_gbps %.4f\n", fit.gbps);
  }
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  bool quick = false, p2p = false;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::string_view(argv[i]) == "--quick";
    p2p = p2p || std::string_view(argv[i]) == "--p2p";
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "fusedcoll-put-bench: run with mpiexec -n 2\n");
    MPI_Finalize();
    return 2;
  }
  const std::int64_t largest = quick ? (std::int64_t{1} << 20) : (std::int64_t{64} << 20);
  const int reps = quick ? 5 : 21;
  if (p2p) return p2p_main(rank, reps, quick ? (std::int64_t{1} << 20) : (std::int64_t{16} << 20));
  const std::size_t flag_bytes = 64;
  constexpr int kWarmup = 5;
  void* base = nullptr;
  MPI_Win win;
  MPI_Win_allocate(static_cast<MPI_Aint>(flag_bytes + largest), 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                   &base, &win);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  std::vector<char> src(static_cast<std::size_t>(largest), 0x5a);
  auto* flag = static_cast<std::uint64_t*>(base);
  std::uint64_t expected = 0;
  const Fit fit = sweep(rank, reps, kWarmup, largest, "time(us)", 3, [&](std::int64_t n) {
    if (rank == 0) {
      const double t0 = MPI_Wtime();
      MPI_Put(src.data(), static_cast<int>(n), MPI_BYTE, 1, static_cast<MPI_Aint>(flag_bytes),
              static_cast<int>(n), MPI_BYTE, win);
      MPI_Win_flush(1, win);
      const std::uint64_t one = 1;
      MPI_Accumulate(&one, 1, MPI_UINT64_T, 1, 0, 1, MPI_UINT64_T, MPI_SUM, win);
      MPI_Win_flush(1, win);
      return MPI_Wtime() - t0;
    }
    ++expected;
    std::uint64_t seen = 0;
    do {
      MPI_Fetch_and_op(nullptr, &seen, MPI_UINT64_T, 1, 0, MPI_NO_OP, win);
      MPI_Win_flush(1, win);
    } while (seen < expected);
    return 0.0;
  });
  constexpr int kSmallPuts = 1024;
  constexpr int kSmallBytes = 256;
  std::vector<double> small;
  for (int r = 0; r < reps + kWarmup; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 0) continue;
    const double t0 = MPI_Wtime();
    for (int i = 0; i < kSmallPuts; ++i)
      MPI_Put(src.data(), kSmallBytes, MPI_BYTE, 1,
              static_cast<MPI_Aint>(flag_bytes) + static_cast<MPI_Aint>(i) * kSmallBytes,
              kSmallBytes, MPI_BYTE, win);
    MPI_Win_flush(1, win);
    if (r >= kWarmup) small.push_back((MPI_Wtime() - t0) / kSmallPuts);
  }
  // Who moves a put's bytes: the time in the MPI_Put call of a 16 MiB put over the time until
  // its flush returns. Near 1 where the caller copies them itself (osc/sm's shared-memory
  // window), near 0 where the call only hands them to an engine (the cost model's
  // `put_cu_share`).
  const std::int64_t share_bytes = std::min<std::int64_t>(largest, std::int64_t{16} << 20);
  std::vector<double> in_call, whole;
  for (int r = 0; r < reps + kWarmup; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 0) continue;
    const double t0 = MPI_Wtime();
    MPI_Put(src.data(), static_cast<int>(share_bytes), MPI_BYTE, 1,
            static_cast<MPI_Aint>(flag_bytes), static_cast<int>(share_bytes), MPI_BYTE, win);
    const double t1 = MPI_Wtime();
    MPI_Win_flush(1, win);
    const double t2 = MPI_Wtime();
    if (r >= kWarmup) {
      in_call.push_back(t1 - t0);
      whole.push_back(t2 - t0);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("latency_us %.3f\n", fit.latency_s * 1e6);
    std::printf("put_us %.4f\n", median(small) * 1e6);
    std::printf("put_cu_share %.3f\n", std::min(1.0, median(in_call) / median(whole)));
    std::printf("bandwidth_gbps %.3f\n", fit.gbps);
  }
  (void)flag;
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  MPI_Finalize();
  return 0;
}
