#pragma once
/// @file
/// Small problem builders shared by the op tests, and the "unfused" compositions: each op computed
/// as its local kernel (detail/kernels.hpp) followed by a standalone ref collective. The fused
/// oracle must equal the composition bit for bit; that identity is what lets later backends fuse
/// at all.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fusedcoll/detail/kernels.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace fctest {

/// The world sizes the issue asks every op to be checked at.
inline const std::vector<int> kWorldSizes = {1, 2, 3, 4, 7, 8};

/// Uneven batch sizes with zeros: every third rank (1, 4, 7) gets no samples.
inline std::vector<std::int64_t> uneven_batches(int P) {
  std::vector<std::int64_t> b(P);
  for (int q = 0; q < P; ++q) b[q] = (q % 3 == 1) ? 0 : 1 + (q * 5 + P) % 6;
  return b;
}

/// Where tables (or experts) go.
enum class Placement { round_robin, all_on_rank0, odd_ranks_only, reversed_blocks };

inline const char* placement_name(Placement p) {
  switch (p) {
    case Placement::round_robin: return "rr";
    case Placement::all_on_rank0: return "rank0";
    case Placement::odd_ranks_only: return "odd";
    case Placement::reversed_blocks: return "revblk";
  }
  return "?";
}

/// Owner of each of `count` items on `P` ranks. `odd_ranks_only` leaves every even rank without
/// an item (with P = 1 it degenerates to rank 0); `all_on_rank0` leaves every other rank empty.
inline std::vector<int> place(std::int64_t count, int P, Placement how) {
  std::vector<int> owner(static_cast<std::size_t>(count));
  const int odd = P / 2;  // number of odd ranks
  for (std::int64_t t = 0; t < count; ++t) {
    switch (how) {
      case Placement::round_robin: owner[t] = static_cast<int>(t % P); break;
      case Placement::all_on_rank0: owner[t] = 0; break;
      case Placement::odd_ranks_only:
        owner[t] = odd == 0 ? 0 : 1 + 2 * static_cast<int>(t % odd);
        break;
      case Placement::reversed_blocks:
        owner[t] = P - 1 - static_cast<int>((t * P) / std::max<std::int64_t>(count, 1));
        break;
    }
  }
  return owner;
}

// ---------------------------------------------------------------------------------------------
// Unfused EmbeddingAllToAll: per-rank pooling into [B, T_p, D], All-to-Allv, permute.

