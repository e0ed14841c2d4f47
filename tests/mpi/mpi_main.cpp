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

#include "tests/common/mpi_gtest.hpp"
#include "tests/mpi/mpi_world.hpp"

namespace fctest {
namespace {

std::optional<fusedcoll::Communicator> g_world;

}  // namespace

fusedcoll::Communicator& world() { return *g_world; }

}  // namespace fctest

int main(int argc, char** argv) {
  const int rank = fctest::mpi_gtest_init(argc, argv);
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
  const int rc = RUN_ALL_TESTS();
  const int worst = fctest::mpi_gtest_worst(rc, rank);
  fctest::g_world.reset();
  MPI_Finalize();
  return worst;
}
