// The GPU backend's process mode (label gpu), under mpiexec: one rank per process, P = 2 and 4
// sharing one device in CI's GPU check, peers through IPC mappings or, with
// FUSEDCOLL_GPU_PROXY=all, through the host proxy. Every rank checks its own output against ref/
// bit for bit: EmbeddingAllToAll, GemvAllReduce and GemmAllToAll in every mode (ops::OpCase builds
// the whole world from the seed in every process), and every collective, compressed wires included
// (the shared grids of tests/common/collective_cases.hpp, each rank's whole memory block). A wait
// for a signal that never comes ends in TimeoutError naming rank, block, slot, expected, observed
// and the proxy's view, instead of hanging. Skipped where no device is visible. Plain C++: the
// probe's kernel lives in signal_probe.cpp.

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "fusedcoll/env.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/gpu.hpp"
#include "tests/common/compressed_cases.hpp"
#include "tests/common/mpi_gtest.hpp"
#include "tests/common/op_cases.hpp"
#include "tests/gpu/kernel_cases.hpp"
#include "tests/gpu/signal_probe.hpp"

namespace {

namespace fc = fusedcoll;
using fc::Mode;
using namespace fctest::ops;

#define FC_REQUIRE_GPU()                                         \
  do {                                                           \
    if (!fc::gpu::available()) GTEST_SKIP() << "no GPU visible"; \
  } while (false)

fc::gpu::WorldOptions process_options() {
  fc::gpu::WorldOptions o;
  o.placement = fc::gpu::Placement::process;
  o.timeout_s = 20;
  return o;
}

std::string route_note() {
  return fc::env().gpu_proxy == fc::Env::GpuProxy::all ? " (every peer through the proxy)"
                                                       : " (same-node peers through IPC)";
}

TEST(GpuProcess, EmbeddingMatchesRefOnEveryRank) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  ASSERT_TRUE(gpu.process_mode());
  const int P = gpu.size();
  auto check = [&](const fc::EmbeddingProblem& pb, Mode mode) {
    OpCase<fc::EmbeddingProblem> c(pb, mode);
    gpu.run([&](fc::Communicator& comm) {
      c.call(comm);
      EXPECT_TRUE(c.same_as_ref(comm.rank())) << route_note();
    });
  };
  embedding_grid(P, check);
  embedding_edge_shapes(P, check);
}

TEST(GpuProcess, RepeatedCallsReuseTheHeapAndSlots) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  const int P = gpu.size();
  // Growing then shrinking sizes: the heap grows once, later calls reuse it and its slots.
  int i = 0;
  for (int variant : {0, 5, 2, 5, 0}) {
    OpCase<fc::EmbeddingProblem> c(emb_problem(P, variant, 300 + variant), kModes[i++ % 3]);
    gpu.run([&](fc::Communicator& comm) {
      c.call(comm);
      EXPECT_TRUE(c.same_as_ref(comm.rank())) << route_note();
    });
  }
}

TEST(GpuProcess, GemmMatchesRefOnEveryRank) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  const int P = gpu.size();
  auto check = [&](const fc::GemmProblem& pb, Mode mode) {
    OpCase<fc::GemmProblem> c(pb, mode);
    gpu.run([&](fc::Communicator& comm) {
      c.call(comm);
      EXPECT_TRUE(c.same_as_ref(comm.rank())) << route_note();
    });
  };
  gemm_grid(P, check);
  gemm_edge_shapes(P, check);
}

namespace coll_cases = fctest::collectives;

/// Every rank makes its own call of each case (the ranks meet at every call), then ref/ runs
/// for every rank and each rank compares its own memory block.
void run_collectives(fc::gpu::World& gpu, coll_cases::Cases& cases) {
  std::string first;
  gpu.run([&](fc::Communicator& comm) {
    for (auto& c : cases) {
      c->on_backend(comm);
      c->on_ref();
      const std::string d =
          coll_cases::first_difference(*c, static_cast<std::size_t>(comm.rank()), "gpu process");
      if (first.empty()) first = d;
    }
  });
  EXPECT_EQ(first, "") << route_note();
}

TEST(GpuProcess, CollectivesMatchRefOnEveryRank) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  const int P = gpu.size();
  coll_cases::Cases cases;
  coll_cases::add_all_reduce_grid(cases, P, 3 * 16384 * P + 11);
  coll_cases::add_reduce_scatter_grid(cases, P);
  coll_cases::add_all_gather_grid(cases, P);
  coll_cases::add_all_to_allv_grid(cases, P);
  coll_cases::add_broadcast_grid(cases, P);
  run_collectives(gpu, cases);
}

TEST(GpuProcess, CompressedCollectivesMatchRefOnEveryRank) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  const int P = gpu.size();
  coll_cases::Cases cases;
  coll_cases::add_compressed(cases, P, 1000);
  coll_cases::add_compressed_large(cases, P, 2000);
  coll_cases::add_compressed_chain(cases, P, 3000);
  run_collectives(gpu, cases);
}

