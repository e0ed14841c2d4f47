// GemvAllReduce on the GPU: the emulator's kernels (emu/gemv_allreduce.cpp) ported tile for tile
// over the same plan (detail/gemv_plan.hpp), flattened into device arrays. Output columns are
// split into owner chunks chunk_of(N, P, j), each into tiles of kTileN columns.
// A block computes a tile's partial with one thread per output element (m, n), each folding its
// whole K range in increasing k with separately rounded products and sums (ref/'s order; W and x
// pass through shared memory in chunks of kChunkK only to coalesce the loads), and owners fold the
// P partials in rank order, so the bits are ref/'s.
//
// - scale_up : partial -> owner's partials[me][t] + 'gemv.partial'[t] on the owner; the owner's
//              block waits for all P, folds in rank order and stores the tile into every rank's y,
//              bumping 'gemv.y' there; block 0 of each rank waits for all tiles of y.
// - scale_out: partials fill the staging slice of their owner; the block completing a slice
//              (done-mask 'gemv.slice_done'[owner]) copies it to the owner's slices[me] and signals
//              'gemv.slice_arrive'; owners reduce their tiles straight into every rank's
//              gathered[owner] (the all-gather's put, a tile per block instead of the whole chunk
//              by one), and the block completing the chunk ('gemv.reduced_done') signals
//              'gemv.gathered' on every rank; every rank unpacks into y.
//
// The tiles, then the owners' reductions, are one work queue per rank and launch that blocks
// claim from (block_claim), as the emulator's persistent kernels do.
// - unfused  : kernel 1 writes the whole partial [M, N]; kernel 2 is the direct AllReduce: rank j's
//              blocks fold chunk_of(M*N, P, j) in rank order and write it to every rank's y.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/detail/gemv_plan.hpp"
#include "gpu/ops.hpp"

