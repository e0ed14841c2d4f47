// The GPU backend against ref/ (label `gpu`): every op in every mode, P in {1, 2, 4, 8}, uneven
// and empty shapes, outputs poisoned before each run. ValueMode::integer must match bit for bit
// (memcmp); ValueMode::random within a relative error of 1e-5 of the output's largest magnitude
// (the kernels keep ref/'s per-element orders without FMA, so they are expected to match exactly
// there too; the tolerance is the contract, docs/semantics.md). A deliberately broken kernel (a
// missing signal) must end in TimeoutError naming the rank, block and slot. Every test skips where
// no device is visible. Plain C++ (host compiler): the broken kernel is in signal_probe.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/gpu.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"
#include "tests/common/op_cases.hpp"
#include "tests/gpu/signal_probe.hpp"

namespace {

namespace fc = fusedcoll;
using fc::Mode;
using fc::ValueMode;

constexpr Mode kModes[] = {Mode::unfused, Mode::scale_up, Mode::scale_out};
constexpr int kWorldSizes[] = {1, 2, 4, 8};

#define FC_REQUIRE_GPU()                                                    \
  do {                                                                      \
    if (!fc::gpu::available()) GTEST_SKIP() << "no GPU visible";            \
  } while (false)

fc::gpu::WorldOptions options(int P) {
  fc::gpu::WorldOptions o;
  o.world_size = P;
  o.timeout_s = 20;
  return o;
}

/// Integer inputs: bit for bit. Random inputs: |gpu - ref| <= 1e-5 * max |ref| of the buffer,
/// and both NaN (poison) exactly where ref/ left poison.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& ref, ValueMode mode,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  if (mode == ValueMode::integer) {
    EXPECT_TRUE(gpu.empty() || std::memcmp(gpu.data(), ref.data(), gpu.size() * sizeof(float)) == 0)
        << what << ": not bit-identical";
    if (gpu.empty() || std::memcmp(gpu.data(), ref.data(), gpu.size() * sizeof(float)) == 0) return;
  }
  float scale = 0;
  for (float v : ref)
    if (!std::isnan(v)) scale = std::max(scale, std::fabs(v));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const bool ok = std::isnan(ref[i]) ? std::isnan(gpu[i])
                                       : std::fabs(gpu[i] - ref[i]) <= 1e-5f * scale;
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " gpu " << gpu[i] << " ref " << ref[i];
  }
  EXPECT_EQ(bad, 0u) << what;
}

std::vector<int> place(std::int64_t count, int P, int how) {
  std::vector<int> owner(static_cast<std::size_t>(count));
  for (std::int64_t t = 0; t < count; ++t)
    owner[static_cast<std::size_t>(t)] =
        how % 3 == 0 ? static_cast<int>(t % P) : (how % 3 == 1 ? 0 : P - 1 - static_cast<int>(t % P));
  return owner;
}

std::vector<std::int64_t> batches(int P, int salt) {
  std::vector<std::int64_t> b(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q) b[q] = (q % 3 == 1) ? 0 : 1 + (q * 11 + salt * 7 + P) % 37;
  return b;
}

void run_on(fc::gpu::World& gpu, const std::vector<fc::EmbeddingAllToAllArgs>& a, Mode m) {
  gpu.embedding_alltoall(a, m);
}
void run_on(fc::gpu::World& gpu, const std::vector<fc::GemvAllReduceArgs>& a, Mode m) {
  gpu.gemv_allreduce(a, m);
}
void run_on(fc::gpu::World& gpu, const std::vector<fc::GemmAllToAllArgs>& a, Mode m) {
  gpu.gemm_alltoall(a, m);
}

/// Runs `pb` on the GPU world and every rank's output against ref/'s (the case, its world and
/// ref/'s result are tests/common/op_cases.hpp's, as in the emu and MPI suites).
template <class Problem>
void check(fc::gpu::World& gpu, const Problem& pb, Mode mode, const std::string& what) {
  fctest::ops::OpCase<Problem> c(pb, mode);
  run_on(gpu, c.args, mode);
  for (int r = 0; r < pb.world_size; ++r)
    expect_close(c.output(r), c.expected(r), pb.values,
                 what + " mode=" + fc::to_string(mode) + " rank " + std::to_string(r));
}

// ---------------------------------------------------------------------------------------------
// EmbeddingAllToAll

