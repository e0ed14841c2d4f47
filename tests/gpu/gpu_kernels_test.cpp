// Users' kernels on the GPU backend (label `gpu`; docs/kernels.md, "On the GPU"), in the
// single-GPU multi-rank mode: the tutorial's kernel and the AllGather + GEMM example
// (examples/kernels), launched through fusedcoll/kernel_launch.hpp exactly as on the emulator,
// bit-exact against their oracles at P = 1..8; the API's corners (tests/gpu/kernel_probe.hpp);
// the missing signal's TimeoutError naming rank, block, signal and value, with the World usable
// after it; an unregistered kernel and disagreeing ranks as clear errors. Every test skips where no
// device is visible. Plain C++ (host compiler): the kernels' GPU instantiations are compiled by
// nvcc / hipcc into this program by fusedcoll_add_kernel (tests/gpu/CMakeLists.txt).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fusedcoll/error.hpp"
#include "fusedcoll/gpu.hpp"
#include "fusedcoll/kernel_launch.hpp"
#include "tests/gpu/kernel_cases.hpp"

namespace {

namespace fc = fusedcoll;
using namespace fctest::kernels;

#define FC_REQUIRE_GPU()                                         \
  do {                                                           \
    if (!fc::gpu::available()) GTEST_SKIP() << "no GPU visible"; \
  } while (false)

fc::gpu::WorldOptions options(int P, double timeout_s = 20) {
  fc::gpu::WorldOptions o;
  o.world_size = P;
  o.placement = fc::gpu::Placement::single_gpu;
  o.timeout_s = timeout_s;
  return o;
}

/// Runs `per_rank` (which returns "" or a mismatch) on every rank of a P-rank World.
template <class F>
void on_every_rank(fc::gpu::World& gpu, F&& per_rank) {
  std::vector<std::string> why(static_cast<std::size_t>(gpu.size()));
  gpu.run([&](fc::Communicator& comm) { why[comm.rank()] = per_rank(comm); });
  for (const std::string& w : why) EXPECT_EQ(w, "");
}

TEST(GpuKernels, TutorialIsBitExactAtEveryWorldSize) {
  FC_REQUIRE_GPU();
  for (int P = 1; P <= 8; ++P) {
    SCOPED_TRACE("P = " + std::to_string(P));
    fc::gpu::World gpu(options(P));
    // Repeated launches on one World: buffers reused, cumulative signal targets.
    for (int grid : {1, 2, 3})
      for (std::int64_t chunk : {std::int64_t{37}, std::int64_t{1000}})
        on_every_rank(gpu,
                      [&](fc::Communicator& comm) { return tutorial_case(comm, chunk, grid); });
  }
}

TEST(GpuKernels, AgGemmFusedAndUnfusedAreBitExactAtEveryWorldSize) {
  FC_REQUIRE_GPU();
  for (int P = 1; P <= 8; ++P) {
    SCOPED_TRACE("P = " + std::to_string(P));
    fc::gpu::World gpu(options(P));
    for (bool fused : {true, false}) {
      on_every_rank(gpu, [&](fc::Communicator& comm) {
        return ag_gemm_case(comm, ag_gemm_rows(P, 1), 23, 70, fused);
      });
      // Several row and column tiles per rank, and K past a GEMM tile's inner loop.
      on_every_rank(gpu, [&](fc::Communicator& comm) {
        return ag_gemm_case(comm, ag_gemm_rows(P, 3), 300, 200, fused);
      });
    }
  }
}

TEST(GpuKernels, AgGemmEmptyShapes) {
  FC_REQUIRE_GPU();
  for (int P : {1, 3}) {
    fc::gpu::World gpu(options(P));
    for (bool fused : {true, false})
      for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{0, 5}, {9, 0}})
        on_every_rank(gpu, [&](fc::Communicator& comm) {
          return ag_gemm_case(comm, ag_gemm_rows(P, 1), k, n, fused);
        });
  }
}

