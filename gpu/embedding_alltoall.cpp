// EmbeddingAllToAll on the GPU: the emulator's kernels (emu/embedding_alltoall.cpp), ported
// tile for tile over the same plan (detail/embedding_plan.hpp), flattened into device arrays. A
// tile is (local table k, up to kBagBlock samples of ONE destination q's batch range); a block
// pools it with every output element (sample, d) on its own thread, folding the bag in increasing
// j with separately rounded products and sums, exactly ref/'s order, so the GPU gives ref/'s bits
// here, not only a tolerance.
//
// - scale_up : pool straight into q's output (a plain device pointer: every rank's buffers live on
//              this GPU), then bump 'emb.from'[me] on q. Block 0 of each rank waits for every
//              source's tile count before the kernel ends.
// - scale_out: remote tiles pool into the staging slice for q ([B_q, T_me, D]) and bump the local
//              done-mask 'emb.done'[q]. The slice's put is split into pieces of kPutPiece floats
//              queued after the tiles: a block that claims a piece waits for the done-mask, copies
//              the piece into q's receive buffer and counts it on 'emb.sent'[q]; the piece that
//              completes the slice signals 'emb.arrive'[me] on q once (the emulator's one
//              put_signal per slice, with the copy spread over the grid instead of one block).
//              Then every block waits for each source's slice and unpacks its share into
//              table-id order.
//
// Every tile kernel claims its tiles from one counter per rank and launch (block_claim), as the
// emulator's persistent kernels do.
// - unfused  : kernel 1 pools every local bag into L [B, T_me, D]; kernel 2 (after the kernel
//              boundary, so no signals) copies every rank's rows of every owner's L into place.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusedcoll/detail/embedding_plan.hpp"
#include "gpu/ops.hpp"
#if defined(FC_GPU_PROCESS)
#include "gpu/process.hpp"
#endif