inline std::vector<std::vector<float>> unfused_embedding(
    const fusedcoll::EmbeddingProblem& pb, const std::vector<fusedcoll::EmbeddingRankData>& world) {
  using fusedcoll::DType;
  const int P = pb.world_size;
  const std::int64_t D = pb.dim, T = pb.num_tables();
  std::vector<std::int64_t> start(P + 1, 0);
  for (int q = 0; q < P; ++q) start[q + 1] = start[q] + pb.batch_sizes[q];
  const std::int64_t B = start[P];

  // 1. Local pooling: rank p's send buffer is [B, T_p, D], samples in global order, so the block
  //    for destination q is the contiguous range of its samples.
  std::vector<std::vector<float>> send(P);
  std::vector<std::int64_t> tp(P), tables_before(P + 1, 0);
  for (int p = 0; p < P; ++p) {
    const auto& rd = world[p];
    tp[p] = static_cast<std::int64_t>(rd.local_table_ids.size());
    tables_before[p + 1] = tables_before[p] + tp[p];
    send[p].assign(static_cast<std::size_t>(B * tp[p] * D), 0.0f);
    for (std::size_t j = 0; j < rd.local_table_ids.size(); ++j) {
      const float* w = pb.weighted ? rd.weights[j].data() : nullptr;
      float* out = send[p].data() + j * D;
      if (pb.index_dtype == DType::i32) {
        fusedcoll::detail::embedding_bag_rows(rd.tables[j].data(), D, D, rd.offsets32[j].data(),
                                              rd.indices32[j].data(), w, pb.pooling, 0, B, out,
                                              tp[p] * D);
      } else {
        fusedcoll::detail::embedding_bag_rows(rd.tables[j].data(), D, D, rd.offsets64[j].data(),
                                              rd.indices64[j].data(), w, pb.pooling, 0, B, out,
                                              tp[p] * D);
      }
    }
  }

  // 2. All-to-Allv: p -> q carries [B_q, T_p, D]; q stores the blocks by source rank.
  std::vector<std::vector<float>> recv(P);
  std::vector<fusedcoll::AllToAllvArgs> a2a(P);
  for (int q = 0; q < P; ++q) recv[q].assign(static_cast<std::size_t>(pb.batch_sizes[q] * T * D), 0.0f);
  for (int r = 0; r < P; ++r) {
    auto& a = a2a[r];
    a.send = send[r].data();
    a.recv = recv[r].data();
    a.dtype = DType::f32;
    for (int q = 0; q < P; ++q) {
      a.send_counts.push_back(pb.batch_sizes[q] * tp[r] * D);
      a.send_displs.push_back(start[q] * tp[r] * D);
      a.recv_counts.push_back(pb.batch_sizes[r] * tp[q] * D);
      a.recv_displs.push_back(pb.batch_sizes[r] * tables_before[q] * D);
    }
  }
  fusedcoll::ref::all_to_allv(a2a);

  // 3. Permute [source p][i][j][d] into [i][global table][d].
  std::vector<std::vector<float>> out(P);
  for (int q = 0; q < P; ++q) {
    const std::int64_t bq = pb.batch_sizes[q];
    out[q].assign(static_cast<std::size_t>(bq * T * D), 0.0f);
    for (int p = 0; p < P; ++p) {
      const float* block = recv[q].data() + bq * tables_before[p] * D;
      for (std::int64_t i = 0; i < bq; ++i) {
        for (std::int64_t j = 0; j < tp[p]; ++j) {
          const std::int64_t t = world[p].local_table_ids[j];
          std::copy_n(block + (i * tp[p] + j) * D, D, out[q].data() + (i * T + t) * D);
        }
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Unfused GemmAllToAll: per-expert GEMM, pack by destination, All-to-Allv, reorder by expert.

inline std::vector<std::vector<float>> unfused_gemm(const fusedcoll::GemmProblem& pb,
                                                    const std::vector<fusedcoll::GemmRankData>& world) {
  const int P = pb.world_size;
  const std::int64_t E = pb.num_experts(), K = pb.k, N = pb.n;
  auto c = [&](int s, std::int64_t e) { return pb.counts[static_cast<std::size_t>(s * E + e)]; };
  // first_row[s][e]: row of A_e where source s's rows begin.
  auto first_row = [&](int s, std::int64_t e) {
    std::int64_t r = 0;
    for (int s2 = 0; s2 < s; ++s2) r += c(s2, e);
    return r;
  };

  // 1. Local GEMM per hosted expert, then pack rows for destination s: hosted experts in
  //    increasing id, rows of s in order.
  std::vector<std::vector<float>> send(P);
  std::vector<std::vector<std::int64_t>> send_counts(P, std::vector<std::int64_t>(P, 0));
  for (int h = 0; h < P; ++h) {
    const auto& rd = world[h];
    std::vector<std::vector<float>> cmat(rd.local_expert_ids.size());
    for (std::size_t j = 0; j < rd.local_expert_ids.size(); ++j) {
      const std::int64_t e = rd.local_expert_ids[j];
      const std::int64_t rows = first_row(P, e);
      cmat[j].assign(static_cast<std::size_t>(rows * N), 0.0f);
      fusedcoll::detail::gemm_tile(rd.a[j].data(), K, rd.w[j].data(), N, cmat[j].data(), N, rows, N,
                                   K);
    }
    for (int s = 0; s < P; ++s) {
      for (std::size_t j = 0; j < rd.local_expert_ids.size(); ++j) {
        const std::int64_t e = rd.local_expert_ids[j];
        const float* rows = cmat[j].data() + first_row(s, e) * N;
        send[h].insert(send[h].end(), rows, rows + c(s, e) * N);
        send_counts[h][s] += c(s, e) * N;
      }
    }
  }

  // 2. All-to-Allv, packed by peer on both sides.
  std::vector<std::vector<float>> recv(P);
  std::vector<fusedcoll::AllToAllvArgs> a2a(P);
  for (int r = 0; r < P; ++r) {
    std::int64_t total = 0;
    for (int h = 0; h < P; ++h) total += send_counts[h][r];
    recv[r].assign(static_cast<std::size_t>(total), 0.0f);
  }
  for (int r = 0; r < P; ++r) {
    auto& a = a2a[r];
    a.send = send[r].data();
    a.recv = recv[r].data();
    std::int64_t sd = 0, rdisp = 0;
    for (int q = 0; q < P; ++q) {
      a.send_counts.push_back(send_counts[r][q]);
      a.send_displs.push_back(sd);
      sd += send_counts[r][q];
      a.recv_counts.push_back(send_counts[q][r]);
      a.recv_displs.push_back(rdisp);
      rdisp += send_counts[q][r];
    }
  }
  fusedcoll::ref::all_to_allv(a2a);

  // 3. Reorder: the block from host h holds h's experts in increasing id; the output wants all
  //    experts in increasing id.
  std::vector<std::vector<float>> out(P);
  for (int s = 0; s < P; ++s) {
    std::vector<std::int64_t> block_start(P + 1, 0);
    for (int h = 0; h < P; ++h) block_start[h + 1] = block_start[h] + send_counts[h][s];
    std::vector<std::int64_t> cursor(block_start.begin(), block_start.end() - 1);
    for (std::int64_t e = 0; e < E; ++e) {
      const int h = pb.host[e];
      const float* rows = recv[s].data() + cursor[h];
      out[s].insert(out[s].end(), rows, rows + c(s, e) * N);
      cursor[h] += c(s, e) * N;
    }
  }
  return out;
}

}  // namespace fctest

namespace fctest {

// ---------------------------------------------------------------------------------------------
// Scalar loops written straight from the pinned definitions (every product rounded to f32, then
// added to an accumulator that starts at +0.0f, in increasing reduction index). Compiled with
// -ffp-contract=off, they give the exact bits every backend and every ISA must produce.

inline std::vector<std::vector<float>> pinned_embedding(
    const fusedcoll::EmbeddingProblem& pb, const std::vector<fusedcoll::EmbeddingRankData>& world) {
  const int P = pb.world_size;
  const std::int64_t D = pb.dim, T = pb.num_tables();
  std::vector<std::vector<float>> out(P);
  std::int64_t start = 0;
  for (int q = 0; q < P; ++q) {
    out[q].assign(static_cast<std::size_t>(pb.batch_sizes[q] * T * D), 0.0f);
    for (std::int64_t t = 0; t < T; ++t) {
      const auto& rd = world[pb.owner[t]];
      const auto j = static_cast<std::size_t>(
          std::find(rd.local_table_ids.begin(), rd.local_table_ids.end(), t) -
          rd.local_table_ids.begin());
      const auto& off = rd.offsets64[j];
      const auto& idx = rd.indices64[j];
      for (std::int64_t i = 0; i < pb.batch_sizes[q]; ++i) {
        const std::int64_t b = start + i;
        for (std::int64_t d = 0; d < D; ++d) {
          float acc = 0.0f;
          for (std::int64_t k = off[b]; k < off[b + 1]; ++k) {
            const float row = rd.tables[j][idx[k] * D + d];
            if (pb.weighted) {
              const float p = rd.weights[j][k] * row;
              acc = acc + p;
            } else {
              acc = acc + row;
            }
          }
          const std::int64_t len = off[b + 1] - off[b];
          if (pb.pooling == fusedcoll::PoolingMode::mean && len > 0) acc = acc / static_cast<float>(len);
          out[q][(i * T + t) * D + d] = acc;
        }
      }
    }
    start += pb.batch_sizes[q];
  }
  return out;
}

/// y = ((partial_0 + partial_1) + ...) with partial_p[m][n] = sum_k x_p[m][k] * W_p[n][k].
inline std::vector<float> pinned_gemv(const fusedcoll::GemvProblem& pb,
                                      const std::vector<fusedcoll::GemvRankData>& world) {
  const std::int64_t M = pb.m, N = pb.n;
  std::vector<float> y(static_cast<std::size_t>(M * N), 0.0f);
  for (int p = 0; p < pb.world_size; ++p) {
    const std::int64_t kp = pb.k_splits[p];
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (std::int64_t k = 0; k < kp; ++k) {
          const float prod = world[p].x[m * kp + k] * world[p].w[n * kp + k];
          acc = acc + prod;
        }
        y[m * N + n] = p == 0 ? acc : y[m * N + n] + acc;
      }
    }
  }
  return y;
}

/// Per expert C_e = A_e W_e in the pinned order, rows returned to their sources.
inline std::vector<std::vector<float>> pinned_gemm(const fusedcoll::GemmProblem& pb,
                                                   const std::vector<fusedcoll::GemmRankData>& world) {
  const int P = pb.world_size;
  const std::int64_t E = pb.num_experts(), K = pb.k, N = pb.n;
  std::vector<std::vector<float>> out(P);
  for (std::int64_t e = 0; e < E; ++e) {
    const auto& rd = world[pb.host[e]];
    const auto j = static_cast<std::size_t>(
        std::find(rd.local_expert_ids.begin(), rd.local_expert_ids.end(), e) -
        rd.local_expert_ids.begin());
    std::int64_t r = 0;
    for (int s = 0; s < P; ++s) {
      const std::int64_t rows = pb.counts[static_cast<std::size_t>(s * E + e)];
      for (std::int64_t i = 0; i < rows; ++i, ++r) {
        for (std::int64_t n = 0; n < N; ++n) {
          float acc = 0.0f;
          for (std::int64_t k = 0; k < K; ++k) {
            const float prod = rd.a[j][r * K + k] * rd.w[j][k * N + n];
            acc = acc + prod;
          }
          out[s].push_back(acc);
        }
      }
    }
  }
  return out;
}

}  // namespace fctest