fc::EmbeddingProblem emb_problem(int P, int variant, ValueMode values) {
  fc::EmbeddingProblem pb;
  pb.world_size = P;
  const std::int64_t dims[] = {1, 13, 64, 70};
  pb.dim = dims[(variant + P) % 4];
  const std::int64_t T = P + 1 + variant % 2;
  for (std::int64_t t = 0; t < T; ++t) pb.table_rows.push_back(3 + (t * 7 + variant) % 23);
  pb.owner = place(T, P, variant);
  pb.batch_sizes = batches(P, variant);
  pb.min_bag = 0;
  pb.max_bag = 6;
  pb.pooling = variant == 2 ? fc::PoolingMode::mean : fc::PoolingMode::sum;
  pb.weighted = variant == 1;
  pb.index_dtype = variant == 1 ? fc::DType::i32 : fc::DType::i64;
  pb.values = values;
  pb.seed = 100 + static_cast<std::uint64_t>(variant * 10 + P);
  return pb;
}


TEST(GpuEmbedding, MatchesRefEveryModeAndWorldSize) {
  FC_REQUIRE_GPU();
  for (int P : kWorldSizes) {
    fc::gpu::World gpu(options(P));
    for (int variant = 0; variant < 3; ++variant)
      for (ValueMode values : {ValueMode::integer, ValueMode::random})
        for (Mode mode : kModes)
          check(gpu, emb_problem(P, variant, values), mode,
                          "P=" + std::to_string(P) + " variant " + std::to_string(variant) +
                              (values == ValueMode::integer ? " integer" : " random"));
  }
}

TEST(GpuEmbedding, EmptyShapes) {
  FC_REQUIRE_GPU();
  for (int P : {1, 4}) {
    fc::gpu::World gpu(options(P));
    for (int shape = 0; shape < 3; ++shape) {
      fc::EmbeddingProblem pb = emb_problem(P, 0, ValueMode::integer);
      if (shape == 0) pb.dim = 0;
      if (shape == 1) std::fill(pb.batch_sizes.begin(), pb.batch_sizes.end(), 0);
      if (shape == 2) std::fill(pb.owner.begin(), pb.owner.end(), P - 1);  // ranks without tables
      for (Mode mode : kModes) check(gpu, pb, mode, "empty shape " + std::to_string(shape));
    }
  }
}

TEST(GpuEmbedding, DlrmSizeAndRepeatedCalls) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(options(8));
  fc::EmbeddingProblem pb = fc::EmbeddingProblem::dlrm(8);
  pb.values = ValueMode::integer;
  for (int rep = 0; rep < 2; ++rep)  // cumulative slot targets across calls
    for (Mode mode : kModes) check(gpu, pb, mode, "dlrm rep " + std::to_string(rep));
}

// ---------------------------------------------------------------------------------------------
// GemvAllReduce

fc::GemvProblem gemv_problem(int P, int variant, ValueMode values) {
  fc::GemvProblem pb;
  pb.world_size = P;
  const std::int64_t ms[] = {1, 3, 16, 0};
  const std::int64_t ns[] = {203, 64, 5, 130};
  pb.m = ms[variant % 4];
  pb.n = ns[(variant + P) % 4];
  for (int p = 0; p < P; ++p) pb.k_splits.push_back(p % 3 == 2 ? 0 : 17 + 41 * ((p + variant) % 4));
  pb.values = values;
  pb.seed = 300 + static_cast<std::uint64_t>(variant * 10 + P);
  return pb;
}


TEST(GpuGemv, MatchesRefEveryModeAndWorldSize) {
  FC_REQUIRE_GPU();
  for (int P : kWorldSizes) {
    fc::gpu::World gpu(options(P));
    for (int variant = 0; variant < 4; ++variant)
      for (ValueMode values : {ValueMode::integer, ValueMode::random})
        for (Mode mode : kModes)
          check(gpu, gemv_problem(P, variant, values), mode,
                     "P=" + std::to_string(P) + " variant " + std::to_string(variant) +
                         (values == ValueMode::integer ? " integer" : " random"));
  }
}

TEST(GpuGemv, TransformerSize) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(options(4));
  for (ValueMode values : {ValueMode::integer, ValueMode::random}) {
    fc::GemvProblem pb = fc::GemvProblem::transformer(4);
    pb.values = values;
    for (Mode mode : kModes) check(gpu, pb, mode, "transformer");
  }
}

