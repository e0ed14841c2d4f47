// The three fused operators on the MPI backend against ref/, bit for bit, in all three modes
// (unfused, scale_up, scale_out). Every rank regenerates the whole world's inputs from the seeded
// generators, runs ref/ locally, runs the MPI operator on its own rank's data and memcmps its
// own output buffer (row padding included). Uneven and empty batches, empty bags, ranks without
// tables or experts, zero routing counts, N < P, K = 0, D = 0, i32/i64 indices, weights, mean
// pooling, padded output views, a single workgroup, and repeated calls on one communicator
// (cumulative signal targets, window growth). Also: mismatched and invalid calls fail on every
// rank before any data moves, and leave the communicator usable.

#include <gtest/gtest.h>
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/mpi.hpp"
#include "fusedcoll/ref.hpp"
#include "mpi/ops.hpp"
#include "tests/common/op_cases.hpp"
#include "tests/mpi/mpi_world.hpp"

namespace {

using namespace fctest::ops;  // OpCase, the grids, emb_problem, gemv_problem, gemm_problem
using fusedcoll::AllReduceAlgo;
using fusedcoll::Communicator;
using fusedcoll::DType;
using fusedcoll::EmbeddingProblem;
using fusedcoll::GemmProblem;
using fusedcoll::GemvProblem;
using fusedcoll::Mode;
using fusedcoll::PoolingMode;
using fusedcoll::ReduceOp;
using fusedcoll::ValueMode;


int me() { return fctest::world().rank(); }
int world_size() { return fctest::world().size(); }

::testing::AssertionResult same_bits(const std::vector<float>& actual,
                                     const std::vector<float>& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  if (actual.empty() ||
      std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)) == 0)
    return ::testing::AssertionSuccess();
  std::size_t i = 0;
  while (std::memcmp(&actual[i], &expected[i], sizeof(float)) == 0) ++i;
  std::uint32_t a = 0, e = 0;
  std::memcpy(&a, &actual[i], 4);
  std::memcpy(&e, &expected[i], 4);
  std::ostringstream os;  // AssertionResult's << does not keep stream flags such as std::hex
  os << "rank " << me() << ": first difference at element " << i << " of " << actual.size()
     << ": mpi 0x" << std::hex << a << ", ref 0x" << e;
  return ::testing::AssertionFailure() << os.str();
}

// --- EmbeddingAllToAll ------------------------------------------------------------------------

/// This rank's call of `pb` in `mode` on `comm`, its output checked against ref/'s (every rank
/// builds the whole world from the seed; tests/common/op_cases.hpp).
template <class Problem>
void run_case(Communicator& comm, const Problem& pb, Mode mode, Layout layout = Layout::packed) {
  OpCase<Problem> c(pb, mode, layout);
  SCOPED_TRACE(c.what());
  c.call(comm);
  EXPECT_TRUE(c.same_as_ref(comm.rank()));
}

/// The same for the suite's whole-world communicator.
auto on_world() {
  return [](const auto& pb, Mode mode) { run_case(fctest::world(), pb, mode); };
}

TEST(MpiEmbeddingAllToAll, MatchesRefInEveryMode) { embedding_grid(world_size(), on_world()); }

TEST(MpiEmbeddingAllToAll, EdgeShapes) { embedding_edge_shapes(world_size(), on_world()); }

TEST(MpiEmbeddingAllToAll, LargerThanTheInitialWindow) {
  // [B, T, D] = [~600, 12, 64] floats per receiver: several MiB of window, several tiles each.
  EmbeddingProblem pb = EmbeddingProblem::dlrm(world_size());
  pb.table_rows.assign(pb.table_rows.size(), 500);
  pb.max_bag = 8;
  every_mode(pb, on_world());
}

