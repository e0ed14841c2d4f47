// GemmAllToAll on the GPU: the emulator's kernels (emu/gemm_alltoall.cpp) ported tile for tile
// over the same plan (detail/gemm_plan.hpp), flattened into device arrays. A tile is (local expert
// j, source s, up to kRowBlock of the c[s][e] rows s routed to e, up to kColBlock columns). A block
// computes it with one thread per output element folding all of K in increasing k, products and
// sums rounded separately (ref/'s order; A and W pass through shared memory in chunks of kChunkK
// only to coalesce the loads), so the bits are ref/'s.
//
// - scale_up : the tile goes straight into its final rows of s's output (plain device pointer),
//              then 'gemm.from'[me] on s is bumped; block 0 of each rank waits for every host.
// - scale_out: remote tiles fill the staging slice for s and bump the done-mask 'gemm.done'[s];
//              the slice's put is split into pieces queued after the tiles: a block that claims a
//              piece waits for the done-mask, copies it into s's receive buffer and counts it on
//              'gemm.sent'[s]; the piece completing the slice signals 'gemm.arrive'[me] once.
//              Every block then waits for each host's slice and copies its rows into expert order.
//
// Every tile kernel claims its tiles from one counter per rank and launch (block_claim), as the
// emulator's persistent kernels do.
// - unfused  : kernel 1 computes every tile into per-source row blocks of the stage; kernel 2
//              (after the kernel boundary, no signals) copies each rank's rows from every host's
//              stage into expert order.
//
// Process mode (docs/gpu.md, "Process mode") runs the same kernels for this process's rank only
// (grid (g, 1), the rank in GemmParams::me), on buffers carved from the symmetric heap: scale_up
// stores into a proxied source's output go into this rank's shadow of it and leave as puts (a
// tile's rows, or the whole tile when it spans every column), then the signal; scale_out's pieces
// are put straight from the staged slice. Unfused cannot pull from the hosts' stages (a proxied
// peer's memory cannot be read), so after the compute kernel the scale_out kernel runs over no
// tiles: every slice of the stage is put to its source and copied out, this rank's own from the
// stage.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusedcoll/detail/gemm_plan.hpp"
#include "gpu/ops.hpp"
#if defined(FC_GPU_PROCESS)
#include "gpu/process.hpp"
#endif