/// The probe on a P-rank World: odd lengths (the byte path, an odd destination offset), rows
/// narrower than their stride, grids from one workgroup to the most resident.
void api_corners(int P) {
  SCOPED_TRACE("P = " + std::to_string(P));
  fc::gpu::World gpu(options(P));
  gpu.run([&](fc::Communicator& comm) {
    ProbeCase c(comm, 1001, 37, 5, 13, 17);
    for (int grid : {1, 2, 5, fc::max_grid<probe::Corners>(comm)})
      EXPECT_EQ(c.launch(comm, grid), "") << "grid " << grid;
  });
}

// Small enough for compute-sanitizer's memcheck and racecheck (scripts/gpu-check).
TEST(GpuKernels, ApiCornersOnThreeRanks) {
  FC_REQUIRE_GPU();
  api_corners(3);
}

TEST(GpuKernels, ApiCornersAtEveryWorldSize) {
  FC_REQUIRE_GPU();
  for (int P : {1, 2, 4, 5, 6, 7, 8}) api_corners(P);
}

TEST(GpuKernels, MissingSignalTimesOutNamingTheSignalAndTheWorldStaysUsable) {
  FC_REQUIRE_GPU();
  const int P = 3;
  fc::gpu::World gpu(options(P, 0.5));
  try {
    gpu.run([&](fc::Communicator& comm) {
      tutorial::reduce_scatter_relu<tutorial::MissingSignal>(
          comm, tutorial::x_of(comm.rank(), P, 37), tutorial::bias_of(comm.rank(), 37));
    });
    FAIL() << "a kernel whose signal never comes returned";
  } catch (const fc::TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kernel 'missing_signal'"), std::string::npos) << what;
    EXPECT_NE(what.find("block 0"), std::string::npos) << what;
    EXPECT_NE(what.find("('tutorial.arrived'[0]) >= 3, observed 0"), std::string::npos) << what;
  }
  // Slots and targets were reset together: the right kernel runs on the same World.
  on_every_rank(gpu, [&](fc::Communicator& comm) { return tutorial_case(comm, 37, 2); });
}

/// A kernel this program registers for no GPU.
struct Unregistered {
  static constexpr const char* name = "unregistered";
  struct Params {
    int unused;
  };
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg&, const Params&) {
    FC_RETURN;
  }
};

TEST(GpuKernels, AnUnregisteredKernelIsAClearError) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(options(2));
  for (bool grid_query : {false, true}) {
    try {
      gpu.run([&](fc::Communicator& comm) {
        if (grid_query) (void)fc::max_grid<Unregistered>(comm);
        fc::launch<Unregistered>(comm, 1, Unregistered::Params{0});
      });
      FAIL() << "an unregistered kernel launched";
    } catch (const fc::UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("fusedcoll_add_kernel"), std::string::npos) << e.what();
    }
  }
}

TEST(GpuKernels, RanksThatDisagreeFailTogether) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(options(2));
  EXPECT_THROW(gpu.run([&](fc::Communicator& comm) {
    (void)fc::symmetric<float>(comm, "disagree", comm.rank() == 0 ? 8 : 9);
  }),
               fc::InvalidArgument);
  // A buffer asked for again with no more elements is the same one, contents kept.
  on_every_rank(gpu, [&](fc::Communicator& comm) -> std::string {
    const auto a = fc::symmetric<float>(comm, "kept", 16);
    const std::vector<float> v(16, 1.5f + static_cast<float>(comm.rank()));
    fc::upload(comm, a, 0, v.data(), 16);
    const auto b = fc::symmetric<float>(comm, "kept", 4);
    if (b.id != a.id) return "a smaller request made a new buffer";
    std::vector<float> got(4);
    fc::download(comm, b, 0, got.data(), 4);
    return first_difference(comm.rank(), "kept", got, std::vector<float>(v.begin(), v.begin() + 4));
  });
}

}  // namespace
