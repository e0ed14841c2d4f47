#pragma once
// The fused-operator checks shared by the backends' suites (emu, MPI, GPU), as collective_cases.hpp
// is for the collectives: an OpCase builds a problem's world twice from its seed (make_world
// poisons every output), runs ref/ on one copy, hands the other to the backend, and compares
// outputs whole (row padding included) with ref/'s. The grids below are the seeded problems and
// edge shapes every CPU backend must pass; a suite supplies only how its backend runs a call.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"
#include "op_problems.hpp"

namespace fctest::ops {

using fusedcoll::Communicator;
using fusedcoll::GemvProblem;
using fusedcoll::Mode;

inline constexpr Mode kModes[] = {Mode::unfused, Mode::scale_up, Mode::scale_out};

// --- Per-operator glue: data, output, ref/ and the backend entry point --------------------------

/// A poisoned buffer of `count` floats (at least one, so that an empty view has an address).
inline void poisoned_buffer(std::vector<float>& buf, std::int64_t count) {
  buf.assign(static_cast<std::size_t>(count > 0 ? count : 1), 0.0f);
  fusedcoll::poison(buf.data(), buf.size() * sizeof(float));
}

template <class Problem>
struct Op;

template <>
struct Op<EmbeddingProblem> {
  using Data = fusedcoll::EmbeddingRankData;
  using Args = fusedcoll::EmbeddingAllToAllArgs;
  static std::vector<float>& out(Data& d) { return d.output; }
  static void ref(const std::vector<Args>& a) { fusedcoll::ref::embedding_alltoall(a); }
  /// Rank r's output [B_r, T, D] in `buf` with padded rows and samples (stride(1) > D,
  /// stride(0) > T * stride(1)).
  static void pad(const EmbeddingProblem& pb, int r, Args& a, std::vector<float>& buf) {
    const std::int64_t T = pb.num_tables(), D = pb.dim, b = pb.batch_sizes[r];
    const std::int64_t s1 = D + 3, s0 = T * s1 + 5;
    const std::int64_t shape[] = {b, T, D}, strides[] = {s0, s1, 1};
    poisoned_buffer(buf, b * s0);
    a.output = fusedcoll::TensorView(buf.data(), fusedcoll::DType::f32, shape, strides);
  }
  static void call(Communicator& c, const Args& a, Mode m) { fusedcoll::embedding_alltoall(c, a, m); }
};

template <>
struct Op<GemvProblem> {
  using Data = fusedcoll::GemvRankData;
  using Args = fusedcoll::GemvAllReduceArgs;
  static std::vector<float>& out(Data& d) { return d.y; }
  static void ref(const std::vector<Args>& a) { fusedcoll::ref::gemv_allreduce(a); }
  /// Rank r's y [m, n] in `buf` with padded rows.
  static void pad(const GemvProblem& pb, int, Args& a, std::vector<float>& buf) {
    const std::int64_t ld = pb.n + 5, shape[] = {pb.m, pb.n}, strides[] = {ld, 1};
    poisoned_buffer(buf, pb.m * ld);
    a.y = fusedcoll::TensorView(buf.data(), fusedcoll::DType::f32, shape, strides);
  }
  static void call(Communicator& c, const Args& a, Mode m) { fusedcoll::gemv_allreduce(c, a, m); }
};

template <>
struct Op<GemmProblem> {
  using Data = fusedcoll::GemmRankData;
  using Args = fusedcoll::GemmAllToAllArgs;
  static std::vector<float>& out(Data& d) { return d.output; }
  static void ref(const std::vector<Args>& a) { fusedcoll::ref::gemm_alltoall(a); }
  /// Rank r's output [rows_r, n] in `buf` with padded rows.
  static void pad(const GemmProblem& pb, int r, Args& a, std::vector<float>& buf) {
    const std::int64_t rows = fusedcoll::output_rows(a, r), ld = pb.n + 7;
    const std::int64_t shape[] = {rows, pb.n}, strides[] = {ld, 1};
    poisoned_buffer(buf, rows * ld);
    a.output = fusedcoll::TensorView(buf.data(), fusedcoll::DType::f32, shape, strides);
  }
  static void call(Communicator& c, const Args& a, Mode m) { fusedcoll::gemm_alltoall(c, a, m); }
};

inline std::string describe(const GemvProblem& pb) {
  std::ostringstream os;
  os << "P=" << pb.world_size << " m=" << pb.m << " n=" << pb.n << " k=[";
  for (auto k : pb.k_splits) os << k << " ";
  os << "] seed=" << pb.seed;
  return os.str();
}

/// Empty when `got` and `want` hold the same bits (memcmp: NaN payloads and signed zeros count),
/// else where they first differ.
inline std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    std::ostringstream os;
    os << "size " << got.size() << " vs ref " << want.size();
    return os.str();
  }
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0)
    return "";
  std::size_t i = 0;
  while (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) ++i;
  std::uint32_t a = 0, e = 0;
  std::memcpy(&a, &got[i], 4);
  std::memcpy(&e, &want[i], 4);
  std::ostringstream os;
  os << "first difference at element " << i << " of " << got.size() << ": backend 0x" << std::hex
     << a << ", ref 0x" << e;
  return os.str();
}