namespace fusedcoll::gpu::ops {
namespace {

namespace plan = fusedcoll::detail::embedding;

struct EmbTable {
  const float* w;             // [rows, D], packed
  const std::int64_t* off;    // [B + 1]
  const std::int64_t* idx;    // [offsets[B]]
  const float* psw;           // per-sample weights or null
};

/// Local table `k`, samples [i0, i1) of destination q's batch range (unfused: of the global batch):
/// the plan's tile, copied to the device as is.
using EmbTile = plan::Tile;

struct EmbRank {
  const EmbTable* tables;  // [T_me]
  float* out;              // [B_me, T, D]
  float* stage;            // [B, T_me, D]: scale_out slices (q's at start_q), unfused L
  float* recv;             // [B_me, T, D] as slices of every source, source-major
};

struct EmbParams : ProcessFields {
  int P;
  std::int64_t T, D;
  int mean;
  const std::int64_t* batch;          // [P]
  const std::int64_t* start;          // [P + 1]
  const std::int64_t* tp;             // [P]
  const std::int64_t* tables_before;  // [P + 1]
  const std::int64_t* ids;            // [T]: p's k-th table is ids[tables_before[p] + k]
  const int* owner;                   // [T]
  const std::int64_t* local_k;        // [T]: position of t among its owner's tables
  const EmbRank* ranks;               // [P]
  const EmbTile* tiles;               // every rank's tiles, rank-major
  const std::int64_t* tile_begin;     // [P + 1]
  const PutPiece* pieces;             // scale_out: every rank's slice pieces, rank-major
  const std::int64_t* piece_begin;    // [P + 1]
  unsigned long long* claims;         // [P]: each rank's work-queue counter, zeroed per call
  SyncView sync;
  int from, done, arrive, sent;       // slot bases
  const std::uint64_t* wait_target;   // [P][P]: rank me's target for source p's slot
  const std::uint64_t* done_target;   // [P][P]: rank me's done-mask target for destination q
  const std::uint64_t* sent_target;   // [P][P]: rank me's piece count target for destination q
};

/// Pools bags [b0, b0 + rows) of one table into dst (row stride ld): one thread per element.
__device__ void pool_rows(const EmbTable& tb, std::int64_t D, int mean, std::int64_t b0,
                          std::int64_t rows, float* dst, std::int64_t ld) {
  for (std::int64_t e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const std::int64_t r = e / D, d = e % D, b = b0 + r;
    const std::int64_t j0 = tb.off[b], j1 = tb.off[b + 1];
    float acc = 0.0f;
    if (tb.psw != nullptr) {
      for (std::int64_t j = j0; j < j1; ++j)
        acc = port::add(acc, port::mul(tb.psw[j], tb.w[tb.idx[j] * D + d]));
    } else {
      for (std::int64_t j = j0; j < j1; ++j) acc = port::add(acc, tb.w[tb.idx[j] * D + d]);
    }
    if (mean != 0 && j1 > j0) acc = port::div(acc, static_cast<float>(j1 - j0));
    dst[r * ld + d] = canonical_nan(acc);
  }
}

__global__ void emb_scale_up(EmbParams p) {
  const int me = rank_of(p), P = p.P;
  const EmbRank& R = p.ranks[me];
  const std::int64_t T = p.T, D = p.D;
  const std::int64_t nt = p.tile_begin[me + 1] - p.tile_begin[me];
  for (std::int64_t i = block_claim(p.claims + me); i < nt; i = block_claim(p.claims + me)) {
    const EmbTile tl = p.tiles[p.tile_begin[me] + i];
    const std::int64_t t = p.ids[p.tables_before[me] + tl.k];
    float* dst = p.ranks[tl.q].out + tl.i0 * T * D + t * D;
    pool_rows(R.tables[tl.k], D, p.mean, p.start[tl.q] + tl.i0, tl.i1 - tl.i0, dst, T * D);
    // A proxied destination: the rows went into this rank's shadow of its output; each row
    // travels as a put (rows of one table are not contiguous in the output), then the signal.
    if (proxied(p.sync, tl.q))
      for (std::int64_t r = 0; r < tl.i1 - tl.i0; ++r)
        block_put(p.sync, me, tl.q, p.heap,
                  p.out_off + static_cast<std::uint64_t>(((tl.i0 + r) * T + t) * D) * sizeof(float),
                  dst + r * T * D, static_cast<std::uint64_t>(D) * sizeof(float));
    block_signal(p.sync, tl.q, p.from + me, 1, me);
  }
  if (blockIdx.x == 0)
    for (int j = 1; j <= P; ++j) {
      const int src = (me + j) % P;
      if (!block_wait(p.sync, me, p.from + src, p.wait_target[me * P + src])) return;
    }
}

__global__ void emb_scale_out(EmbParams p) {
  const int me = rank_of(p), P = p.P;
  const EmbRank& R = p.ranks[me];
  const std::int64_t T = p.T, D = p.D, tpm = p.tp[me];
  const std::int64_t nt = p.tile_begin[me + 1] - p.tile_begin[me];
  const std::int64_t items = nt + p.piece_begin[me + 1] - p.piece_begin[me];
  // Tiles first, then the pieces: a block waiting for a slice's done-mask only waits for tiles
  // already claimed by running blocks, so the queue cannot deadlock.
  for (std::int64_t i = block_claim(p.claims + me); i < items; i = block_claim(p.claims + me)) {
    if (i >= nt) {
      const PutPiece pc = p.pieces[p.piece_begin[me] + i - nt];
      if (!block_wait(p.sync, me, p.done + pc.q, p.done_target[me * P + pc.q])) return;
      const float* slice = R.stage + p.start[pc.q] * tpm * D;  // [B_q, T_me, D]
      const std::int64_t at = p.batch[pc.q] * p.tables_before[me] * D + pc.off;
      if (proxied(p.sync, pc.q))  // straight from the staged slice, which stays until the call ends
        block_put(p.sync, me, pc.q, p.heap,
                  p.recv_off + static_cast<std::uint64_t>(at) * sizeof(float), slice + pc.off,
                  static_cast<std::uint64_t>(pc.len) * sizeof(float));
      else
        block_copy(p.ranks[pc.q].recv + at, slice + pc.off, pc.len);
      // The piece that completes the slice signals: every other piece's put was posted before
      // its block's add on the done-counter, so before this signal in the proxy's queue.
      if (block_done_is_last(slot_ptr(p.sync, me, p.sent + pc.q), p.sent_target[me * P + pc.q]))
        block_signal(p.sync, pc.q, p.arrive + me, 1, me);
      continue;
    }
    const EmbTile tl = p.tiles[p.tile_begin[me] + i];
    const std::int64_t b0 = p.start[tl.q] + tl.i0, rows = tl.i1 - tl.i0;
    if (tl.q == me) {
      const std::int64_t t = p.ids[p.tables_before[me] + tl.k];
      pool_rows(R.tables[tl.k], D, p.mean, b0, rows, R.out + tl.i0 * T * D + t * D, T * D);
      continue;
    }
    float* slice = R.stage + p.start[tl.q] * tpm * D;  // [B_q, T_me, D]
    pool_rows(R.tables[tl.k], D, p.mean, b0, rows, slice + (tl.i0 * tpm + tl.k) * D, tpm * D);
    block_signal(p.sync, me, p.done + tl.q, 1, me);
  }
  // Unpack: the grid's threads each copy elements (D is often below the block size, so a row per
  // block would leave most threads idle).
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                     stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (int j = p.unpack_self != 0 ? 0 : 1; j < P; ++j) {
    const int src = (me + j) % P;
    const std::int64_t tps = p.tp[src], bm = p.batch[me];
    if (tps == 0 || bm == 0) continue;  // that source sends us no slice
    const float* block = R.stage + p.start[me] * tpm * D;  // [B_me, T_me, D] of L
    if (src != me) {
      if (!block_wait(p.sync, me, p.arrive + src, p.wait_target[me * P + src])) return;
      block = R.recv + bm * p.tables_before[src] * D;
    }
    for (std::int64_t e = first; e < bm * tps * D; e += stride) {
      const std::int64_t row = e / D, d = e % D, i = row / tps, k = row % tps;
      R.out[i * T * D + p.ids[p.tables_before[src] + k] * D + d] = block[e];
    }
  }
}

/// Unfused kernel 1: every local bag of the global batch into L [B, T_me, D].
__global__ void emb_pool(EmbParams p) {
  const int me = rank_of(p);
  const EmbRank& R = p.ranks[me];
  const std::int64_t D = p.D, tpm = p.tp[me];
  const std::int64_t nt = p.tile_begin[me + 1] - p.tile_begin[me];
  for (std::int64_t i = block_claim(p.claims + me); i < nt; i = block_claim(p.claims + me)) {
    const EmbTile tl = p.tiles[p.tile_begin[me] + i];
    pool_rows(R.tables[tl.k], D, p.mean, tl.i0, tl.i1 - tl.i0, R.stage + (tl.i0 * tpm + tl.k) * D,
              tpm * D);
  }
}

/// Unfused kernel 2, the All-to-All and permutation: output row (i, t) of rank me is row
/// (start_me + i, local_k[t]) of owner[t]'s L.
__global__ void emb_gather(EmbParams p) {
  const int me = rank_of(p);
  const EmbRank& R = p.ranks[me];
  const std::int64_t T = p.T, D = p.D, n = p.batch[me] * T * D;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = e / D, d = e % D, i = row / T, t = row % T;
    const int owner = p.owner[t];
    R.out[e] = p.ranks[owner].stage[((p.start[me] + i) * p.tp[owner] + p.local_k[t]) * D + d];
  }
}

}  // namespace