TEST(MpiEmbeddingAllToAll, LargeSlicesLeaveInPieces) {
  // Over p2p scale-out may ship slices for other hosts in pieces of whole 16-sample blocks as
  // they complete (mpi/embedding_alltoall.cpp; which it does follows the link it measured, so
  // OrderAndPiecesFollowTheLinkRate forces both): batches of 530-777 samples make slices of
  // 1.0-1.5 MiB (8 local tables, D = 64) whose last piece is short, beside a 100-sample
  // destination.
  EmbeddingProblem pb = EmbeddingProblem::dlrm(world_size());
  const std::int64_t batches[] = {600, 530, 100, 777};
  for (int q = 0; q < world_size(); ++q) pb.batch_sizes[static_cast<std::size_t>(q)] = batches[q % 4];
  pb.table_rows.assign(pb.table_rows.size(), 500);
  pb.max_bag = 4;
  every_mode(pb, on_world());
}

TEST(MpiEmbeddingAllToAll, OrderAndPiecesFollowTheLinkRate) {
  // Over p2p scale-out's tile order follows detail::embedding::scale_out_order, from the link
  // rate the sender measured and the seconds per gathered element its pooling took
  // (mpi/embedding_alltoall.cpp); in destination-block-major order it ships a slice for another
  // host in pieces when the link would take long enough to carry its bytes there, else whole
  // (Transport::piece_bytes in mpi/p2p.cpp). All forced through Transport::assume_link_rate and
  // Runtime::assume_compute_seconds_per, on a small problem and on LargeSlicesLeaveInPieces's:
  // a 1 MB/s link against 1 ns per element is destination-block-major, every slice for another
  // host in pieces, the short last one included; 1 TB/s is table-major, and so is 1 MB/s against
  // 1 s per element, every slice whole. Where all ranks share a host (the runs without
  // FUSEDCOLL_MPI_HOSTS) nothing is cut, but the order is the same. Each call's own sample moves
  // the compute figure by half at most, which leaves each side of the rule where it was.
  EmbeddingProblem large = EmbeddingProblem::dlrm(world_size());
  const std::int64_t batches[] = {600, 530, 100, 777};
  for (int q = 0; q < world_size(); ++q)
    large.batch_sizes[static_cast<std::size_t>(q)] = batches[q % 4];
  large.table_rows.assign(large.table_rows.size(), 500);
  large.max_bag = 4;
  const std::pair<double, double> sides[] = {{1e6, 1e-9}, {1e12, 1e-9}, {1e6, 1.0}};
  for (const auto& [rate, per_element] : sides) {
    fusedcoll::mpi::Runtime rt(MPI_COMM_WORLD, {});
    for (const EmbeddingProblem& pb : {emb_problem(world_size(), 1, 71), large}) {
      for (int p = 0; p < rt.size(); ++p) rt.transport().assume_link_rate(p, rate);
      rt.assume_compute_seconds_per(fusedcoll::mpi::kEmbeddingPoolWork, per_element);
      OpCase<EmbeddingProblem> c(pb, Mode::scale_out);
      SCOPED_TRACE(c.what() + " link " + std::to_string(rate) + " B/s, " +
                   std::to_string(per_element) + " s per element");
      fusedcoll::mpi::embedding_alltoall(rt, c.args[static_cast<std::size_t>(me())],
                                         Mode::scale_out);
      rt.end_call();
      EXPECT_TRUE(c.same_as_ref(me()));
    }
  }
}

TEST(MpiEmbeddingAllToAll, PaddedOutputViews) {
  every_mode(emb_problem(world_size(), 1, 55), [](const auto& pb, Mode mode) {
    run_case(fctest::world(), pb, mode, Layout::padded);
  });
}

TEST(MpiEmbeddingAllToAll, SingleWorkgroup) {
  // A second communicator, collective on every rank: the grid never waits on itself, so one
  // workgroup must do.
  fusedcoll::mpi::Options o;
  o.workgroups = 1;
  Communicator one = fusedcoll::mpi::make_communicator(MPI_COMM_WORLD, o);
  every_mode(emb_problem(world_size(), 4, 31), [&](const auto& pb, Mode mode) { run_case(one, pb, mode); });
}