TEST(GpuGemv, NSmallerThanWorldAndEmpty) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(options(8));
  for (std::int64_t n : {0, 3}) {
    fc::GemvProblem pb = gemv_problem(8, 1, ValueMode::integer);
    pb.n = n;
    for (Mode mode : kModes) check(gpu, pb, mode, "N=" + std::to_string(n));
  }
}

// ---------------------------------------------------------------------------------------------
// GemmAllToAll

fc::GemmProblem gemm_problem(int P, int variant, ValueMode values) {
  fc::GemmProblem pb;
  pb.world_size = P;
  const std::int64_t ks[] = {37, 1, 64, 0};
  const std::int64_t ns[] = {70, 64, 1, 129};
  pb.k = ks[variant % 4];
  pb.n = ns[(variant + P) % 4];
  pb.host = place(2 * P - 1, P, variant);
  pb.values = values;
  pb.seed = 500 + static_cast<std::uint64_t>(variant * 10 + P);
  pb.counts.assign(static_cast<std::size_t>(P) * pb.host.size(), 0);
  pb.random_routing(variant == 2 ? 0 : 40);  // variant 2: nothing routed anywhere
  return pb;
}


TEST(GpuGemm, MatchesRefEveryModeAndWorldSize) {
  FC_REQUIRE_GPU();
  for (int P : kWorldSizes) {
    fc::gpu::World gpu(options(P));
    for (int variant = 0; variant < 4; ++variant)
      for (ValueMode values : {ValueMode::integer, ValueMode::random})
        for (Mode mode : kModes)
          check(gpu, gemm_problem(P, variant, values), mode,
                     "P=" + std::to_string(P) + " variant " + std::to_string(variant) +
                         (values == ValueMode::integer ? " integer" : " random"));
  }
}

TEST(GpuGemm, MoeSize) {
  FC_REQUIRE_GPU();
  fc::gpu::World gpu(options(4));
  for (ValueMode values : {ValueMode::integer, ValueMode::random}) {
    fc::GemmProblem pb = fc::GemmProblem::moe(4);
    pb.values = values;
    for (Mode mode : kModes) check(gpu, pb, mode, "moe");
  }
}

// ---------------------------------------------------------------------------------------------
// SPMD and errors

TEST(GpuWorld, SpmdRunMatchesRef) {
  FC_REQUIRE_GPU();
  const int P = 4;
  fc::GemvProblem pb = gemv_problem(P, 1, ValueMode::integer);
  auto want = fc::make_world(pb);
  auto got = fc::make_world(pb);
  for (auto& r : got) fc::poison(r.y.data(), r.y.size() * sizeof(float));
  fc::ref::gemv_allreduce(fc::args_of(want));
  auto args = fc::args_of(got);
  fc::gpu::World gpu(options(P));
  gpu.run([&](fc::Communicator& comm) {
    fc::gemv_allreduce(comm, args[comm.rank()], Mode::scale_up);
    fc::barrier(comm);
    fc::gemv_allreduce(comm, args[comm.rank()], Mode::scale_out);
  });
  for (int r = 0; r < P; ++r) expect_close(got[r].y, want[r].y, ValueMode::integer, "spmd");
}

TEST(GpuWorld, MismatchedModesFailOnEveryRank) {
  FC_REQUIRE_GPU();
  const int P = 2;
  fc::GemvProblem pb = gemv_problem(P, 1, ValueMode::integer);
  auto data = fc::make_world(pb);
  auto args = fc::args_of(data);
  fc::gpu::World gpu(options(P));
  EXPECT_THROW(gpu.run([&](fc::Communicator& comm) {
    fc::gemv_allreduce(comm, args[comm.rank()], comm.rank() == 0 ? Mode::scale_up : Mode::unfused);
  }),
               fc::InvalidArgument);
  // The World stays usable.
  gpu.run([&](fc::Communicator& comm) { fc::gemv_allreduce(comm, args[comm.rank()], Mode::unfused); });
}

TEST(GpuTimeout, MissingSignalNamesTheSlot) {
  FC_REQUIRE_GPU();
  fc::gpu::testing::SignalProbe probe(0.2);
  try {
    probe.run(/*send_signal=*/false);
    FAIL() << "no TimeoutError";
  } catch (const fc::TimeoutError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 block 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("slot 1 ('test.from'[1]) >= 1, observed 0"), std::string::npos) << msg;
  }
  // The slots were reset: the same Context runs the correct protocol afterwards.
  EXPECT_NO_THROW(probe.run(/*send_signal=*/true));
  EXPECT_NO_THROW(probe.run(/*send_signal=*/true));
}

}  // namespace