void embedding_alltoall(Context& ctx, std::span<const EmbeddingAllToAllArgs> all, Mode mode) {
  detail::check_mode(mode);
  const int P = ctx.world_size();
  // Process mode: `all` holds every rank's global fields, this rank's call in full (agree_world).
  const int me_only = ctx.me();
  if (me_only < 0) check_world(all, P);
  const std::string op = std::string("embedding_alltoall ") + to_string(mode);
  // Process mode's unfused All-to-All pushes: the single mode's gather reads the owners' L, which
  // no proxied peer can. After the pooling kernel, the scale_out kernel with no tiles puts every
  // slice of L (the scale_out staging layout, [B_q, T_me, D] at start_q) to its destination and
  // unpacks, this rank's own slice from L: compute, then the collective, with no overlap.
  const bool push_unfused = me_only >= 0 && mode == Mode::unfused;
  ctx.begin_call(op);
  const EmbeddingAllToAllArgs& a0 = all[0];
  const std::int64_t T = static_cast<std::int64_t>(a0.owner.size()), D = a0.dim;

  // The plan's global parts (layouts, counts) are the same for every rank; its tile list is
  // rank me's own, so each rank's list comes from its own plan.
  const plan::Plan pl(a0, 0, P);
  const std::vector<std::int64_t>& batch = pl.batch;
  std::vector<std::int64_t> ids;  // p's k-th table at ids[tables_before[p] + k]
  for (const std::vector<std::int64_t>& of : pl.ids) ids.insert(ids.end(), of.begin(), of.end());
  const std::int64_t max_b = *std::max_element(batch.begin(), batch.end());
  const std::int64_t max_tp = *std::max_element(pl.tp.begin(), pl.tp.end());

  Arena arena;
  std::vector<EmbRank> ranks(P);
  // Process mode: the buffers in the symmetric heap (carve_heap).
  std::size_t recv_off = 0;
  Process* process = ctx.process();
#if defined(FC_GPU_PROCESS)
  if (process != nullptr)
    recv_off = carve_heap(*process, ranks, pl.recv_bytes(), pl.recv_bytes(), pl.stage_bytes(),
                          batch[me_only] * T * D, op);
#endif
  for (int r = 0; r < P; ++r) {
    if (process != nullptr && r != me_only) continue;  // a peer's tables stay with the peer
    std::vector<EmbTable> tables;
    for (const EmbeddingTableShard& sh : all[r].local_tables) {
      const std::int64_t rows = sh.weights.size(0);
      EmbTable tb{};
      tb.w = arena.upload(pack<float>(sh.weights, rows, D));
      tb.off = arena.upload(pack_indices(sh.offsets));
      tb.idx = arena.upload(pack_indices(sh.indices));
      tb.psw = sh.per_sample_weights.data() == nullptr
                   ? nullptr
                   : arena.upload(pack<float>(sh.per_sample_weights, 1, sh.per_sample_weights.size(0)));
      tables.push_back(tb);
    }
    ranks[r].tables = arena.upload(tables);
    if (process != nullptr) continue;
    ranks[r].out = arena.alloc_poisoned(batch[r] * T * D);
    ranks[r].stage = arena.alloc<float>(pl.stage_floats());
    ranks[r].recv = arena.alloc<float>(batch[r] * T * D);
  }

  // Tiles, rank-major: the fused list or the unfused pooling list of each rank's plan.
  std::vector<EmbTile> tiles;
  std::vector<std::int64_t> tile_begin(P + 1, 0);
  std::int64_t most = 0;
  for (int me = 0; me < P; ++me) {
    const plan::Plan mine(a0, me, P);
    const std::vector<EmbTile> of = mode == Mode::unfused ? mine.unfused_tiles() : mine.fused_tiles();
    tiles.insert(tiles.end(), of.begin(), of.end());
    tile_begin[me + 1] = static_cast<std::int64_t>(tiles.size());
    most = std::max(most, tile_begin[me + 1] - tile_begin[me]);
  }

  // scale_out: each rank's slice puts in pieces, destinations in the plan's remote-first order.
  std::vector<PutPiece> pieces;
  std::vector<std::int64_t> piece_begin(P + 1, 0);
  std::vector<std::int64_t> piece_count(static_cast<std::size_t>(P * P), 0);
  std::int64_t most_items = most;
  if (mode == Mode::scale_out || push_unfused)
    for (int me = 0; me < P; ++me) {
      for (int q : remote_first(me, P)) {
        if (q == me || pl.tiles(me, q) == 0) continue;
        piece_count[me * P + q] = append_pieces(pieces, q, pl.slice_floats(me, q));
      }
      piece_begin[me + 1] = static_cast<std::int64_t>(pieces.size());
      most_items = std::max(most_items, tile_begin[me + 1] - tile_begin[me] + piece_begin[me + 1] -
                                            piece_begin[me]);
    }

  EmbParams p{};
  p.P = P;
  p.T = T;
  p.D = D;
  p.mean = a0.pooling == PoolingMode::mean ? 1 : 0;
  p.batch = arena.upload(batch);
  p.start = arena.upload(pl.start);
  p.tp = arena.upload(pl.tp);
  p.tables_before = arena.upload(pl.tables_before);
  p.ids = arena.upload(ids);
  p.owner = arena.upload(pl.owner);
  p.local_k = arena.upload(pl.local_k);
  p.ranks = arena.upload(ranks);
  p.tiles = arena.upload(tiles);
  p.tile_begin = arena.upload(tile_begin);
  p.pieces = arena.upload(pieces);
  p.piece_begin = arena.upload(piece_begin);
  p.claims = arena.alloc_zeroed<unsigned long long>(P);
  p.sync = ctx.view();
  static_cast<ProcessFields&>(p) = process_fields(ctx, recv_off);

  std::vector<std::uint64_t> wait_target(static_cast<std::size_t>(P * P), 0),
      done_target(static_cast<std::size_t>(P * P), 0), sent_target(static_cast<std::size_t>(P * P), 0);
  if (mode == Mode::scale_up) {
    p.from = ctx.slots("emb.from", P);
    for (int me = 0; me < P; ++me)
      for (int src = 0; src < P; ++src)
        wait_target[me * P + src] = ctx.expect(me, p.from + src, pl.tiles(src, me));
  } else if (mode == Mode::scale_out || push_unfused) {
    p.done = ctx.slots("emb.done", P);
    p.arrive = ctx.slots("emb.arrive", P);
    p.sent = ctx.slots("emb.sent", P);
    for (int me = 0; me < P; ++me)
      for (int o = 0; o < P; ++o) {
        if (o == me) continue;
        done_target[me * P + o] = ctx.expect(me, p.done + o, push_unfused ? 0 : pl.tiles(me, o));
        sent_target[me * P + o] =
            ctx.expect(me, p.sent + o, static_cast<std::uint64_t>(piece_count[me * P + o]));
        // A source sends a slice (one signal) exactly when it has tiles for us.
        wait_target[me * P + o] = ctx.expect(me, p.arrive + o, pl.tiles(o, me) > 0 ? 1 : 0);
      }
  }
  p.wait_target = arena.upload(wait_target);
  p.done_target = arena.upload(done_target);
  p.sent_target = arena.upload(sent_target);

  // Grids before the timed region: the occupancy queries are host work.
  const std::int64_t threads = kThreads;
  const std::int64_t elem_blocks = (max_b * T * D + kThreads - 1) / kThreads;
  int g1 = 1, g2 = 1;
  if (mode == Mode::scale_up) {
    g1 = ctx.blocks_per_rank(emb_scale_up, most);
  } else if (mode == Mode::scale_out) {
    // Every block unpacks received slices too, so size for both phases.
    g1 = ctx.blocks_per_rank(
        emb_scale_out, std::max(most_items, (max_b * max_tp * D + kThreads - 1) / kThreads));
  } else {
    g1 = ctx.blocks_per_rank(emb_pool, most);
    g2 = push_unfused ? ctx.blocks_per_rank(emb_scale_out, std::max(most_items - most, elem_blocks))
                      : ctx.blocks_per_rank(emb_gather, elem_blocks);
  }
  const EmbParams push = push_unfused ? push_exchange(p, arena, P) : p;
  const int gy = process != nullptr ? 1 : P;  // process mode: this rank's blocks only
  ctx.start_timing();
  if (mode == Mode::scale_up) {
    emb_scale_up<<<dim3(g1, gy), threads, 0, ctx.stream()>>>(p);
  } else if (mode == Mode::scale_out) {
    emb_scale_out<<<dim3(g1, gy), threads, 0, ctx.stream()>>>(p);
  } else {
    emb_pool<<<dim3(g1, gy), threads, 0, ctx.stream()>>>(p);
    FC_CHECK_GPU(gpuGetLastError());
    if (push_unfused)
      emb_scale_out<<<dim3(g2, gy), threads, 0, ctx.stream()>>>(push);
    else
      emb_gather<<<dim3(g2, gy), threads, 0, ctx.stream()>>>(p);
  }
  ctx.stop_timing();
  ctx.finish(op);

  for (int r = 0; r < P; ++r) {
    if (process != nullptr && r != me_only) continue;
    const TensorView& o = all[r].output;
    // [B_r, T, D] with unit inner stride: rows of D floats at (i, t); copy per (i, t) row when
    // the view is padded, else in one piece.
    if (batch[r] == 0 || T == 0 || D == 0) continue;
    if (o.stride(1) == D && o.stride(0) == T * D) {
      download_rows(ranks[r].out, batch[r] * T, D, static_cast<float*>(o.data()), D);
    } else {
      std::vector<float> host(static_cast<std::size_t>(batch[r] * T * D));
      download_rows(ranks[r].out, 1, batch[r] * T * D, host.data(), batch[r] * T * D);
      auto* dst = static_cast<float*>(o.data());
      for (std::int64_t i = 0; i < batch[r]; ++i)
        for (std::int64_t t = 0; t < T; ++t)
          std::copy_n(host.data() + (i * T + t) * D, D, dst + i * o.stride(0) + t * o.stride(1));
    }
  }
}

}  // namespace fusedcoll::gpu::ops