// --- One call of every rank, checked against ref/ ----------------------------------------------

/// Output views as make_world lays them out, or with padding between rows (and samples) that
/// must keep its poison: only the elements of the view may be written, as in ref/.
enum class Layout { packed, padded };

/// A problem's world for the backend (`got`) and ref/'s result (`want`), built the same way from
/// the seed. A multi-process backend builds the whole world too, runs only its own rank's call
/// and checks only its own rank.
template <class Problem>
struct OpCase {
  using O = Op<Problem>;
  Problem pb;
  Mode mode;
  std::vector<typename O::Data> want, got;
  std::vector<typename O::Args> args;  // views into `got` (or `got_pad`), one per rank
  std::vector<std::vector<float>> want_pad, got_pad;  // the padded outputs, with Layout::padded

  OpCase(const Problem& problem, Mode m, Layout layout = Layout::packed)
      : pb(problem), mode(m), want(fusedcoll::make_world(problem)),
        got(fusedcoll::make_world(problem)), args(fusedcoll::args_of(got)) {
    std::vector<typename O::Args> ref_args = fusedcoll::args_of(want);
    if (layout == Layout::padded) {
      want_pad.resize(want.size());
      got_pad.resize(got.size());
      for (int r = 0; r < pb.world_size; ++r) {
        const auto i = static_cast<std::size_t>(r);
        O::pad(pb, r, ref_args[i], want_pad[i]);
        O::pad(pb, r, args[i], got_pad[i]);
      }
    }
    O::ref(ref_args);
  }
  std::string what() const {
    return describe(pb) + " mode=" + fusedcoll::to_string(mode) + (got_pad.empty() ? "" : " padded");
  }
  /// This rank's call of the operator on the backend behind `comm`.
  void call(Communicator& comm) const {
    O::call(comm, args[static_cast<std::size_t>(comm.rank())], mode);
  }
  /// Rank r's whole output buffer (padding included) and ref/'s.
  std::vector<float>& output(int r) {
    const auto i = static_cast<std::size_t>(r);
    return got_pad.empty() ? O::out(got[i]) : got_pad[i];
  }
  std::vector<float>& expected(int r) {
    const auto i = static_cast<std::size_t>(r);
    return want_pad.empty() ? O::out(want[i]) : want_pad[i];
  }
  /// Rank r's output (or `snapshot` of it) bit for bit against ref/'s.
  ::testing::AssertionResult same_as_ref(int r, const std::vector<float>* snapshot = nullptr) {
    const std::string d = first_difference(snapshot ? *snapshot : output(r), expected(r));
    if (d.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what() << ": rank " << r << ": " << d;
  }
  void expect_every_rank_same_as_ref() {
    for (int r = 0; r < pb.world_size; ++r) EXPECT_TRUE(same_as_ref(r));
  }
};

/// Runs `check(problem, mode)` for every mode: the caller's backend runs an OpCase of it.
template <class Problem, class Check>
void every_mode(const Problem& pb, Check&& check) {
  for (Mode mode : kModes) check(pb, mode);
}

// --- Grids every CPU backend runs ----------------------------------------------------------------

/// The seeded EmbeddingAllToAll problems of world size P (six variants, see emb_problem).
template <class Check>
void embedding_grid(int P, Check&& check) {
  std::uint64_t seed = 100;
  for (int variant = 0; variant < 6; ++variant) every_mode(emb_problem(P, variant, ++seed), check);
}

/// EmbeddingAllToAll's edge shapes: D = 0, an empty global batch, no tables at all, every bag
/// empty, one rank owning the whole batch.
template <class Check>
void embedding_edge_shapes(int P, Check&& check) {
  EmbeddingProblem pb = emb_problem(P, 0, 7);
  pb.dim = 0;  // nothing to pool, the call still meets
  every_mode(pb, check);
  pb = emb_problem(P, 2, 8);
  pb.batch_sizes.assign(static_cast<std::size_t>(P), 0);  // empty global batch
  every_mode(pb, check);
  pb = emb_problem(P, 1, 9);
  pb.owner.clear();  // no tables at all
  pb.table_rows.clear();
  every_mode(pb, check);
  pb = emb_problem(P, 0, 10);
  pb.min_bag = pb.max_bag = 0;  // every bag empty: +0.0f everywhere
  every_mode(pb, check);
  pb = emb_problem(P, 3, 11);
  pb.batch_sizes.assign(static_cast<std::size_t>(P), 0);
  pb.batch_sizes[static_cast<std::size_t>(P - 1)] = 50;  // one rank owns the whole batch
  every_mode(pb, check);
}

/// A GemvAllReduce problem: k splits of 1..90 (every other rank 0 with `zero_k`).
inline GemvProblem gemv_problem(int P, std::int64_t m, std::int64_t n, std::uint64_t seed,
                                bool zero_k) {
  GemvProblem pb;
  pb.world_size = P;
  pb.m = m;
  pb.n = n;
  for (int p = 0; p < P; ++p)
    pb.k_splits.push_back(zero_k && p % 2 == 0 ? 0
                                               : 1 + static_cast<std::int64_t>(
                                                         fusedcoll::hash_draw(seed, 3, p, 0) % 90));
  pb.values = seed % 2 ? ValueMode::random : ValueMode::integer;
  pb.seed = seed;
  return pb;
}

/// The seeded GemvAllReduce problems of world size P: M in {1, 3, 16}, N from 0 over N < P to
/// several tiles per owner chunk, ranks with and without a K range.
template <class Check>
void gemv_grid(int P, Check&& check) {
  std::uint64_t seed = 300;
  for (std::int64_t m : {1, 3, 16})
    for (std::int64_t n : {0, 1, 5, 130, 1000})
      for (bool zero_k : {false, true}) every_mode(gemv_problem(P, m, n, ++seed, zero_k), check);
}

/// The seeded GemmAllToAll problems of world size P (five variants, see gemm_problem).
template <class Check>
void gemm_grid(int P, Check&& check) {
  std::uint64_t seed = 500;
  for (int variant = 0; variant < 5; ++variant) every_mode(gemm_problem(P, variant, ++seed), check);
}

/// GemmAllToAll's edge shapes: K = 0, N = 0, nothing routed, no experts at all, one host.
template <class Check>
void gemm_edge_shapes(int P, Check&& check) {
  GemmProblem pb = gemm_problem(P, 0, 21);
  pb.k = 0;  // empty reductions: +0.0f everywhere
  every_mode(pb, check);
  pb = gemm_problem(P, 1, 22);
  pb.n = 0;  // no columns: nothing to write, the call still meets
  every_mode(pb, check);
  pb = gemm_problem(P, 2, 23);
  pb.counts.assign(pb.counts.size(), 0);  // nothing routed anywhere
  every_mode(pb, check);
  pb = gemm_problem(P, 3, 24);
  pb.host.clear();  // no experts at all
  pb.counts.clear();
  every_mode(pb, check);
  pb = gemm_problem(P, 0, 25);
  pb.host.assign(pb.host.size(), P - 1);  // one host, everybody else empty-handed
  pb.random_routing(40);
  every_mode(pb, check);
}

}  // namespace fctest::ops
