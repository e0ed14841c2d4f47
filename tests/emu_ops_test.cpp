// The emulator's EmbeddingAllToAll, GemvAllReduce and GemmAllToAll against ref/, bit for bit (memcmp of every
// rank's whole output buffer, row padding included), in all three modes (unfused, scale_up,
// scale_out): world sizes 1..8, 1/2/4 compute units, uneven and empty batches, empty bags, ranks
// without tables or experts, zero routing counts, i32/i64 indices, per-sample weights, mean
// pooling, K = 0 / N = 0 / D = 0, padded output views, repeated calls in one world (cumulative
// signal targets, scratch reuse and growth), a single resident workgroup, and schedule fuzzing
// (random workgroup start order and delays before puts, stores and signals) over many seeds.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

#include "common/op_cases.hpp"

namespace {

using namespace fctest::ops;  // OpCase, the grids, emb_problem, gemm_problem, kModes
using fusedcoll::Communicator;
using fusedcoll::DType;
using fusedcoll::EmbeddingProblem;
using fusedcoll::GemmProblem;
using fusedcoll::Mode;
using fusedcoll::PoolingMode;
using fusedcoll::ValueMode;

constexpr int kWorldSizes[] = {1, 2, 3, 4, 8};
constexpr int kComputeUnits[] = {1, 2, 4};

/// Bitwise equality of two float buffers (memcmp; NaN payloads and signed zeros count).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

fusedcoll::emu::WorldOptions options(int P, int C, std::uint64_t fuzz_seed = 0, int resident = 0) {
  fusedcoll::emu::WorldOptions o;
  o.world_size = P;
  o.device.compute_units = C;
  o.device.max_resident_wgs = resident;
  o.fuzz_seed = fuzz_seed;
  o.timeout_s = 20;
  return o;
}

// ---------------------------------------------------------------------------------------------
// One case on the emulator (the grids and the comparison are tests/common/op_cases.hpp's).

/// Runs `c` on an emulated world; every rank's output must be ref/'s bits both when the rank's
/// call returns (schedule fuzzing makes a missing wait show here) and at the end of the run.
template <class Problem>
void run_case(const Problem& pb, Mode mode, int C, std::uint64_t fuzz = 0, int resident = 0,
              Layout layout = Layout::packed) {
  OpCase<Problem> c(pb, mode, layout);
  SCOPED_TRACE(c.what() + " C=" + std::to_string(C) + " fuzz_seed=" + std::to_string(fuzz) +
               " resident=" + std::to_string(resident));
  fusedcoll::emu::World world(options(pb.world_size, C, fuzz, resident));
  std::vector<std::vector<float>> at_return(static_cast<std::size_t>(pb.world_size));
  world.run([&](Communicator& comm) {
    c.call(comm);
    at_return[static_cast<std::size_t>(comm.rank())] = c.output(comm.rank());
  });
  for (int r = 0; r < pb.world_size; ++r) {
    EXPECT_TRUE(c.same_as_ref(r, &at_return[static_cast<std::size_t>(r)])) << "(at return)";
    EXPECT_TRUE(c.same_as_ref(r));
  }
}

/// Every compute-unit count for one case.
auto on_every_unit_count() {
  return [](const auto& pb, Mode mode) {
    for (int C : kComputeUnits) run_case(pb, mode, C);
  };
}

// ---------------------------------------------------------------------------------------------
// EmbeddingAllToAll

TEST(EmuEmbeddingAllToAll, MatchesRefAcrossWorldsUnitsAndModes) {
  for (int P : kWorldSizes) embedding_grid(P, on_every_unit_count());
}

TEST(EmuEmbeddingAllToAll, EdgeShapes) {
  for (int P : {1, 3, 4}) embedding_edge_shapes(P, [](const auto& pb, Mode mode) { run_case(pb, mode, 2); });
}

TEST(EmuEmbeddingAllToAll, SingleResidentWorkgroup) {
  for (Mode mode : kModes)
    for (int P : {2, 4}) run_case(emb_problem(P, 4, 31), mode, 1, 0, /*resident=*/1);
}

TEST(EmuEmbeddingAllToAll, PaddedOutputViews) {
  // Outputs with padded rows (stride(1) > D, stride(0) > T * stride(1)): only the elements of the
  // view are written; padding keeps its poison, as in ref/.
  every_mode(emb_problem(3, 1, 55), [](const auto& pb, Mode mode) {
    run_case(pb, mode, 2, 0, 0, Layout::padded);
  });
}

// ---------------------------------------------------------------------------------------------
// GemmAllToAll

TEST(EmuGemmAllToAll, MatchesRefAcrossWorldsUnitsAndModes) {
  for (int P : kWorldSizes) gemm_grid(P, on_every_unit_count());
}

TEST(EmuGemmAllToAll, EdgeShapes) {
  for (int P : {1, 3, 4}) gemm_edge_shapes(P, [](const auto& pb, Mode mode) { run_case(pb, mode, 2); });
}

TEST(EmuGemmAllToAll, SingleResidentWorkgroup) {
  for (Mode mode : kModes)
    for (int P : {2, 4}) run_case(gemm_problem(P, 1, 41), mode, 1, 0, /*resident=*/1);
}

TEST(EmuGemmAllToAll, PaddedOutputRows) {
  every_mode(gemm_problem(3, 0, 77), [](const auto& pb, Mode mode) {
    run_case(pb, mode, 2, 0, 0, Layout::padded);
  });
}

// ---------------------------------------------------------------------------------------------
// GemvAllReduce (its runtime-level cases are in emu_runtime_test.cpp)

TEST(EmuGemvAllReduce, MatchesRefAcrossWorldsAndModes) {
  for (int P : kWorldSizes) gemv_grid(P, [](const auto& pb, Mode mode) { run_case(pb, mode, 2); });
}

TEST(EmuGemvAllReduce, PaddedOutputRows) {
  for (int P : {1, 3})
    every_mode(gemv_problem(P, 3, 130, 42, false), [](const auto& pb, Mode mode) {
      run_case(pb, mode, 2, 0, 0, Layout::padded);
    });
}

TEST(EmuGemvAllReduce, SingleResidentWorkgroup) {
  for (Mode mode : kModes)
    for (int P : {2, 4}) run_case(gemv_problem(P, 3, 130, 41, true), mode, 1, 0, /*resident=*/1);
}

// ---------------------------------------------------------------------------------------------
// Many calls in one world: cumulative signal targets, slot and scratch reuse, scratch growth, both
// ops and all modes interleaved.

TEST(EmuOps, RepeatedCallsInOneWorld) {
  const int P = 4;
  struct Round {
    EmbeddingProblem emb;
    GemmProblem gemm;
    std::vector<fusedcoll::EmbeddingRankData> emb_ref, emb_emu;
    std::vector<fusedcoll::GemmRankData> gemm_ref, gemm_emu;
    std::vector<fusedcoll::EmbeddingAllToAllArgs> emb_args;
    std::vector<fusedcoll::GemmAllToAllArgs> gemm_args;
  };
  std::vector<Round> rounds;
  for (int i = 0; i < 9; ++i) {  // shapes grow and shrink, so scratch buffers grow mid-run
    Round r;
    r.emb = emb_problem(P, i % 6, 900 + i);
    if (i % 3 == 1) {
      for (auto& b : r.emb.batch_sizes) b *= 3;
    }
    r.gemm = gemm_problem(P, i % 4, 950 + i);
    if (i % 3 == 2) r.gemm.random_routing(60);
    r.emb_ref = fusedcoll::make_world(r.emb);
    r.emb_emu = fusedcoll::make_world(r.emb);
    r.gemm_ref = fusedcoll::make_world(r.gemm);
    r.gemm_emu = fusedcoll::make_world(r.gemm);
    fusedcoll::ref::embedding_alltoall(fusedcoll::args_of(r.emb_ref));
    fusedcoll::ref::gemm_alltoall(fusedcoll::args_of(r.gemm_ref));
    r.emb_args = fusedcoll::args_of(r.emb_emu);
    r.gemm_args = fusedcoll::args_of(r.gemm_emu);
    rounds.push_back(std::move(r));
  }
  for (std::uint64_t fuzz : {std::uint64_t{0}, std::uint64_t{4242}}) {
    SCOPED_TRACE("fuzz_seed=" + std::to_string(fuzz));
    for (auto& r : rounds) {
      for (auto& d : r.emb_emu) fusedcoll::poison(d.output.data(), d.output.size() * sizeof(float));
      for (auto& d : r.gemm_emu) fusedcoll::poison(d.output.data(), d.output.size() * sizeof(float));
    }
    std::atomic<int> bad_at_return{0};  // outputs incomplete when their call returned
    fusedcoll::emu::World world(options(P, 2, fuzz));
    world.run([&](Communicator& comm) {
      const auto me = static_cast<std::size_t>(comm.rank());
      for (std::size_t i = 0; i < rounds.size(); ++i) {
        fusedcoll::embedding_alltoall(comm, rounds[i].emb_args[me], kModes[i % 3]);
        const auto& eo = rounds[i].emb_emu[me].output;
        const auto& er = rounds[i].emb_ref[me].output;
        if (!same_bits(eo, er)) ++bad_at_return;
        fusedcoll::gemm_alltoall(comm, rounds[i].gemm_args[me], kModes[(i + 1) % 3]);
        const auto& go = rounds[i].gemm_emu[me].output;
        const auto& gr = rounds[i].gemm_ref[me].output;
        if (!same_bits(go, gr)) ++bad_at_return;
      }
    });
    EXPECT_EQ(bad_at_return.load(), 0);
    for (std::size_t i = 0; i < rounds.size(); ++i)
      for (int q = 0; q < P; ++q) {
        const auto& er = rounds[i].emb_ref[q].output;
        const auto& ee = rounds[i].emb_emu[q].output;
        EXPECT_TRUE(same_bits(er, ee))
            << "embedding round " << i << " rank " << q;
        const auto& gr = rounds[i].gemm_ref[q].output;
        const auto& ge = rounds[i].gemm_emu[q].output;
        EXPECT_TRUE(same_bits(gr, ge))
            << "gemm round " << i << " rank " << q;
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Mismatched calls fail with InvalidArgument before any data moves, not with a hang.

TEST(EmuOps, MismatchedCallsAreRejected) {
  const int P = 3;
  {  // ranks disagree on the mode
    const EmbeddingProblem pb = emb_problem(P, 0, 61);
    auto w = fusedcoll::make_world(pb);
    const auto args = fusedcoll::args_of(w);
    fusedcoll::emu::World world(options(P, 1));
    EXPECT_THROW(world.run([&](Communicator& comm) {
      const auto me = static_cast<std::size_t>(comm.rank());
      fusedcoll::embedding_alltoall(comm, args[me], me == 1 ? Mode::scale_out : Mode::scale_up);
    }),
                 fusedcoll::InvalidArgument);
  }
  {  // ranks disagree on the pooling mode
    const EmbeddingProblem pb = emb_problem(P, 0, 62);
    auto w = fusedcoll::make_world(pb);
    auto args = fusedcoll::args_of(w);
    args[2].pooling = PoolingMode::mean;
    fusedcoll::emu::World world(options(P, 1));
    EXPECT_THROW(world.run([&](Communicator& comm) {
      fusedcoll::embedding_alltoall(comm, args[static_cast<std::size_t>(comm.rank())],
                                    Mode::scale_out);
    }),
                 fusedcoll::InvalidArgument);
  }
  {  // GemmAllToAll: ranks disagree on the mode
    const GemmProblem pb = gemm_problem(P, 0, 63);
    auto w = fusedcoll::make_world(pb);
    const auto args = fusedcoll::args_of(w);
    fusedcoll::emu::World world(options(P, 1));
    EXPECT_THROW(world.run([&](Communicator& comm) {
      const auto me = static_cast<std::size_t>(comm.rank());
      fusedcoll::gemm_alltoall(comm, args[me], me == 0 ? Mode::unfused : Mode::scale_up);
    }),
                 fusedcoll::InvalidArgument);
  }
}

// ---------------------------------------------------------------------------------------------
// Schedule fuzzing: random workgroup start order and random delays before puts, stores and
// signals, reproducible from the seed (printed on failure).

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kFuzzSeeds = 10;  // the Release run does all 50; sanitizers are 5-15x slower
#else
constexpr std::uint64_t kFuzzSeeds = 50;
#endif
constexpr int kFuzzWorlds[] = {2, 3, 4, 8};

TEST(EmuFuzz, EmbeddingAllToAll) {
  for (Mode mode : kModes)
    for (std::uint64_t seed = 1; seed <= kFuzzSeeds; ++seed) {
      const int P = kFuzzWorlds[seed % 4];
      EmbeddingProblem pb = emb_problem(P, static_cast<int>(seed % 6), seed);
      for (auto& b : pb.batch_sizes) b = std::min<std::int64_t>(b, 20);
      run_case(pb, mode, 1 + static_cast<int>(seed % 2), seed);
      if (HasFailure()) return;
    }
}

TEST(EmuFuzz, GemmAllToAll) {
  for (Mode mode : kModes)
    for (std::uint64_t seed = 1; seed <= kFuzzSeeds; ++seed) {
      const int P = kFuzzWorlds[seed % 4];
      GemmProblem pb = gemm_problem(P, static_cast<int>(seed % 4), seed);
      pb.random_routing(20);
      run_case(pb, mode, 1 + static_cast<int>(seed % 2), seed);
      if (HasFailure()) return;
    }
}

}  // namespace
