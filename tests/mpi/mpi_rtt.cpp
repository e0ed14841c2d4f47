// mpi_rtt N: rank 0 and the last rank bounce one byte N times (after 50 unmeasured round trips) and
// rank 0 prints the median and the 10th and 90th percentiles of the round trip in microseconds:
//   rtt_us median M p10 A p90 B
// tests/mpi/multihost_delay.sh runs it across 2 namespace hosts with and without an added link
// delay (scripts/netns-cluster --delay) and checks the median grew by the delay, both ways.

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int n = argc > 1 ? std::atoi(argv[1]) : 500;
  const int peer = rank == 0 ? size - 1 : 0;
  if (size < 2 || n < 1) {
    if (rank == 0) std::fprintf(stderr, "mpi_rtt: needs 2 or more ranks and N >= 1\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  std::vector<double> rtt;
  char byte = 0;
  if (rank == 0 || rank == size - 1) {
    for (int i = -50; i < n; ++i) {
      const double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(&byte, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
        MPI_Recv(&byte, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(&byte, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&byte, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
      }
      if (i >= 0) rtt.push_back((MPI_Wtime() - t0) * 1e6);
    }
  }
  if (rank == 0) {
    std::sort(rtt.begin(), rtt.end());
    auto at = [&](double q) { return rtt[static_cast<std::size_t>(q * (rtt.size() - 1))]; };
    std::printf("rtt_us median %.1f p10 %.1f p90 %.1f\n", at(0.5), at(0.1), at(0.9));
  }
  MPI_Finalize();
  return 0;
}
