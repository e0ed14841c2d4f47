#pragma once
// AllGather + GEMM, fused: the tensor-parallel prefill pattern (async tensor parallelism). Rank
// r holds rows [row_off[r], row_off[r + 1]) of the activations A ([M, K], sharded by rows) and
// its column shard B_r ([K, N]) of the weight; it computes C_r = A · B_r ([M, N]), which needs
// every rank's rows of A.
//
//   unfused: the library's AllGather of A, then a GEMM kernel over all of C_r.
//   fused:   one kernel. Each rank puts its rows to every peer with one signal each, and
//            computes the tiles of C_r whose rows it already has while the others arrive: its
//            own rows first, then the peers' in the order they arrive (rank r - 1 sends to r
//            first). A tile of rank s's rows waits for s's signal, once.
//
// Written only against the public API (fusedcoll/kernel.hpp, kernel_launch.hpp); the same body
// compiles as GPU device code. docs/kernels.md walks through it.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/kernel.hpp"
#include "fusedcoll/kernel_launch.hpp"

namespace ag_gemm {

namespace fc = fusedcoll;

/// A tile of C: kRows rows of one rank's block of A, kCols columns.
inline constexpr std::int64_t kRows = 32, kCols = 64;
/// The most ranks the Params' per-rank arrays hold (the emulator's largest world).
inline constexpr int kMaxRanks = 64;

struct Params {
  fc::Symmetric<float> a;  ///< [M, K]: rank s's rows at row_off[s]; this rank's own uploaded
  fc::Symmetric<float> b;  ///< [K, N]: this rank's weight shard
  fc::Symmetric<float> c;  ///< [M, N]: this rank's output
  fc::Signals arrived;     ///< arrived[s]: rank s's rows are here
  std::uint64_t target[kMaxRanks];      ///< per source s: the value arrived[s] reaches
  std::int64_t row_off[kMaxRanks + 1];  ///< row_off[s]: rank s's first row of A
  std::int64_t k, n;
};

/// One tile of this rank's C: rows [row0, row0 + rows) (all from rank `src`), cols [col0, +cols).
struct Tile {
  int src;
  std::int64_t row0, rows, col0, cols;
};

/// Tile `j` in the order its rows arrive (own rows, then rank me - 1, me - 2, ...); `src` < 0
/// once `j` is past the last tile.
FC_HOST_DEVICE inline Tile tile_of(const Params& p, int P, int me, std::int64_t j) {
  const std::int64_t col_tiles = (p.n + kCols - 1) / kCols;
  for (int d = 0; d < P; ++d) {
    const int s = (me - d + P) % P;
    const std::int64_t rows = p.row_off[s + 1] - p.row_off[s];
    const std::int64_t tiles = (rows + kRows - 1) / kRows * col_tiles;
    if (j < tiles) {
      const std::int64_t r0 = j / col_tiles * kRows, c0 = j % col_tiles * kCols;
      return {s, p.row_off[s] + r0, rows - r0 < kRows ? rows - r0 : kRows, c0,
              p.n - c0 < kCols ? p.n - c0 : kCols};
    }
    j -= tiles;
  }
  return {-1, 0, 0, 0, 0};
}

/// c[r][j] = sum over k of a[r][k] * b[k][j], k increasing from +0.0f, each product and sum
/// rounded (no FMA: the build passes -ffp-contract=off / -fmad=false). The workgroup's threads
/// take rows in turn; each row runs over k with all columns, so a CPU vectorises it.
template <class Wg>
FC_DEVICE void gemm_tile(Wg& wg, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                         float* c, std::int64_t ldc, std::int64_t rows, std::int64_t cols,
                         std::int64_t k) {
  for (std::int64_t r = wg.thread_rank(); r < rows; r += wg.num_threads()) {
    float* cr = c + r * ldc;
    for (std::int64_t j = 0; j < cols; ++j) cr[j] = 0.0f;
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const float ark = a[r * lda + kk];
      const float* bk = b + kk * ldb;
      for (std::int64_t j = 0; j < cols; ++j) cr[j] = cr[j] + ark * bk[j];
    }
  }
}

/// Computes tile `t` of C from rows of A at `a` (row t.row0 of the gathered A).
template <class Wg>
FC_DEVICE void compute_tile(Wg& wg, const Params& p, const Tile& t, const float* a) {
  wg.compute("gemm", fc::cost::gemm(t.rows, t.cols, p.k), [&] {
    gemm_tile(wg, a, p.k, wg.local(p.b) + t.col0, p.n, wg.local(p.c) + t.row0 * p.n + t.col0, p.n,
              t.rows, t.cols, p.k);
  });
}