TEST(GpuProcess, GemvMatchesRefOnEveryRank) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  const int P = gpu.size();
  auto check = [&](const fc::GemvProblem& pb, Mode mode, Layout layout) {
    OpCase<fc::GemvProblem> c(pb, mode, layout);
    gpu.run([&](fc::Communicator& comm) {
      c.call(comm);
      EXPECT_TRUE(c.same_as_ref(comm.rank())) << route_note();
    });
  };
  // 12 of the shared grid's 30 problems (the CPU replay runs all): the ranks' kernels take turns on
  // a time-sliced device, so each call costs slices. N = 0, N < P and several tiles per owner;
  // ranks with and without a K range.
  std::uint64_t seed = 300;
  for (std::int64_t m : {1, 16})
    for (std::int64_t n : {0, 1, 1000})
      for (bool zero_k : {false, true}) {
        const fc::GemvProblem pb = gemv_problem(P, m, n, ++seed, zero_k);
        for (Mode mode : kModes) check(pb, mode, Layout::packed);
      }
  // Padded rows of y keep their poison; and a shape whose partials span many tiles per owner.
  for (Mode mode : kModes) {
    check(gemv_problem(P, 3, 130, 77, true), mode, Layout::padded);
    check(gemv_problem(P, 16, 4099, 78, false), mode, Layout::packed);
  }
}

TEST(GpuProcess, AllRanksAtOnceIsAClearError) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  const int P = gpu.size();
  // The all-ranks-at-once form needs every rank's arguments in one process.
  std::vector<fc::EmbeddingAllToAllArgs> all(static_cast<std::size_t>(P));
  EXPECT_THROW(gpu.embedding_alltoall(all, Mode::scale_up), fc::InvalidArgument);
  std::vector<fc::GemvAllReduceArgs> gv(static_cast<std::size_t>(P));
  EXPECT_THROW(gpu.gemv_allreduce(gv, Mode::scale_up), fc::InvalidArgument);
}

TEST(GpuProcess, MissingSignalNamesTheSlotAndThePeer) {
  FC_REQUIRE_GPU();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  fc::gpu::testing::ProcessSignalProbe probe(0.5);
  probe.run(true);  // the signal comes: no error
  try {
    probe.run(false);
    if (probe.rank() == 0) ADD_FAILURE() << "rank 0 waited for a signal that never came";
  } catch (const fc::TimeoutError& e) {
    const std::string w = e.what();
    EXPECT_EQ(probe.rank(), 0) << w;
    EXPECT_NE(w.find("rank 0 block 0 waited more than 0.5 s"), std::string::npos) << w;
    EXPECT_NE(w.find("for slot 1 ('test.from'[1]) >= 2, observed 1"), std::string::npos) << w;
    EXPECT_NE(w.find("rank 0's proxy: slot 1 got"), std::string::npos) << w;
  }
}

// Users' kernels (docs/kernels.md, "On the GPU"): the tutorial's, the AllGather + GEMM example's
// fused kernel and the API's corners, each rank against the oracle, through IPC or the proxy.
TEST(GpuProcess, UsersKernelsMatchTheirOraclesOnEveryRank) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  const int P = gpu.size();
  using namespace fctest::kernels;
  gpu.run([&](fc::Communicator& comm) {
    for (int grid : {1, 2, 3}) EXPECT_EQ(tutorial_case(comm, 1000, grid), "") << route_note();
    EXPECT_EQ(ag_gemm_case(comm, ag_gemm_rows(P, 1), 23, 70, true), "") << route_note();
    EXPECT_EQ(ag_gemm_case(comm, ag_gemm_rows(P, 3), 300, 200, true), "") << route_note();
    ProbeCase c(comm, 1001, 37, 5, 13, 17);
    for (int grid : {1, 2, 5, fc::max_grid<probe::Corners>(comm)})
      EXPECT_EQ(c.launch(comm, grid), "") << "grid " << grid << route_note();
  });
}

// The example's unfused baseline: the GEMM after process mode's AllGather, bit-exact.
TEST(GpuProcess, AgGemmUnfusedMatchesRef) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(process_options());
  const int P = gpu.size();
  gpu.run([&](fc::Communicator& comm) {
    EXPECT_EQ(
        fctest::kernels::ag_gemm_case(comm, fctest::kernels::ag_gemm_rows(P, 1), 23, 70, false), "")
        << route_note();
  });
}

TEST(GpuProcess, UsersKernelsMissingSignalNamesTheSignal) {
  FC_REQUIRE_GPU();
  fc::gpu::WorldOptions o = process_options();
  o.timeout_s = 0.5;
  fc::gpu::World gpu(o);
  const int P = gpu.size();
  gpu.run([&](fc::Communicator& comm) {
    try {
      tutorial::reduce_scatter_relu<tutorial::MissingSignal>(
          comm, tutorial::x_of(comm.rank(), P, 37), tutorial::bias_of(comm.rank(), 37));
      ADD_FAILURE() << "rank " << comm.rank() << " waited for a signal that never came";
    } catch (const fc::TimeoutError& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find("kernel 'missing_signal': rank " + std::to_string(comm.rank()) + " block 0"),
                std::string::npos)
          << w;
      EXPECT_NE(w.find("('tutorial.arrived'[0]) >= " + std::to_string(P)), std::string::npos) << w;
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = fctest::mpi_gtest_init(argc, argv);
  const int rc = RUN_ALL_TESTS();
  fctest::mpi_gtest_worst(rc, rank);
  MPI_Finalize();
  return 0;
}
