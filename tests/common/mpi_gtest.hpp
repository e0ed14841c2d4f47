#pragma once
// The MPI side of a GoogleTest binary run under mpiexec (tests/mpi/mpi_main.cpp, the GPU's
// tests/gpu/gpu_process_test.cpp): only rank 0 prints gtest's usual output, every other rank
// prints its own failures prefixed with its rank, and the exit status is the worst over all ranks.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

namespace fctest {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // The name is kept from OnTestStart: UnitTest::current_test_info() takes the lock that gtest
  // holds while it reports a part result, so calling it here deadlocks.
  void OnTestStart(const ::testing::TestInfo& t) override {
    test_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::printf("[rank %d] FAILED %s at %s:%d\n%s\n", rank_, test_.c_str(),
                r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    std::fflush(stdout);
  }

 private:
  int rank_;
  std::string test_;
};

/// This process's rank in MPI_COMM_WORLD, and the world's size.
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// MPI_Init_thread (MPI_THREAD_MULTIPLE) and GoogleTest's, with rank 0's printer only; returns
/// the rank.
inline int mpi_gtest_init(int& argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  return rank;
}

/// The worst of every rank's `rc`; on a failure, ends the job (after one some rank's state may be
/// unusable and a collective teardown could wait forever). Returns 0 otherwise: the caller
/// finalizes.
inline int mpi_gtest_worst(int rc, int rank) {
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst != 0) {
    if (rank == 0)
      std::printf("FAILED on rank(s) with status %d (see any [rank N] lines)\n", worst);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, worst);
  }
  return worst;
}

}  // namespace fctest
