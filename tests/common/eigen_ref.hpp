#pragma once
/// @file
/// Independent computations of the three ops in double precision with Eigen, from the generated
/// rank data alone (never from ref/). Each returns, per rank, the expected output and a per-element
/// tolerance derived from the classic floating-point summation bound:
///
///   An n-term sum of f32 values x_i, each x_i itself one rounded product (relative error <= u,
///   u = 2^-24), accumulated in ANY order with every addition rounded, satisfies
///     |fl(sum) - sum| <= gamma_n * sum_i |x_i|,   gamma_n = n*u / (1 - n*u)  (Higham, Thm 4.4/3.1).
///   We use tol = (n + 2) * 2u * sum_i |x_i|, which is >= gamma_{n+1} for every n*u < 1/2 (the
///   "+1" covers the final division of `mean`). The double-precision reference itself is exact to
///   ~2^-53 relative, which is negligible against this bound.
///
/// In `ValueMode::integer` every term and every partial sum is a small integer, exact in f32, so the
/// tolerance is 0: the op must equal the double result exactly (for `mean`, the exact quotient
/// rounded once to f32, which is what one correctly rounded f32 division of the exact sum gives).

#include <Eigen/Dense>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/check.hpp"
#include "fusedcoll/inputs.hpp"

namespace fctest {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMapF = Eigen::Map<const MatF>;

/// Expected output and tolerance of one rank, flattened row-major.
struct Expected {
  std::vector<double> value;
  std::vector<double> tol;
};

/// The tolerance of an n-term f32 sum whose terms have absolute sum `abs_sum` (see file comment).
inline double sum_tolerance(std::int64_t n, double abs_sum, fusedcoll::ValueMode mode) {
  if (mode == fusedcoll::ValueMode::integer) return 0.0;
  return static_cast<double>(n + 2) * 2.0 * kF32Unit * abs_sum;
}

/// Row-major [rows, cols] f32 data as a double matrix. `data` must hold rows*cols floats.
inline MatD to_double(const std::vector<float>& data, std::int64_t rows, std::int64_t cols) {
  EXPECT_EQ(static_cast<std::int64_t>(data.size()), rows * cols)
      << "generated buffer is not a dense [" << rows << ", " << cols << "] matrix";
  if (rows * cols == 0 || static_cast<std::int64_t>(data.size()) != rows * cols) {
    return MatD::Zero(rows, cols);
  }
  return ConstMapF(data.data(), rows, cols).cast<double>();
}

// ---------------------------------------------------------------------------------------------
// EmbeddingAllToAll

/// Start of each rank's batch range, plus the total at the end.
inline std::vector<std::int64_t> batch_starts(const std::vector<std::int64_t>& batch_sizes) {
  std::vector<std::int64_t> start(batch_sizes.size() + 1, 0);
  for (std::size_t q = 0; q < batch_sizes.size(); ++q) start[q + 1] = start[q] + batch_sizes[q];
  return start;
}

/// The offsets and indices of local table `j` of `rank`, widened to i64, from whichever arrays
/// the problem's index dtype filled.
inline void table_csr(const fusedcoll::EmbeddingProblem& pb, const fusedcoll::EmbeddingRankData& rd,
                      std::size_t j, std::vector<std::int64_t>& offsets,
                      std::vector<std::int64_t>& indices) {
  if (pb.index_dtype == fusedcoll::DType::i32) {
    offsets.assign(rd.offsets32.at(j).begin(), rd.offsets32.at(j).end());
    indices.assign(rd.indices32.at(j).begin(), rd.indices32.at(j).end());
  } else {
    offsets.assign(rd.offsets64.at(j).begin(), rd.offsets64.at(j).end());
    indices.assign(rd.indices64.at(j).begin(), rd.indices64.at(j).end());
  }
}

/// Pools every bag of every table in double with Eigen row operations, then slices the pooled
/// [B, T, D] result by destination rank into [B_q, T, D].
inline std::vector<Expected> embedding_expected(const fusedcoll::EmbeddingProblem& pb,
                                                const std::vector<fusedcoll::EmbeddingRankData>& world) {
  const int P = pb.world_size;
  const std::int64_t T = pb.num_tables();
  const std::int64_t D = pb.dim;
  const auto start = batch_starts(pb.batch_sizes);
  const std::int64_t B = start[P];

  // pooled[b] is a [T, D] block; tol likewise.
  MatD pooled = MatD::Zero(B, T * D);
  MatD tol = MatD::Zero(B, T * D);
  for (std::int64_t t = 0; t < T; ++t) {
    const int o = pb.owner[t];
    const auto& rd = world.at(o);
    const auto it = std::find(rd.local_table_ids.begin(), rd.local_table_ids.end(), t);
    EXPECT_NE(it, rd.local_table_ids.end()) << "table " << t << " missing on its owner " << o;
    if (it == rd.local_table_ids.end()) continue;
    const auto j = static_cast<std::size_t>(it - rd.local_table_ids.begin());
    const MatD table = to_double(rd.tables.at(j), pb.table_rows[t], D);
    std::vector<std::int64_t> offsets, indices;
    table_csr(pb, rd, j, offsets, indices);
    EXPECT_EQ(static_cast<std::int64_t>(offsets.size()), B + 1);
    if (static_cast<std::int64_t>(offsets.size()) != B + 1) continue;
    const bool weighted = pb.weighted && !rd.weights.empty();
    for (std::int64_t b = 0; b < B; ++b) {
      Eigen::RowVectorXd acc = Eigen::RowVectorXd::Zero(D);
      Eigen::RowVectorXd abs_acc = Eigen::RowVectorXd::Zero(D);
      const std::int64_t n = offsets[b + 1] - offsets[b];
      for (std::int64_t k = offsets[b]; k < offsets[b + 1]; ++k) {
        const std::int64_t row = indices[k];
        EXPECT_TRUE(row >= 0 && row < pb.table_rows[t]) << "generator drew index " << row;
        if (row < 0 || row >= pb.table_rows[t]) continue;
        const double w = weighted ? static_cast<double>(rd.weights.at(j).at(k)) : 1.0;
        acc += w * table.row(row);
        abs_acc += (w * table.row(row)).cwiseAbs();
      }
      if (pb.pooling == fusedcoll::PoolingMode::mean && n > 0) {
        acc /= static_cast<double>(n);
        abs_acc /= static_cast<double>(n);
        // Integer mode: the sum is exact, so the op's one f32 division must equal the exact
        // quotient rounded once to f32 (double then f32 is innocuous: 53 >= 2 * 24 + 2).
        if (pb.values == fusedcoll::ValueMode::integer) acc = acc.cast<float>().cast<double>();
      }
      pooled.block(b, t * D, 1, D) = acc;
      for (std::int64_t d = 0; d < D; ++d) tol(b, t * D + d) = sum_tolerance(n, abs_acc[d], pb.values);
    }
  }
  std::vector<Expected> out(P);
  for (int q = 0; q < P; ++q) {
    const std::int64_t rows = pb.batch_sizes[q];
    out[q].value.resize(static_cast<std::size_t>(rows * T * D));
    out[q].tol.resize(out[q].value.size());
    if (rows * T * D == 0) continue;
    Eigen::Map<MatD>(out[q].value.data(), rows, T * D) = pooled.middleRows(start[q], rows);
    Eigen::Map<MatD>(out[q].tol.data(), rows, T * D) = tol.middleRows(start[q], rows);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// GemvAllReduce

/// Assembles the global W [N, K] and x [M, K] from the rank slices, then y = x * W^T in double.
/// Every y element is a sum of K products split into P partial sums: at most K + P - 1 roundings
/// touch a term, so the bound uses n = K + P.
inline Expected gemv_expected(const fusedcoll::GemvProblem& pb,
                              const std::vector<fusedcoll::GemvRankData>& world) {
  const std::int64_t M = pb.m, N = pb.n, K = pb.k();
  MatD W = MatD::Zero(N, K);
  MatD X = MatD::Zero(pb.m, K);
  std::int64_t k0 = 0;
  for (int p = 0; p < pb.world_size; ++p) {
    const std::int64_t kp = pb.k_splits[p];
    W.middleCols(k0, kp) = to_double(world.at(p).w, N, kp);
    X.middleCols(k0, kp) = to_double(world.at(p).x, M, kp);
    k0 += kp;
  }
  const MatD Y = X * W.transpose();
  const MatD S = X.cwiseAbs() * W.cwiseAbs().transpose();
  Expected e;
  e.value.assign(Y.data(), Y.data() + Y.size());
  e.tol.resize(e.value.size());
  for (std::size_t i = 0; i < e.tol.size(); ++i) {
    e.tol[i] = sum_tolerance(K + pb.world_size, S.data()[i], pb.values);
  }
  return e;
}

// ---------------------------------------------------------------------------------------------
// GemmAllToAll

/// c[s][e] of the problem.
inline std::int64_t routed(const fusedcoll::GemmProblem& pb, int s, std::int64_t e) {
  return pb.counts[static_cast<std::size_t>(s * pb.num_experts() + e)];
}

/// C_e = A_e * W_e per expert in double, then the rows of every expert that came from source s,
/// experts in increasing id, are concatenated into rank s's expected output.
inline std::vector<Expected> gemm_expected(const fusedcoll::GemmProblem& pb,
                                           const std::vector<fusedcoll::GemmRankData>& world) {
  const int P = pb.world_size;
  const std::int64_t E = pb.num_experts(), K = pb.k, N = pb.n;
  std::vector<Expected> out(P);
  for (std::int64_t e = 0; e < E; ++e) {
    const int h = pb.host[e];
    const auto& rd = world.at(h);
    const auto it = std::find(rd.local_expert_ids.begin(), rd.local_expert_ids.end(), e);
    EXPECT_NE(it, rd.local_expert_ids.end()) << "expert " << e << " missing on its host " << h;
    if (it == rd.local_expert_ids.end()) continue;
    const auto j = static_cast<std::size_t>(it - rd.local_expert_ids.begin());
    std::int64_t rows = 0;
    for (int s = 0; s < P; ++s) rows += routed(pb, s, e);
    const MatD A = to_double(rd.a.at(j), rows, K);
    const MatD W = to_double(rd.w.at(j), K, N);
    const MatD C = A * W;
    const MatD S = A.cwiseAbs() * W.cwiseAbs();
    std::int64_t r0 = 0;
    for (int s = 0; s < P; ++s) {
      for (std::int64_t r = r0; r < r0 + routed(pb, s, e); ++r) {
        for (std::int64_t n = 0; n < N; ++n) {
          out[s].value.push_back(C(r, n));
          out[s].tol.push_back(sum_tolerance(K, S(r, n), pb.values));
        }
      }
      r0 += routed(pb, s, e);
    }
  }
  return out;
}

}  // namespace fctest
