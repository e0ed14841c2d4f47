// main() of the MPI GoogleTest binaries, run under mpiexec by CTest. Only rank 0 prints gtest's
// usual output; every other rank prints its own failures, prefixed with its rank, and the exit
// status is the worst over all ranks, so a failure on any rank fails the test.

#include <gtest/gtest.h>
#include <mpi.h>
#include <oneapi/tbb/info.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "tests/mpi/mpi_world.hpp"

namespace fctest {
namespace {

std::optional<fusedcoll::Communicator> g_world;

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

}  // namespace

fusedcoll::Communicator& world() { return *g_world; }

}  // namespace fctest

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new fctest::RankFailurePrinter(rank));
  }
  int rc = 0;
  try {
    // As many workgroups per rank as oneTBB has threads, even where ranks share the cores (the
    // backend's default gives them one each then): races between a rank's workgroups show only
    // when it has several. SingleWorkgroup and DefaultWorkgroups cover the other settings.
    fusedcoll::mpi::Options o;
    o.workgroups = tbb::info::default_concurrency();
    fctest::g_world.emplace(fusedcoll::mpi::make_communicator(MPI_COMM_WORLD, o));
  } catch (const std::exception& e) {
    std::printf("rank %d: cannot create the communicator: %s\n", rank, e.what());
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst != 0) {
    if (rank == 0)
      std::printf("FAILED on rank(s) with status %d (see any [rank N] lines)\n", worst);
    std::fflush(stdout);
    // After a failure some rank's communicator may be unusable, and freeing the others' windows
    // (a collective) could then wait forever: end the job instead.
    MPI_Abort(MPI_COMM_WORLD, worst);
  }
  fctest::g_world.reset();
  MPI_Finalize();
  return worst;
}