namespace fusedcoll::gpu::ops {
namespace {

namespace plan = fusedcoll::detail::gemv;

constexpr int kTileN = static_cast<int>(plan::kTileN);  // int: the device index arithmetic
constexpr int kChunkK = 64;
constexpr int kMaxRows = 16;  // kMaxGemvRows
static_assert(kMaxRows * kTileN <= 4 * kThreads, "a thread holds at most 4 outputs of a tile");

using GemvTile = plan::Tile;  // the plan's tile, copied to the device as is

struct GemvRank {
  const float* w;    // [N, k] packed
  const float* x;    // [M, k] packed
  std::int64_t k;
  float* y;          // [M, N]
  float* partials;   // scale_up: [P][num_tiles][M][kTileN]
  float* stage;      // scale_out: [P][slice_floats]
  float* slices;     // scale_out: [P][slice_floats]
  float* gathered;   // scale_out: [P][slice_floats]
  float* partial;    // unfused: [M, N]
};

struct GemvParams {
  int P;
  std::int64_t M, N;
  int num_tiles;
  const GemvTile* tiles;            // [num_tiles], owner-major
  const int* compute;               // [P][num_tiles]: each rank's order, remote owners first
  const int* mine;                  // tiles of each owner, rank-major
  const int* mine_begin;            // [P + 1]
  const std::int64_t* chunk_off;    // [P]
  const std::int64_t* chunk_len;    // [P]
  std::int64_t slice_floats;        // M * max chunk length
  const GemvRank* ranks;            // [P]
  unsigned long long* claims;       // [P]: each rank's work-queue counter, zeroed per call
  SyncView sync;
  int part_slot, y_slot, done_slot, arrive_slot, rdone_slot, gather_slot;
  const std::uint64_t* part_target;    // [P][num_tiles]
  const std::uint64_t* y_target;       // [P]
  const std::uint64_t* done_target;    // [P][P]
  const std::uint64_t* arrive_target;  // [P]
  const std::uint64_t* rdone_target;   // [P]
  const std::uint64_t* gather_target;  // [P]
};

/// out[m * ld + c] = sum over k of x[m][k] * w[n0 + c][k], c < width, m < M.
__device__ void gemv_tile(const float* w, const float* x, std::int64_t K, std::int64_t M,
                          std::int64_t n0, std::int64_t width, float* out, std::int64_t ld) {
  __shared__ float sw[kTileN][kChunkK + 1];  // +1: threads of a warp read different rows
  __shared__ float sx[kMaxRows][kChunkK];
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int tid = static_cast<int>(threadIdx.x);
  for (std::int64_t k0 = 0; k0 < K; k0 += kChunkK) {
    const int kc = static_cast<int>(K - k0 < kChunkK ? K - k0 : kChunkK);
    __syncthreads();  // the previous chunk (or tile) is no longer being read
    for (int e = tid; e < kTileN * kChunkK; e += kThreads) {
      const int c = e / kChunkK, kk = e % kChunkK;
      sw[c][kk] = c < width && kk < kc ? port::load_ro(w + (n0 + c) * K + k0 + kk) : 0.0f;
    }
    for (int e = tid; e < M * kChunkK; e += kThreads) {
      const int m = e / kChunkK, kk = e % kChunkK;
      sx[m][kk] = kk < kc ? port::load_ro(x + m * K + k0 + kk) : 0.0f;
    }
    __syncthreads();
    for (int u = 0; u < 4; ++u) {
      const int e = tid + u * kThreads;
      if (e >= M * kTileN) break;
      const int m = e / kTileN, c = e % kTileN;
      float a = acc[u];
      for (int kk = 0; kk < kc; ++kk) a = port::add(a, port::mul(sx[m][kk], sw[c][kk]));
      acc[u] = a;
    }
  }
  for (int u = 0; u < 4; ++u) {
    const int e = tid + u * kThreads;
    if (e >= M * kTileN) break;
    const int m = e / kTileN, c = e % kTileN;
    if (c < width) out[m * ld + c] = canonical_nan(acc[u]);
  }
}

__global__ void FC_LAUNCH_BOUNDS(kThreads, 4) gemv_scale_up(GemvParams p) {
  const int me = static_cast<int>(blockIdx.y), P = p.P;
  const GemvRank& R = p.ranks[me];
  const std::int64_t M = p.M, N = p.N, tf = M * kTileN;
  const int mine0 = p.mine_begin[me], mine_n = p.mine_begin[me + 1] - mine0;
  // The queue: this rank's partial tiles, then its own tiles' reductions (which wait only for
  // partials of tiles already claimed by running blocks).
  for (std::int64_t i = block_claim(p.claims + me); i < p.num_tiles + mine_n;
       i = block_claim(p.claims + me)) {
    if (i < p.num_tiles) {
      const int t = p.compute[me * p.num_tiles + i];
      const GemvTile tile = p.tiles[t];
      float* dst =
          p.ranks[tile.owner].partials + (static_cast<std::int64_t>(me) * p.num_tiles + t) * tf;
      gemv_tile(R.w, R.x, R.k, M, tile.n0, tile.n1 - tile.n0, dst, kTileN);
      block_signal(p.sync, tile.owner, p.part_slot + t, 1);
      continue;
    }
    const int t = p.mine[mine0 + (i - p.num_tiles)];
    const GemvTile tile = p.tiles[t];
    if (!block_wait(p.sync, me, p.part_slot + t, p.part_target[me * p.num_tiles + t])) return;
    const std::int64_t width = tile.n1 - tile.n0;
    for (std::int64_t e = threadIdx.x; e < M * width; e += blockDim.x) {
      const std::int64_t m = e / width, c = e % width, at = m * kTileN + c;
      // Rank order, starting from rank 0's partial itself: the `direct` order.
      float acc = R.partials[static_cast<std::int64_t>(t) * tf + at];
      for (int src = 1; src < P; ++src)
        acc = reduce_sum(acc, R.partials[(static_cast<std::int64_t>(src) * p.num_tiles + t) * tf + at]);
      for (int j = 1; j <= P; ++j) p.ranks[(me + j) % P].y[m * N + tile.n0 + c] = acc;
    }
    for (int j = 1; j <= P; ++j) block_signal(p.sync, (me + j) % P, p.y_slot, 1);
  }
  if (blockIdx.x == 0) (void)block_wait(p.sync, me, p.y_slot, p.y_target[me]);
}

__global__ void FC_LAUNCH_BOUNDS(kThreads, 4) gemv_scale_out(GemvParams p) {
  const int me = static_cast<int>(blockIdx.y), P = p.P;
  const GemvRank& R = p.ranks[me];
  const std::int64_t M = p.M, N = p.N, sf = p.slice_floats;
  // A chunk with no tiles (N < P) has no last block to ship it: announce the empty slice.
  if (blockIdx.x == 0)
    for (int j = 1; j <= P; ++j) {
      const int owner = (me + j) % P;
      if (p.chunk_len[owner] == 0) block_signal(p.sync, owner, p.arrive_slot, 1);
    }
  const std::int64_t off = p.chunk_off[me], len = p.chunk_len[me];
  const int mine0 = p.mine_begin[me], mine_n = p.mine_begin[me + 1] - mine0;
  // The queue: this rank's partial tiles, then its own tiles' reductions (which wait only for
  // slices whose tiles are already claimed by running blocks).
  for (std::int64_t i = block_claim(p.claims + me); i < p.num_tiles + mine_n;
       i = block_claim(p.claims + me)) {
    if (i >= p.num_tiles) {
      const GemvTile tile = p.tiles[p.mine[mine0 + (i - p.num_tiles)]];
      if (!block_wait(p.sync, me, p.arrive_slot, p.arrive_target[me])) return;
      const std::int64_t c0 = tile.n0 - off, width = tile.n1 - tile.n0;
      for (std::int64_t e = threadIdx.x; e < M * width; e += blockDim.x) {
        const std::int64_t at = (e / width) * len + c0 + e % width;
        float acc = R.slices[at];
        for (int src = 1; src < P; ++src) acc = reduce_sum(acc, R.slices[src * sf + at]);
        for (int j = 1; j <= P; ++j) p.ranks[(me + j) % P].gathered[me * sf + at] = acc;
      }
      if (block_done_is_last(slot_ptr(p.sync, me, p.rdone_slot), p.rdone_target[me]))
        for (int j = 1; j <= P; ++j) block_signal(p.sync, (me + j) % P, p.gather_slot, 1);
      continue;
    }
    const int t = p.compute[me * p.num_tiles + i];
    const GemvTile tile = p.tiles[t];
    const std::int64_t toff = p.chunk_off[tile.owner], tlen = p.chunk_len[tile.owner];
    float* slice = R.stage + tile.owner * sf;  // [M][tlen]
    gemv_tile(R.w, R.x, R.k, M, tile.n0, tile.n1 - tile.n0, slice + (tile.n0 - toff), tlen);
    if (block_done_is_last(slot_ptr(p.sync, me, p.done_slot + tile.owner),
                           p.done_target[me * P + tile.owner])) {
      block_copy(p.ranks[tile.owner].slices + me * sf, slice, M * tlen);
      block_signal(p.sync, tile.owner, p.arrive_slot, 1);
    }
  }
  // An owner with an empty chunk still owes every rank its (empty) slice.
  if (mine_n == 0 && blockIdx.x == 0) {
    if (!block_wait(p.sync, me, p.arrive_slot, p.arrive_target[me])) return;
    for (int j = 1; j <= P; ++j) block_signal(p.sync, (me + j) % P, p.gather_slot, 1);
  }
  if (!block_wait(p.sync, me, p.gather_slot, p.gather_target[me])) return;
  // Every thread of the grid unpacks elements: a chunk per block was a serial tail of M * len
  // floats at one block's bandwidth.
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                     stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (int j = 0; j < P; ++j) {
    const std::int64_t cj = p.chunk_off[j], lj = p.chunk_len[j];
    const float* g = R.gathered + j * sf;
    for (std::int64_t e = first; e < M * lj; e += stride) R.y[(e / lj) * N + cj + e % lj] = g[e];
  }
}

/// Unfused kernel 1: the whole partial [M, N] of each rank.
__global__ void gemv_partial(GemvParams p) {
  const int me = static_cast<int>(blockIdx.y);
  const GemvRank& R = p.ranks[me];
  for (std::int64_t t = block_claim(p.claims + me); t < p.num_tiles; t = block_claim(p.claims + me)) {
    const GemvTile tile = p.tiles[t];
    gemv_tile(R.w, R.x, R.k, p.M, tile.n0, tile.n1 - tile.n0, R.partial + tile.n0, p.N);
  }
}

/// Unfused kernel 2: AllReduce(sum, direct) over M*N elements; rank j owns chunk_of(M*N, P, j).
__global__ void gemv_allreduce_direct(GemvParams p) {
  const int me = static_cast<int>(blockIdx.y), P = p.P;
  const std::int64_t count = p.M * p.N, base = count / P, rem = count % P;
  const std::int64_t begin = me * base + (me < rem ? me : rem), len = base + (me < rem ? 1 : 0);
  for (std::int64_t e = begin + blockIdx.x * blockDim.x + threadIdx.x; e < begin + len;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float acc = p.ranks[0].partial[e];
    for (int src = 1; src < P; ++src) acc = reduce_sum(acc, p.ranks[src].partial[e]);
    for (int j = 1; j <= P; ++j) p.ranks[(me + j) % P].y[e] = acc;
  }
}

}  // namespace

void gemv_allreduce(Context& ctx, std::span<const GemvAllReduceArgs> all, Mode mode) {
  detail::check_mode(mode);
  const int P = ctx.world_size();
  check_world(all, P);
  const std::string op = std::string("gemv_allreduce ") + to_string(mode);
  ctx.begin_call(op);
  const std::int64_t M = all[0].m, N = all[0].n;

  // The plan's tiles, chunks and slice size are the same for every rank; its tile order and own
  // tiles are rank me's, so each rank's come from its own plan.
  const plan::Plan pl(all[0], 0, P);
  const std::vector<GemvTile>& tiles = pl.tiles;
  std::vector<std::int64_t> chunk_off(P), chunk_len(P);
  for (int j = 0; j < P; ++j) {
    chunk_off[j] = pl.chunks[j].offset;
    chunk_len[j] = pl.chunks[j].length;
  }
  const int num_tiles = pl.num_tiles();
  std::vector<int> compute, mine, mine_begin(P + 1, 0);
  for (int me = 0; me < P; ++me) {
    const plan::Plan of(all[me], me, P);
    compute.insert(compute.end(), of.compute.begin(), of.compute.end());
    mine.insert(mine.end(), of.mine.begin(), of.mine.end());
    mine_begin[me + 1] = static_cast<int>(mine.size());
  }
  const std::int64_t sf = pl.S;

  Arena arena;
  std::vector<GemvRank> ranks(P);
  for (int r = 0; r < P; ++r) {
    const std::int64_t k = all[r].k_splits[r];
    GemvRank& R = ranks[r];
    R.w = arena.upload(pack<float>(all[r].w, N, k));
    R.x = arena.upload(pack<float>(all[r].x, M, k));
    R.k = k;
    R.y = arena.alloc_poisoned(M * N);
    R.partials = mode == Mode::scale_up ? arena.alloc<float>(P * num_tiles * M * kTileN) : nullptr;
    if (mode == Mode::scale_out) {
      R.stage = arena.alloc<float>(P * sf);
      R.slices = arena.alloc<float>(P * sf);
      R.gathered = arena.alloc<float>(P * sf);
    }
    R.partial = mode == Mode::unfused ? arena.alloc<float>(M * N) : nullptr;
  }

  GemvParams p{};
  p.P = P;
  p.M = M;
  p.N = N;
  p.num_tiles = num_tiles;
  p.tiles = arena.upload(tiles);
  p.compute = arena.upload(compute);
  p.mine = arena.upload(mine);
  p.mine_begin = arena.upload(mine_begin);
  p.chunk_off = arena.upload(chunk_off);
  p.chunk_len = arena.upload(chunk_len);
  p.slice_floats = sf;
  p.ranks = arena.upload(ranks);
  p.claims = arena.alloc_zeroed<unsigned long long>(P);
  p.sync = ctx.view();

  std::vector<std::uint64_t> part_target(static_cast<std::size_t>(P) * std::max(num_tiles, 1), 0),
      y_target(P, 0), done_target(static_cast<std::size_t>(P * P), 0), arrive_target(P, 0),
      rdone_target(P, 0), gather_target(P, 0);
  if (mode == Mode::scale_up) {
    p.part_slot = ctx.slots("gemv.partial", std::max(num_tiles, 1));
    p.y_slot = ctx.slots("gemv.y", 1);
    for (int me = 0; me < P; ++me) {
      for (int i = mine_begin[me]; i < mine_begin[me + 1]; ++i)
        part_target[static_cast<std::size_t>(me) * num_tiles + mine[i]] =
            ctx.expect(me, p.part_slot + mine[i], P);
      y_target[me] = ctx.expect(me, p.y_slot, num_tiles);
    }
  } else if (mode == Mode::scale_out) {
    p.done_slot = ctx.slots("gemv.slice_done", P);
    p.arrive_slot = ctx.slots("gemv.slice_arrive", 1);
    p.rdone_slot = ctx.slots("gemv.reduced_done", 1);
    p.gather_slot = ctx.slots("gemv.gathered", 1);
    for (int me = 0; me < P; ++me) {
      for (int j = 0; j < P; ++j)
        done_target[me * P + j] =
            ctx.expect(me, p.done_slot + j, static_cast<std::uint64_t>(pl.tiles_of[j]));
      arrive_target[me] = ctx.expect(me, p.arrive_slot, P);
      rdone_target[me] = ctx.expect(me, p.rdone_slot, mine_begin[me + 1] - mine_begin[me]);
      gather_target[me] = ctx.expect(me, p.gather_slot, P);
    }
  }
  p.part_target = arena.upload(part_target);
  p.y_target = arena.upload(y_target);
  p.done_target = arena.upload(done_target);
  p.arrive_target = arena.upload(arrive_target);
  p.rdone_target = arena.upload(rdone_target);
  p.gather_target = arena.upload(gather_target);

  // Grids before the timed region: the occupancy queries are host work.
  int g1 = 1, g2 = 1;
  if (mode == Mode::scale_up) {
    g1 = ctx.blocks_per_rank(gemv_scale_up, num_tiles);
  } else if (mode == Mode::scale_out) {
    g1 = ctx.blocks_per_rank(gemv_scale_out, std::max(num_tiles, P));
  } else {
    g1 = ctx.blocks_per_rank(gemv_partial, num_tiles);
    const std::int64_t per_rank = (M * N + P - 1) / P;
    g2 = ctx.blocks_per_rank(gemv_allreduce_direct, (per_rank + kThreads - 1) / kThreads);
  }
  ctx.start_timing();
  if (mode == Mode::scale_up) {
    gemv_scale_up<<<dim3(g1, P), kThreads, 0, ctx.stream()>>>(p);
  } else if (mode == Mode::scale_out) {
    gemv_scale_out<<<dim3(g1, P), kThreads, 0, ctx.stream()>>>(p);
  } else {
    gemv_partial<<<dim3(g1, P), kThreads, 0, ctx.stream()>>>(p);
    FC_CHECK_GPU(gpuGetLastError());
    gemv_allreduce_direct<<<dim3(g2, P), kThreads, 0, ctx.stream()>>>(p);
  }
  ctx.stop_timing();
  ctx.finish(op);

  for (int r = 0; r < P; ++r)
    download_rows(ranks[r].y, M, N, static_cast<float*>(all[r].y.data()),
                  M > 0 ? all[r].y.stride(0) : N);
}

}  // namespace fusedcoll::gpu::ops