namespace fusedcoll::gpu::ops {
namespace {

namespace plan = fusedcoll::detail::gemm;

// int: the device index arithmetic.
constexpr int kRowBlock = static_cast<int>(plan::kRowBlock);
constexpr int kColBlock = static_cast<int>(plan::kColBlock);
constexpr int kChunkK = 32;
static_assert(kRowBlock * kColBlock == 4 * kThreads, "a thread holds 4 outputs of a tile");

struct GemmExpert {
  const float* a;  // [sum_s c[s][e], K] packed
  const float* w;  // [K, N] packed
};

struct GemmTile {
  int s;                  // source rank the rows came from (and go back to)
  int j;                  // local expert index
  std::int64_t a_row;     // first row in A_e: a0(s, e) + r0
  std::int64_t rows;      // r1 - r0
  std::int64_t n0, cols;  // columns [n0, n0 + cols)
  std::int64_t out_row;   // first row in output_s: o0(s, e) + r0
  std::int64_t so_row;    // first row within this host's slice for s: so(s, e) + r0
};

/// Rows [src_row, src_row + count) of a slice or stage go to output rows [out_row, ...).
struct RowRun {
  std::int64_t src_row, out_row, count;
};

struct GemmRank {
  const GemmExpert* experts;  // [E_me]
  float* out;                 // [rows_out, N]
  float* stage;               // [stage rows, N]: slices by source
  float* recv;                // [recv rows, N]: slices by host
};

struct GemmParams : ProcessFields {
  int P;
  std::int64_t K, N;
  const GemmRank* ranks;
  const GemmTile* tiles;             // every rank's tiles, rank-major
  const std::int64_t* tile_begin;    // [P + 1]
  const std::int64_t* stage_at;      // [h][s]
  const std::int64_t* recv_at;       // [h][s]
  const std::int64_t* rows;          // [h][s]
  const std::int64_t* ntiles;        // [h][s]: tiles host h computes for source s
  const RowRun* runs;                // runs of (me, h), rank-major then host
  const std::int64_t* run_begin;     // [P * P + 1]
  const PutPiece* pieces;            // scale_out: every rank's slice pieces, rank-major
  const std::int64_t* piece_begin;   // [P + 1]
  unsigned long long* claims;        // [P]: each rank's work-queue counter, zeroed per call
  SyncView sync;
  int from, done, arrive, sent;
  const std::uint64_t* wait_target;  // [me][h]
  const std::uint64_t* done_target;  // [me][s]
  const std::uint64_t* sent_target;  // [me][s]
};

/// dst[r * ldd + c] = sum over k of a[r][k] * w[k][n0 + c] for r < rows, c < cols.
__device__ void gemm_tile(const float* a, const float* w, std::int64_t K, std::int64_t N,
                          std::int64_t rows, std::int64_t n0, std::int64_t cols, float* dst,
                          std::int64_t ldd) {
  __shared__ float sa[kRowBlock][kChunkK + 1];
  __shared__ float sw[kChunkK][kColBlock];
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int tid = static_cast<int>(threadIdx.x);
  for (std::int64_t k0 = 0; k0 < K; k0 += kChunkK) {
    const int kc = static_cast<int>(K - k0 < kChunkK ? K - k0 : kChunkK);
    __syncthreads();  // the previous chunk (or tile) is no longer being read
    for (int e = tid; e < kRowBlock * kChunkK; e += kThreads) {
      const int r = e / kChunkK, kk = e % kChunkK;
      sa[r][kk] = r < rows && kk < kc ? port::load_ro(a + r * K + k0 + kk) : 0.0f;
    }
    for (int e = tid; e < kChunkK * kColBlock; e += kThreads) {
      const int kk = e / kColBlock, c = e % kColBlock;
      sw[kk][c] = kk < kc && c < cols ? port::load_ro(w + (k0 + kk) * N + n0 + c) : 0.0f;
    }
    __syncthreads();
    for (int u = 0; u < 4; ++u) {
      const int e = tid + u * kThreads, r = e / kColBlock, c = e % kColBlock;
      float v = acc[u];
      for (int kk = 0; kk < kc; ++kk) v = port::add(v, port::mul(sa[r][kk], sw[kk][c]));
      acc[u] = v;
    }
  }
  for (int u = 0; u < 4; ++u) {
    const int e = tid + u * kThreads, r = e / kColBlock, c = e % kColBlock;
    if (r < rows && c < cols) dst[r * ldd + c] = canonical_nan(acc[u]);
  }
}

__device__ inline void compute(const GemmParams& p, const GemmRank& R, const GemmTile& tl,
                               float* dst, std::int64_t ldd) {
  const GemmExpert ex = R.experts[tl.j];
  gemm_tile(ex.a + tl.a_row * p.K, ex.w, p.K, p.N, tl.rows, tl.n0, tl.cols, dst, ldd);
}

/// Copies the runs of (me, h) from `src` (rows of N floats) into me's output, the elements of
/// each run spread over all threads of the rank's blocks.
__device__ void copy_runs(const GemmParams& p, int me, int h, const float* src) {
  const std::int64_t N = p.N;
  float* out = p.ranks[me].out;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                     stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = p.run_begin[me * p.P + h]; r < p.run_begin[me * p.P + h + 1]; ++r) {
    const RowRun run = p.runs[r];
    for (std::int64_t e = first; e < run.count * N; e += stride)
      out[run.out_row * N + e] = src[run.src_row * N + e];
  }
}

__global__ void FC_LAUNCH_BOUNDS(kThreads, 4) gemm_scale_up(GemmParams p) {
  const int me = rank_of(p), P = p.P;
  const GemmRank& R = p.ranks[me];
  const std::int64_t N = p.N;
  const std::int64_t nt = p.tile_begin[me + 1] - p.tile_begin[me];
  for (std::int64_t i = block_claim(p.claims + me); i < nt; i = block_claim(p.claims + me)) {
    const GemmTile tl = p.tiles[p.tile_begin[me] + i];
    float* dst = p.ranks[tl.s].out + tl.out_row * N + tl.n0;
    compute(p, R, tl, dst, N);
    // A proxied source: the tile went into this rank's shadow of its output and travels as
    // puts, one per row (a tile's rows are not contiguous unless it spans every column).
    if (proxied(p.sync, tl.s)) {
      const std::uint64_t at = p.out_off + static_cast<std::uint64_t>(tl.out_row * N + tl.n0) * 4;
      if (tl.cols == N)
        block_put(p.sync, me, tl.s, p.heap, at, dst, static_cast<std::uint64_t>(tl.rows * N) * 4);
      else
        for (std::int64_t r = 0; r < tl.rows; ++r)
          block_put(p.sync, me, tl.s, p.heap, at + static_cast<std::uint64_t>(r * N) * 4,
                    dst + r * N, static_cast<std::uint64_t>(tl.cols) * 4);
    }
    block_signal(p.sync, tl.s, p.from + me, 1, me);
  }
  if (blockIdx.x == 0)
    for (int j = 1; j <= P; ++j) {
      const int h = (me + j) % P;
      if (!block_wait(p.sync, me, p.from + h, p.wait_target[me * P + h])) return;
    }
}

__global__ void FC_LAUNCH_BOUNDS(kThreads, 4) gemm_scale_out(GemmParams p) {
  const int me = rank_of(p), P = p.P;
  const GemmRank& R = p.ranks[me];
  const std::int64_t N = p.N;
  const std::int64_t nt = p.tile_begin[me + 1] - p.tile_begin[me];
  const std::int64_t items = nt + p.piece_begin[me + 1] - p.piece_begin[me];
  // Tiles first, then the pieces: a block waiting for a slice's done-mask only waits for tiles
  // already claimed by running blocks, so the queue cannot deadlock.
  for (std::int64_t i = block_claim(p.claims + me); i < items; i = block_claim(p.claims + me)) {
    if (i >= nt) {
      const PutPiece pc = p.pieces[p.piece_begin[me] + i - nt];
      if (!block_wait(p.sync, me, p.done + pc.q, p.done_target[me * P + pc.q])) return;
      const float* slice = R.stage + p.stage_at[me * P + pc.q] * N + pc.off;
      const std::int64_t at = p.recv_at[me * P + pc.q] * N + pc.off;
      if (proxied(p.sync, pc.q))  // straight from the staged slice, which stays until the call ends
        block_put(p.sync, me, pc.q, p.heap, p.recv_off + static_cast<std::uint64_t>(at) * 4, slice,
                  static_cast<std::uint64_t>(pc.len) * 4);
      else
        block_copy(p.ranks[pc.q].recv + at, slice, pc.len);
      // The piece that completes the slice signals: every other piece's put was posted before
      // its block's add on the done-counter, so before this signal in the proxy's queue.
      if (block_done_is_last(slot_ptr(p.sync, me, p.sent + pc.q), p.sent_target[me * P + pc.q]))
        block_signal(p.sync, pc.q, p.arrive + me, 1, me);
      continue;
    }
    const GemmTile tl = p.tiles[p.tile_begin[me] + i];
    if (tl.s == me) {
      compute(p, R, tl, R.out + tl.out_row * N + tl.n0, N);
      continue;
    }
    float* slice = R.stage + p.stage_at[me * P + tl.s] * N;
    compute(p, R, tl, slice + tl.so_row * N + tl.n0, N);
    block_signal(p.sync, me, p.done + tl.s, 1, me);
  }
  for (int j = p.unpack_self != 0 ? 0 : 1; j < P; ++j) {
    const int h = (me + j) % P;
    if (p.ntiles[h * P + me] == 0) continue;  // that host sends us no slice
    if (h == me) {  // process mode's unfused exchange: this rank's own rows, from its stage
      copy_runs(p, me, h, R.stage);
      continue;
    }
    if (!block_wait(p.sync, me, p.arrive + h, p.wait_target[me * P + h])) return;
    copy_runs(p, me, h, R.recv);
  }
}

/// Unfused kernel 1: every local tile into the stage's per-source row blocks.
__global__ void gemm_compute(GemmParams p) {
  const int me = rank_of(p), P = p.P;
  const GemmRank& R = p.ranks[me];
  const std::int64_t nt = p.tile_begin[me + 1] - p.tile_begin[me];
  for (std::int64_t i = block_claim(p.claims + me); i < nt; i = block_claim(p.claims + me)) {
    const GemmTile tl = p.tiles[p.tile_begin[me] + i];
    compute(p, R, tl, R.stage + (p.stage_at[me * P + tl.s] + tl.so_row) * p.N + tl.n0, p.N);
  }
}

/// Unfused kernel 2, the All-to-All(v) and reorder: each rank pulls its rows from every host.
__global__ void gemm_gather(GemmParams p) {
  const int me = static_cast<int>(blockIdx.y);
  for (int h = 0; h < p.P; ++h) copy_runs(p, me, h, p.ranks[h].stage);
}

}  // namespace