/// The fused kernel.
struct AgGemm {
  static constexpr const char* name = "ag_gemm";
  using Params = ag_gemm::Params;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const int P = wg.world_size(), me = wg.rank();
    const std::int64_t mine = p.row_off[me] * p.k,
                       count = (p.row_off[me + 1] - p.row_off[me]) * p.k;
    // The queue: P - 1 sends first (they never wait, so every tile's wait is for a send that a
    // running workgroup already claimed), then the tiles.
    for (std::int64_t i = FC_CLAIM(wg);; i = FC_CLAIM(wg)) {
      if (i < P - 1) {
        const int q = (me + 1 + static_cast<int>(i)) % P;
        wg.put_signal_nbi(q, p.a, mine, wg.local(p.a) + mine, count, p.arrived[me],
                          fc::SignalOp::add, 1);
        continue;
      }
      const Tile t = tile_of(p, P, me, i - (P - 1));
      if (t.src < 0) break;
      const std::int64_t first = t.row0 * p.k, len = t.rows * p.k;
      if (t.src == me) {
        compute_tile(wg, p, t, wg.local(p.a) + first);
      } else {
        FC_WAIT_UNTIL(wg, p.arrived[t.src], fc::Cmp::ge, p.target[t.src]);
        compute_tile(wg, p, t, wg.read(p.a, first, len));
      }
    }
    FC_RETURN;
  }
};

/// The unfused baseline's kernel: every tile of C from an A that is already whole.
struct Gemm {
  static constexpr const char* name = "gemm";
  using Params = ag_gemm::Params;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    for (std::int64_t i = FC_CLAIM(wg);; i = FC_CLAIM(wg)) {
      const Tile t = tile_of(p, wg.world_size(), wg.rank(), i);
      if (t.src < 0) break;
      compute_tile(wg, p, t, wg.local(p.a) + t.row0 * p.k);
    }
    FC_RETURN;
  }
};

/// One rank's call: `a_rows` is its [rows[rank], k] block of A, `b` its [k, n] shard; returns
/// its C [M, n]. `rows` (every rank's row count), `k` and `n` agree on every rank.
inline std::vector<float> run(fc::Communicator& comm, const std::vector<std::int64_t>& rows,
                              std::int64_t k, std::int64_t n, const std::vector<float>& a_rows,
                              const std::vector<float>& b, bool fused) {
  const int P = comm.size(), me = comm.rank();
  FC_ENFORCE(P <= kMaxRanks && static_cast<int>(rows.size()) == P, "ag_gemm: ", rows.size(),
             " row counts for ", P, " ranks (at most ", kMaxRanks, ")");
  Params p{};
  for (int s = 0; s < P; ++s) p.row_off[s + 1] = p.row_off[s] + rows[s];
  const std::int64_t M = p.row_off[P];
  p.k = k;
  p.n = n;
  p.a = fc::symmetric<float>(comm, "ag_gemm.a", M * k);
  p.b = fc::symmetric<float>(comm, "ag_gemm.b", k * n);
  p.c = fc::symmetric<float>(comm, "ag_gemm.c", M * n);
  p.arrived = fc::signals(comm, "ag_gemm.arrived", P);
  fc::upload(comm, p.b, 0, b.data(), k * n);
  const std::int64_t tiles = [&] {
    std::int64_t t = 0;
    while (tile_of(p, P, me, t).src >= 0) ++t;
    return t;
  }();
  if (fused) {
    fc::upload(comm, p.a, p.row_off[me] * k, a_rows.data(), rows[me] * k);
    for (int s = 0; s < P; ++s)
      if (s != me) p.target[s] = fc::expect(comm, p.arrived[s], 1);
    const int grid =
        static_cast<int>(std::clamp<std::int64_t>(P - 1 + tiles, 1, fc::max_grid<AgGemm>(comm)));
    fc::launch<AgGemm>(comm, grid, p);
  } else {
    std::vector<float> gathered(static_cast<std::size_t>(M * k));
    fc::AllGatherArgs ag;
    ag.send = a_rows.data();
    ag.recv = gathered.data();
    for (int s = 0; s < P; ++s) ag.recv_counts.push_back(rows[s] * k);
    fc::all_gather(comm, ag);
    fc::upload(comm, p.a, 0, gathered.data(), M * k);
    const int grid = static_cast<int>(std::clamp<std::int64_t>(tiles, 1, fc::max_grid<Gemm>(comm)));
    fc::launch<Gemm>(comm, grid, p);
  }
  std::vector<float> c(static_cast<std::size_t>(M * n));
  fc::download(comm, p.c, 0, c.data(), M * n);
  return c;
}

}  // namespace ag_gemm