TEST(MpiEmbeddingAllToAll, DefaultWorkgroups) {
  // CTest runs mpiexec --oversubscribe, which binds no rank: every rank on this host may use
  // every CPU, so each gets its share (one each for 2-4 ranks on 2 cores, not oneTBB's 2).
  MPI_Comm node = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            MPI_SUCCESS);
  int local = 0;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  EXPECT_EQ(fusedcoll::mpi::default_workgroups(MPI_COMM_WORLD),
            std::max(1, tbb::info::default_concurrency() / local));
  // And the default communicator runs every mode with it.
  Communicator d = fusedcoll::mpi::make_communicator(MPI_COMM_WORLD);
  every_mode(emb_problem(world_size(), 4, 37),
             [&](const auto& pb, Mode mode) { run_case(d, pb, mode); });
}

// --- GemvAllReduce ----------------------------------------------------------------------------

TEST(MpiGemvAllReduce, MatchesRefInEveryMode) { gemv_grid(world_size(), on_world()); }

TEST(MpiGemvAllReduce, PaddedOutputRows) {
  every_mode(gemv_problem(world_size(), 3, 130, 42, false), [](const auto& pb, Mode mode) {
    run_case(fctest::world(), pb, mode, Layout::padded);
  });
}

TEST(MpiGemvAllReduce, TransformerShape) {
  GemvProblem pb = GemvProblem::transformer(world_size());
  pb.n = 1024;  // keep the test quick; several tiles per owner chunk still
  pb.k_splits = fusedcoll::split_evenly(2048, world_size());
  every_mode(pb, on_world());
}

// --- GemmAllToAll -----------------------------------------------------------------------------

TEST(MpiGemmAllToAll, MatchesRefInEveryMode) { gemm_grid(world_size(), on_world()); }

TEST(MpiGemmAllToAll, EdgeShapes) { gemm_edge_shapes(world_size(), on_world()); }

TEST(MpiGemmAllToAll, PaddedOutputRows) {
  every_mode(gemm_problem(world_size(), 0, 77), [](const auto& pb, Mode mode) {
    run_case(fctest::world(), pb, mode, Layout::padded);
  });
}

// --- Agreement and validation -----------------------------------------------------------------

/// Runs `f`, expecting `fusedcoll::InvalidArgument` whose message contains `needle`.
template <class F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "rank " << me() << ": no exception, expected one mentioning '" << needle
                  << "'";
  } catch (const fusedcoll::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "rank " << me() << ": " << e.what();
  }
}

TEST(MpiAgreement, ShapeMismatchFailsOnEveryRankBeforeDataMoves) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  GemvProblem pb = gemv_problem(world_size(), 2, 64, 7, false);
  fusedcoll::GemvRankData mine(pb, me());
  auto args = mine.args();
  if (me() == 1) {
    // Rank 1 disagrees on N; its own call is still well-formed with a y of the claimed shape.
    args.n = 65;
    mine.y.assign(static_cast<std::size_t>(2 * 65), 0.0f);
    mine.w.resize(static_cast<std::size_t>(65 * pb.k_splits[1]));
    args.y = fusedcoll::TensorView(mine.y.data(), DType::f32, {2, 65});
    args.w = fusedcoll::ConstTensorView(mine.w.data(), DType::f32, {65, pb.k_splits[1]});
  }
  const std::vector<float> before = mine.y;
  expect_invalid([&] { fusedcoll::gemv_allreduce(fctest::world(), args, Mode::scale_up); },
                 "disagree on n");
  EXPECT_TRUE(same_bits(mine.y, before)) << "output written although the call was rejected";
  // Nothing moved, so the communicator is still good.
  run_case(fctest::world(), gemv_problem(world_size(), 2, 64, 8, false), Mode::scale_up);
}

TEST(MpiAgreement, InvalidCallOnOneRankIsReportedOnEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  const int bad = world_size() - 1;
  GemmProblem pb = gemm_problem(world_size(), 1, 77);
  fusedcoll::GemmRankData mine(pb, me());
  auto args = mine.args();
  if (me() == bad) args.output = fusedcoll::TensorView();  // wrong output shape
  const std::string needle =
      me() == bad ? std::string("output") : fusedcoll::detail::make_string("rank ", bad, "'s call");
  expect_invalid([&] { fusedcoll::gemm_alltoall(fctest::world(), args, Mode::scale_out); }, needle);
  run_case(fctest::world(), gemm_problem(world_size(), 2, 78), Mode::scale_out);
}