void gemm_alltoall(Context& ctx, std::span<const GemmAllToAllArgs> all, Mode mode) {
  detail::check_mode(mode);
  const int P = ctx.world_size();
  // Process mode: `all` holds every rank's global fields, this rank's call in full (agree_world).
  const int me_only = ctx.me();
  if (me_only < 0) check_world(all, P);
  const std::string op = std::string("gemm_alltoall ") + to_string(mode);
  // Process mode's unfused exchange pushes (see the file comment).
  const bool push_unfused = me_only >= 0 && mode == Mode::unfused;
  ctx.begin_call(op);
  const GemmAllToAllArgs& g = all[0];
  const std::int64_t K = g.k, N = g.n;

  // The plan's offsets and counts are the same for every rank; its tiles are rank me's, so each
  // rank's come from its own plan. Device tiles carry their rows' offsets resolved.
  const plan::Plan pl(g, 0, P);
  auto flat = [&](const std::vector<std::vector<std::int64_t>>& v) {  // [h][s] -> h * P + s
    std::vector<std::int64_t> out;
    for (const auto& row : v) out.insert(out.end(), row.begin(), row.end());
    return out;
  };
  const std::vector<std::int64_t> rows = flat(pl.rows), stage_at = flat(pl.stage_at),
                                  recv_at = flat(pl.recv_at);
  std::vector<std::int64_t> ntiles(P * P, 0);
  for (int h = 0; h < P; ++h)
    for (int s = 0; s < P; ++s) ntiles[h * P + s] = pl.tiles(h, s);

  // Tiles: fused ones in the plan's order; unfused ones expert by expert, sources in rank order.
  std::vector<GemmTile> tiles;
  std::vector<std::int64_t> tile_begin(P + 1, 0);
  std::int64_t most = 0;
  for (int me = 0; me < P; ++me) {
    const plan::Plan mine(g, me, P);
    std::vector<plan::Tile> of;
    if (mode == Mode::unfused) {
      for (int j = 0; j < static_cast<int>(mine.experts_of[me].size()); ++j)
        for (int s = 0; s < P; ++s) mine.add_tiles(s, j, of);
    } else {
      of = mine.fused_tiles();
    }
    for (const plan::Tile& t : of) {
      const int e = mine.experts_of[me][t.j];
      tiles.push_back({t.s, t.j, pl.a0[t.s][e] + t.r0, t.r1 - t.r0, t.n0, t.n1 - t.n0,
                       pl.o0[t.s][e] + t.r0, pl.so[t.s][e] + t.r0});
    }
    tile_begin[me + 1] = static_cast<std::int64_t>(tiles.size());
    most = std::max(most, tile_begin[me + 1] - tile_begin[me]);
  }

  // Row runs into each rank's output: from h's slice in me's recv (scale_out, and the pushed
  // unfused exchange but for the own rows, which stay in me's stage) or from h's stage (unfused).
  std::vector<RowRun> runs;
  std::vector<std::int64_t> run_begin(P * P + 1, 0);
  std::int64_t most_rows = 0;
  for (int me = 0; me < P; ++me)
    for (int h = 0; h < P; ++h) {
      const bool from_stage = mode == Mode::unfused && (!push_unfused || h == me);
      for (int e : pl.experts_of[h]) {
        const std::int64_t base = from_stage ? stage_at[h * P + me] : recv_at[h * P + me];
        if (pl.c(me, e) > 0) runs.push_back({base + pl.so[me][e], pl.o0[me][e], pl.c(me, e)});
        most_rows = std::max(most_rows, pl.c(me, e));
      }
      run_begin[me * P + h + 1] = static_cast<std::int64_t>(runs.size());
    }

  Arena arena;
  std::vector<GemmRank> ranks(P);
  const std::int64_t stage_rows = pl.stage_rows(), recv_rows = pl.recv_rows();
  std::vector<std::int64_t> out_rows(P, 0);
  std::int64_t most_out = 0;
  for (int r = 0; r < P; ++r) {
    out_rows[r] = output_rows(all[r], r);  // from the agreed counts alone
    most_out = std::max(most_out, out_rows[r]);
  }
  // Process mode: the buffers in the symmetric heap (carve_heap).
  std::size_t recv_off = 0;
  Process* process = ctx.process();
#if defined(FC_GPU_PROCESS)
  if (process != nullptr)
    recv_off = carve_heap(*process, ranks, static_cast<std::size_t>(most_out * N) * sizeof(float),
                          pl.recv_bytes(), pl.stage_bytes(), out_rows[me_only] * N, op);
#endif
  for (int r = 0; r < P; ++r) {
    if (process != nullptr && r != me_only) continue;  // a peer's experts stay with the peer
    std::vector<GemmExpert> experts;
    for (const LocalExpert& ex : all[r].local_experts)
      experts.push_back({arena.upload(pack<float>(ex.a, ex.a.size(0), K)),
                         arena.upload(pack<float>(ex.w, K, N))});
    ranks[r].experts = arena.upload(experts);
    if (process != nullptr) continue;
    ranks[r].out = arena.alloc_poisoned(out_rows[r] * N);
    ranks[r].stage = mode == Mode::scale_up ? nullptr : arena.alloc<float>(stage_rows * N);
    ranks[r].recv = mode == Mode::scale_out ? arena.alloc<float>(recv_rows * N) : nullptr;
  }

  GemmParams p{};
  p.P = P;
  p.K = K;
  p.N = N;
  p.ranks = arena.upload(ranks);
  p.tiles = arena.upload(tiles);
  p.tile_begin = arena.upload(tile_begin);
  p.stage_at = arena.upload(stage_at);
  p.recv_at = arena.upload(recv_at);
  p.rows = arena.upload(rows);
  p.ntiles = arena.upload(ntiles);
  p.runs = arena.upload(runs);
  p.run_begin = arena.upload(run_begin);
  p.claims = arena.alloc_zeroed<unsigned long long>(P);
  p.sync = ctx.view();
  static_cast<ProcessFields&>(p) = process_fields(ctx, recv_off);

  // scale_out (and the pushed unfused exchange): each rank's slice puts in pieces, sources in
  // remote-first order.
  std::vector<PutPiece> pieces;
  std::vector<std::int64_t> piece_begin(P + 1, 0), piece_count(static_cast<std::size_t>(P * P), 0);
  std::int64_t most_items = most;
  if (mode == Mode::scale_out || push_unfused)
    for (int me = 0; me < P; ++me) {
      for (int s : remote_first(me, P))
        if (s != me && ntiles[me * P + s] > 0)
          piece_count[me * P + s] = append_pieces(pieces, s, rows[me * P + s] * N);
      piece_begin[me + 1] = static_cast<std::int64_t>(pieces.size());
      most_items = std::max(most_items, tile_begin[me + 1] - tile_begin[me] + piece_begin[me + 1] -
                                            piece_begin[me]);
    }
  p.pieces = arena.upload(pieces);
  p.piece_begin = arena.upload(piece_begin);

  std::vector<std::uint64_t> wait_target(static_cast<std::size_t>(P * P), 0),
      done_target(static_cast<std::size_t>(P * P), 0), sent_target(static_cast<std::size_t>(P * P), 0);
  if (mode == Mode::scale_up) {
    p.from = ctx.slots("gemm.from", P);
    for (int me = 0; me < P; ++me)
      for (int h = 0; h < P; ++h)
        wait_target[me * P + h] = ctx.expect(me, p.from + h, ntiles[h * P + me]);
  } else if (mode == Mode::scale_out || push_unfused) {
    p.done = ctx.slots("gemm.done", P);
    p.arrive = ctx.slots("gemm.arrive", P);
    p.sent = ctx.slots("gemm.sent", P);
    for (int me = 0; me < P; ++me)
      for (int o = 0; o < P; ++o) {
        if (o == me) continue;
        // The pushed exchange's slices were computed by the kernel before: no done-mask.
        done_target[me * P + o] = ctx.expect(me, p.done + o, push_unfused ? 0 : ntiles[me * P + o]);
        sent_target[me * P + o] =
            ctx.expect(me, p.sent + o, static_cast<std::uint64_t>(piece_count[me * P + o]));
        // A host sends a slice (one signal) exactly when it has tiles for us.
        wait_target[me * P + o] = ctx.expect(me, p.arrive + o, ntiles[o * P + me] > 0 ? 1 : 0);
      }
  }
  p.wait_target = arena.upload(wait_target);
  p.done_target = arena.upload(done_target);
  p.sent_target = arena.upload(sent_target);

  // Grids before the timed region: the occupancy queries are host work. The copies of rows
  // into place are spread over threads, so they want a block per kThreads elements.
  const std::int64_t copy_blocks = (most_rows * N + kThreads - 1) / kThreads;
  int g1 = 1, g2 = 1;
  if (mode == Mode::scale_up) {
    g1 = ctx.blocks_per_rank(gemm_scale_up, most);
  } else if (mode == Mode::scale_out) {
    g1 = ctx.blocks_per_rank(gemm_scale_out, std::max(most_items, copy_blocks));
  } else {
    g1 = ctx.blocks_per_rank(gemm_compute, most);
    g2 = push_unfused
             ? ctx.blocks_per_rank(gemm_scale_out, std::max(most_items - most, copy_blocks))
             : ctx.blocks_per_rank(gemm_gather, copy_blocks);
  }
  const GemmParams push = push_unfused ? push_exchange(p, arena, P) : p;
  const int gy = process != nullptr ? 1 : P;  // process mode: this rank's blocks only
  ctx.start_timing();
  if (mode == Mode::scale_up) {
    gemm_scale_up<<<dim3(g1, gy), kThreads, 0, ctx.stream()>>>(p);
  } else if (mode == Mode::scale_out) {
    gemm_scale_out<<<dim3(g1, gy), kThreads, 0, ctx.stream()>>>(p);
  } else {
    gemm_compute<<<dim3(g1, gy), kThreads, 0, ctx.stream()>>>(p);
    FC_CHECK_GPU(gpuGetLastError());
    if (push_unfused)
      gemm_scale_out<<<dim3(g2, gy), kThreads, 0, ctx.stream()>>>(push);
    else
      gemm_gather<<<dim3(g2, gy), kThreads, 0, ctx.stream()>>>(p);
  }
  ctx.stop_timing();
  ctx.finish(op);

  for (int r = 0; r < P; ++r) {
    if (process != nullptr && r != me_only) continue;
    download_rows(ranks[r].out, out_rows[r], N, static_cast<float*>(all[r].output.data()),
                  out_rows[r] > 0 ? all[r].output.stride(0) : N);
  }
}

}  // namespace fusedcoll::gpu::ops
