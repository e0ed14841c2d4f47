// The scale-out simulator against the emulator in virtual time (docs/simulation.md, "Agreement
// with the emulator"): the same problem (the same generated inputs), the same preset, every
// operator in every mode, at 4 ranks (one node of 4) and 8 ranks (two nodes). Both consume the
// same plans and cost model; the emulator runs the kernels (and checks nothing here: the bits are
// emu tests' business), the simulator prices them on SimGrid. A change to the pricing of either
// side that the other does not follow shows as a disagreement beyond the tolerance.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"
#include "sim/ops.hpp"
#include "sim/sim.hpp"

namespace fc = fusedcoll;
namespace sim = fusedcoll::sim;

namespace {

/// The agreement asked of the two (issue 15: within 10%, operator by operator).
constexpr double kTolerance = 0.10;

/// mi250x with 4 devices per node, so that 8 ranks are two nodes.
fc::model::Preset preset() {
  fc::model::Preset p = fc::model::load_preset("mi250x");
  p.links.gpus_per_node = 4;
  return p;
}

constexpr fc::Mode kModes[] = {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out};

/// Simulated seconds of each mode. Runs before any emulator world exists: the simulator forks.
std::vector<double> simulated(int P, const std::function<sim::Program(const sim::Cluster&, int, fc::Mode)>& prog) {
  sim::Cluster c;
  c.preset = preset();
  c.nodes = P / c.preset.links.gpus_per_node;
  sim::Options o;
  o.merge_window = 1e-6;
  std::vector<double> t;
  for (fc::Mode m : kModes)
    t.push_back(sim::run_isolated([&] {
                  return sim::simulate(c, [&](int r) { return prog(c, r, m); }, o);
                }).iteration);
  return t;
}

/// Virtual seconds of each mode: barrier, the call, barrier.
template <class Problem, class Call>
std::vector<double> emulated(const Problem& pb, const Call& call) {
  fc::emu::WorldOptions o;
  o.world_size = pb.world_size;
  o.timeout_s = 60;
  o.clock = fc::emu::ClockKind::virtual_time;
  o.model = std::make_shared<const fc::model::Preset>(preset());
  fc::emu::World world(o);
  auto data = fc::make_world(pb);
  auto args = fc::args_of(data);
  std::vector<double> t;
  for (fc::Mode m : kModes) {
    world.run([](fc::Communicator& comm) { fc::barrier(comm); });
    const double t0 = world.virtual_seconds(0);
    world.run([&](fc::Communicator& comm) {
      call(comm, args[static_cast<std::size_t>(comm.rank())], m);
      fc::barrier(comm);
    });
    t.push_back(world.virtual_seconds(0) - t0);
  }
  return t;
}

void expect_agree(const char* op, int P, const std::vector<double>& s, const std::vector<double>& e) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const double ratio = s[i] / e[i];
    std::printf("%-9s %d ranks %-9s emulator %8.1f us  simulator %8.1f us  sim/emu %.3f\n", op, P,
                fc::to_string(kModes[i]), e[i] * 1e6, s[i] * 1e6, ratio);
    EXPECT_LE(std::abs(ratio - 1), kTolerance)
        << op << " " << fc::to_string(kModes[i]) << " at " << P << " ranks: simulator "
        << s[i] * 1e6 << " us, emulator " << e[i] * 1e6 << " us";
  }
}

/// Small tables (the emulator builds them), the generator's variable bags of 1..40 lookups.
fc::EmbeddingProblem embedding(int P) {
  fc::EmbeddingProblem p = fc::EmbeddingProblem::dlrm(P);
  for (auto& r : p.table_rows) r = 2000;
  p.batch_sizes.assign(static_cast<std::size_t>(P), 128);
  return p;
}

fc::GemmProblem gemm(int P) {
  fc::GemmProblem p = fc::GemmProblem::moe(P);
  p.k = 256;
  p.n = 256;
  p.random_routing(96);
  return p;
}

fc::GemvProblem gemv(int P) {
  fc::GemvProblem p = fc::GemvProblem::transformer(P);
  p.n = 16384;
  p.k_splits = fc::split_evenly(2048, P);
  return p;
}

class SimVsEmu : public ::testing::TestWithParam<int> {};

TEST_P(SimVsEmu, EmbeddingAllToAll) {
  const int P = GetParam();
  const auto pb = embedding(P);
  const auto s = simulated(P, [&](const sim::Cluster& c, int r, fc::Mode m) {
    return sim::embedding_program(pb, c, r, m);
  });
  const auto e = emulated(pb, [](fc::Communicator& c, const fc::EmbeddingAllToAllArgs& a, fc::Mode m) {
    fc::embedding_alltoall(c, a, m);
  });
  expect_agree("embedding", P, s, e);
}

TEST_P(SimVsEmu, GemmAllToAll) {
  const int P = GetParam();
  const auto pb = gemm(P);
  const auto s = simulated(P, [&](const sim::Cluster& c, int r, fc::Mode m) {
    return sim::gemm_program(pb, c, r, m);
  });
  const auto e = emulated(pb, [](fc::Communicator& c, const fc::GemmAllToAllArgs& a, fc::Mode m) {
    fc::gemm_alltoall(c, a, m);
  });
  expect_agree("gemm", P, s, e);
}

TEST_P(SimVsEmu, GemvAllReduce) {
  const int P = GetParam();
  const auto pb = gemv(P);
  const auto s = simulated(P, [&](const sim::Cluster& c, int r, fc::Mode m) {
    return sim::gemv_program(pb, c, r, m);
  });
  const auto e = emulated(pb, [](fc::Communicator& c, const fc::GemvAllReduceArgs& a, fc::Mode m) {
    fc::gemv_allreduce(c, a, m);
  });
  expect_agree("gemv", P, s, e);
}

// 4 ranks: one node (peer links only); 8 ranks: two nodes (NICs).
INSTANTIATE_TEST_SUITE_P(Ranks, SimVsEmu, ::testing::Values(4, 8),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "ranks"; });

}  // namespace