// --- Outputs in SymmetricBuffers -----------------------------------------------------------------
// Scale-up then puts rows straight into the destination's output (the zero-copy store of the
// paper's scale-up variant); the other modes, and ranks whose output is ordinary memory, work as
// before. Outputs have padded strides, and the padding must keep its poison.

/// Runs `call(view)` in every mode with this rank's output at `out` (poisoned first) and compares
/// the whole padded region with ref/'s.
template <class Call>
void expect_output_like_ref(float* out, const std::vector<float>& ref_out, Call&& call) {
  for (Mode mode : kModes) {
    fusedcoll::poison(out, ref_out.size() * sizeof(float));
    call(mode);
    EXPECT_EQ(std::memcmp(out, ref_out.data(), ref_out.size() * sizeof(float)), 0)
        << "rank " << me() << " mode " << fusedcoll::to_string(mode);
  }
}

TEST(MpiSymmetricOutputs, EmbeddingAllToAllMatchesRef) {
  const int P = world_size();
  for (bool only_even : {false, true}) {
    SCOPED_TRACE(only_even ? "even ranks registered" : "every rank registered");
    const EmbeddingProblem pb = emb_problem(P, 1, 55 + only_even);
    const std::int64_t T = pb.num_tables(), D = pb.dim, s1 = D + 3, s0 = T * s1 + 5;
    auto ref_world = fusedcoll::make_world(pb);
    auto ref_args = fusedcoll::args_of(ref_world);
    std::vector<std::vector<float>> ref_out(P);
    for (int r = 0; r < P; ++r) {
      const std::int64_t b = pb.batch_sizes[r];
      ref_out[r].assign(static_cast<std::size_t>(std::max<std::int64_t>(b * s0, 1)), 0.0f);
      fusedcoll::poison(ref_out[r].data(), ref_out[r].size() * sizeof(float));
      const std::int64_t shape[] = {b, T, D}, strides[] = {s0, s1, 1};
      ref_args[r].output = fusedcoll::TensorView(ref_out[r].data(), DType::f32, shape, strides);
    }
    fusedcoll::ref::embedding_alltoall(ref_args);

    const std::vector<float>& expect = ref_out[me()];
    fusedcoll::mpi::SymmetricBuffer buf(fctest::world(), (expect.size() + 16) * sizeof(float));
    std::vector<float> plain(expect.size());
    float* out = !only_even || me() % 2 == 0 ? buf.as<float>() + 16 : plain.data();
    fusedcoll::EmbeddingRankData mine(pb, me());
    auto args = mine.args();
    const std::int64_t shape[] = {pb.batch_sizes[me()], T, D}, strides[] = {s0, s1, 1};
    args.output = fusedcoll::TensorView(out, DType::f32, shape, strides);
    expect_output_like_ref(out, expect, [&](Mode mode) {
      fusedcoll::embedding_alltoall(fctest::world(), args, mode);
    });
  }
}

TEST(MpiSymmetricOutputs, GemmAllToAllMatchesRef) {
  const int P = world_size();
  for (bool only_even : {false, true}) {
    SCOPED_TRACE(only_even ? "even ranks registered" : "every rank registered");
    const GemmProblem pb = gemm_problem(P, 0, 77 + only_even);
    const std::int64_t ld = pb.n + 7;
    auto ref_world = fusedcoll::make_world(pb);
    auto ref_args = fusedcoll::args_of(ref_world);
    std::vector<std::vector<float>> ref_out(P);
    std::vector<std::int64_t> rows(P);
    for (int r = 0; r < P; ++r) {
      rows[r] = fusedcoll::output_rows(ref_args[r], r);
      ref_out[r].assign(static_cast<std::size_t>(std::max<std::int64_t>(rows[r] * ld, 1)), 0.0f);
      fusedcoll::poison(ref_out[r].data(), ref_out[r].size() * sizeof(float));
      const std::int64_t shape[] = {rows[r], pb.n}, strides[] = {ld, 1};
      ref_args[r].output = fusedcoll::TensorView(ref_out[r].data(), DType::f32, shape, strides);
    }
    fusedcoll::ref::gemm_alltoall(ref_args);

    const std::vector<float>& expect = ref_out[me()];
    fusedcoll::mpi::SymmetricBuffer buf(fctest::world(), (expect.size() + 16) * sizeof(float));
    std::vector<float> plain(expect.size());
    float* out = !only_even || me() % 2 == 0 ? buf.as<float>() + 16 : plain.data();
    fusedcoll::GemmRankData mine(pb, me());
    auto args = mine.args();
    const std::int64_t shape[] = {rows[me()], pb.n}, strides[] = {ld, 1};
    args.output = fusedcoll::TensorView(out, DType::f32, shape, strides);
    expect_output_like_ref(out, expect, [&](Mode mode) {
      fusedcoll::gemm_alltoall(fctest::world(), args, mode);
    });
  }
}

// A NaN in the data with a scaled FP8 wire: the agreed amax is NaN, and every rank rejects the
// call (as ref/ does) before any data moves; the communicator stays usable.
TEST(MpiAgreement, NanAmaxOfACompressedWireIsInvalidOnEveryRank) {
  const int P = world_size();
  std::vector<float> send(10, 1.0f), recv(10, 0.0f);
  if (me() == P - 1) send[4] = NAN;
  const fusedcoll::CompressionOptions fp8{.format = fusedcoll::WireFormat::fp8_e4m3};
  expect_invalid(
      [&] {
        fusedcoll::all_reduce(fctest::world(), {send.data(), recv.data(), 10, DType::f32,
                                                ReduceOp::sum, AllReduceAlgo::ring, fp8});
      },
      "amax");
  EXPECT_EQ(recv, std::vector<float>(10, 0.0f)) << "rank " << me() << ": output written";
  send[4] = 2.0f;
  // pow2 scale 64: every value and partial sum (up to 2P) is exact in E4M3 for P <= 4.
  fusedcoll::all_reduce(fctest::world(),
                        {send.data(), recv.data(), 10, DType::f32, ReduceOp::sum,
                         AllReduceAlgo::ring, {.format = fusedcoll::WireFormat::fp8_e4m3,
                                               .pow2_scale = true}});
  EXPECT_EQ(recv[4], 2.0f * P);
  EXPECT_EQ(recv[0], 1.0f * P);
}

// Ranks that disagree on the wire options fail on every rank before anything moves.
TEST(MpiAgreement, MismatchedWireIsInvalidOnEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<float> send(10, 1.0f), recv(10, 0.0f);
  const fusedcoll::CompressionOptions w{
      .format = me() == 0 ? fusedcoll::WireFormat::f16 : fusedcoll::WireFormat::bf16};
  expect_invalid(
      [&] {
        fusedcoll::all_reduce(fctest::world(), {send.data(), recv.data(), 10, DType::f32,
                                                ReduceOp::sum, AllReduceAlgo::direct, w});
      },
      "wire format");
  EXPECT_EQ(recv, std::vector<float>(10, 0.0f)) << "rank " << me() << ": output written";
  run_case(fctest::world(), gemm_problem(world_size(), 2, 79), Mode::scale_out);
}

TEST(MpiAgreement, DifferentModesAreAMismatch) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  const EmbeddingProblem pb = emb_problem(world_size(), 0, 88);
  fusedcoll::EmbeddingRankData mine(pb, me());
  const Mode mode = me() == 0 ? Mode::scale_up : Mode::scale_out;
  expect_invalid([&] { fusedcoll::embedding_alltoall(fctest::world(), mine.args(), mode); },
                 "collective call mismatch");
  run_case(fctest::world(), pb, Mode::scale_out);
}

}  // namespace
