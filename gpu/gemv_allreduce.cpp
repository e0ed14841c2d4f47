// GemvAllReduce on the GPU. The fused kernels are detail/gemv_kernel.hpp's bodies, the ones the
// emulator runs, written once against the public device API (docs/kernels.md, "GemvAllReduce on
// the public API") and run here over the GPU's workgroup (gpu/kernel_wg.hpp): what is put where,
// which signal publishes it and who waits for what is that one copy. This file supplies the
// GPU's arithmetic of a tile (`GpuMath`), sizes the buffers and signals, and launches.
//
// GpuMath keeps the kernels' memory access of before the port: a tile's partial is one thread per
// output element (m, n) folding its whole K range in increasing k with separately rounded
// products and sums (ref/'s order), W and x passing through shared memory in chunks of kChunkK
// only to coalesce the loads; owners fold the P partials in rank order. So the bits are ref/'s.
// Puts are the workgroup's block copies (16-byte loads and stores), waits poll relaxed, and the
// fused kernels keep their launch bounds of 4 blocks per SM.
//
// - scale_up : a block's partial goes into its staging tile, then to the owner's partials[me][t]
//              with 'gemv.partial'[t]; the owner's block folds all P in rank order and puts the
//              tile into every rank's symmetric y, bumping 'gemv.y' there; block 0 of each rank
//              waits for all tiles of y, which the host downloads.
// - scale_out: partials fill the staging slice of their owner; the block completing a slice
//              (done-mask 'gemv.slice_done'[owner]) puts it to the owner's slices[me] with
//              'gemv.slice_arrive'; owners reduce their tiles into their reduced chunk, whose last
//              block ('gemv.reduced_done') puts it to every rank's gathered[owner] with
//              'gemv.gathered'; every rank unpacks into y.
// - unfused  : the GEMV body writes the whole partial [M, N]; then the direct AllReduce kernel:
//              rank j's blocks fold chunk_of(M*N, P, j) in rank order and write it to every y.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/detail/gemv_kernel.hpp"
#include "fusedcoll/detail/gemv_plan.hpp"
#include "gpu/collectives.hpp"
#include "gpu/gemv_setup.hpp"
#include "gpu/kernel_wg.hpp"
#include "gpu/ops.hpp"
#if defined(FC_GPU_PROCESS)
#include "gpu/process.hpp"
#endif

namespace fusedcoll::gpu::ops {
namespace {

namespace plan = fusedcoll::detail::gemv;
using plan::GemvKernelParams;

constexpr int kTileN = static_cast<int>(plan::kTileN);  // int: the device index arithmetic
constexpr int kChunkK = 64;
constexpr int kMaxRows = 16;  // kMaxGemvRows
static_assert(kMaxRows * kTileN <= 4 * kThreads, "a thread holds at most 4 outputs of a tile");
/// The fused kernels' registers leave room for 4 resident blocks per SM (FC_LAUNCH_BOUNDS): at
/// 80 registers they fitted 3 and computed their tiles in more rounds than the unfused kernel.
constexpr int kFusedBlocksPerSm = 4;

/// out[m * ld + c] = sum over k of x[m][k] * w[n0 + c][k], c < width, m < M.
__device__ void gemv_tile(const float* w, std::int64_t ldw, const float* x, std::int64_t ldx,
                          std::int64_t K, std::int64_t M, std::int64_t n0, std::int64_t width,
                          float* out, std::int64_t ld) {
  __shared__ float sw[kTileN][kChunkK + 1];  // +1: threads of a warp read different rows
  __shared__ float sx[kMaxRows][kChunkK];
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int tid = static_cast<int>(threadIdx.x);
  for (std::int64_t k0 = 0; k0 < K; k0 += kChunkK) {
    const int kc = static_cast<int>(K - k0 < kChunkK ? K - k0 : kChunkK);
    __syncthreads();  // the previous chunk (or tile) is no longer being read
    for (int e = tid; e < kTileN * kChunkK; e += kThreads) {
      const int c = e / kChunkK, kk = e % kChunkK;
      sw[c][kk] = c < width && kk < kc ? port::load_ro(w + (n0 + c) * ldw + k0 + kk) : 0.0f;
    }
    for (int e = tid; e < M * kChunkK; e += kThreads) {
      const int m = e / kChunkK, kk = e % kChunkK;
      sx[m][kk] = kk < kc ? port::load_ro(x + m * ldx + k0 + kk) : 0.0f;
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

/// The bodies' arithmetic on the GPU (detail/gemv_kernel.hpp's `Math`). copy_rows and add_rows
/// give each element to the same thread, so a fold's copy then adds need no barrier between them.
struct GpuMath {
  template <class Wg>
  __device__ static void tile(Wg&, const GemvKernelParams& p, const plan::Tile& t, float* out,
                              std::int64_t ld) {
    gemv_tile(p.w, p.ldw, p.x, p.ldx, p.k, p.m, t.n0, t.n1 - t.n0, out, ld);
  }
  template <class Wg>
  __device__ static void copy_rows(Wg& wg, float* dst, std::int64_t dst_ld, const float* src,
                                   std::int64_t src_ld, std::int64_t rows, std::int64_t cols) {
    if (cols > 0)
      for (std::int64_t e = wg.thread_rank(); e < rows * cols; e += wg.num_threads())
        dst[(e / cols) * dst_ld + e % cols] = src[(e / cols) * src_ld + e % cols];
  }
  template <class Wg>
  __device__ static void add_rows(Wg& wg, float* acc, std::int64_t acc_ld, const float* v,
                                  std::int64_t v_ld, std::int64_t rows, std::int64_t cols) {
    if (cols > 0)
      for (std::int64_t e = wg.thread_rank(); e < rows * cols; e += wg.num_threads()) {
        float& a = acc[(e / cols) * acc_ld + e % cols];
        a = reduce_sum(a, v[(e / cols) * v_ld + e % cols]);
      }
  }
};

using ScaleUp = plan::GemvScaleUp<GpuMath>;
using ScaleOut = plan::GemvScaleOut<GpuMath>;
using Partial = plan::GemvPartial<GpuMath>;

/// The unfused mode's AllReduce (direct) over every rank's partial [M, N].
struct DirectParams {
  int P;
  std::int64_t count;
  const float* const* partial;  // [P]
  float* const* y;              // [P]
};

/// Unfused kernel 2: AllReduce(sum, direct) over M*N elements; rank j owns chunk_of(M*N, P, j).
__global__ void gemv_allreduce_direct(DirectParams p) {
  const int me = static_cast<int>(blockIdx.y), P = p.P;
  const std::int64_t count = p.count, base = count / P, rem = count % P;
  const std::int64_t begin = me * base + (me < rem ? me : rem), len = base + (me < rem ? 1 : 0);
  for (std::int64_t e = begin + blockIdx.x * blockDim.x + threadIdx.x; e < begin + len;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float acc = p.partial[0][e];
    for (int src = 1; src < P; ++src) acc = reduce_sum(acc, p.partial[src][e]);
    for (int j = 1; j <= P; ++j) p.y[(me + j) % P][e] = acc;
  }
}

}  // namespace

void gemv_allreduce(Context& ctx, std::span<const GemvAllReduceArgs> all, Mode mode) {
  detail::check_mode(mode);
  const int P = ctx.world_size();
  // Process mode: `all` holds every rank's agreed fields, this rank's call in full (agree_world);
  // this process launches for its own rank only.
  const int me_only = ctx.me();
  if (me_only < 0) check_world(all, P);
  const int lo = me_only < 0 ? 0 : me_only, hi = me_only < 0 ? P : me_only + 1, here = hi - lo;
  Process* process = ctx.process();
  const std::string op = std::string("gemv_allreduce ") + to_string(mode);
  ctx.begin_call(op);
  const std::int64_t M = all[0].m, N = all[0].n;

  // Each rank's plan: the tiles, chunks and slice size are the same for all; the tile order and
  // own tiles are the rank's.
  std::vector<plan::Plan> plans;
  for (int r = 0; r < P; ++r) plans.emplace_back(all[r], r, P);
  const plan::Plan& pl = plans[0];
  const int num_tiles = pl.num_tiles();
  const gemv_setup::Sizes size = gemv_setup::sizes(pl, mode);

  Arena arena;
  auto upload = [&](const auto& v) { return arena.upload(v); };
  const plan::Tile* tiles = arena.upload(pl.tiles);
  const Chunk* chunks = arena.upload(pl.chunks);
  std::vector<GemvKernelParams> ps;
  for (int r = lo; r < hi; ++r) {
    const plan::Plan& of = plans[static_cast<std::size_t>(r)];
    ps.push_back(gemv_setup::params_of(of, arena.upload(pack<float>(all[r].w, N, of.k)),
                                       arena.upload(pack<float>(all[r].x, M, of.k)), tiles, chunks,
                                       upload));
  }
  auto mine = [&](int r) -> GemvKernelParams& { return ps[static_cast<std::size_t>(r - lo)]; };

  // Buffers: one per rank of this launch (single mode: every rank's on this GPU; process mode:
  // this rank's only); the two that peers put into (`shared`) in process mode at the same offsets
  // of every rank's heap, each peer's as this rank reaches it (IPC mapping or shadow).
  auto local = [&](std::int64_t floats, bool poisoned = false) {
    std::vector<float*> v(static_cast<std::size_t>(P), nullptr);
    for (int r = lo; r < hi; ++r)
      v[static_cast<std::size_t>(r)] =
          poisoned ? arena.alloc_poisoned(floats) : arena.alloc<float>(floats);
    return v;
  };
  std::vector<float*> shared[2];
  BufferRoute route[2];
  if (mode != Mode::unfused) {
    if (process == nullptr) {
      shared[0] = local(size.shared[0]);
      shared[1] = local(size.shared[1], mode == Mode::scale_up);  // scale_up's y, downloaded
    } else {
#if defined(FC_GPU_PROCESS)
      const gemv_setup::HeapPlace place = gemv_setup::heap_place(size);
      process->reserve(place.bytes);
      for (int b = 0; b < 2; ++b) {
        route[b] = BufferRoute{process->heap_id(), place.offset[b]};
        for (int q = 0; q < P; ++q)
          shared[b].push_back(reinterpret_cast<float*>(process->peer_heap(q) + place.offset[b]));
      }
      // scale_up's y is downloaded whole: poisoned first, then the peers are met so that none
      // stores into it before (nor into a heap some rank has not mapped yet).
      if (mode == Mode::scale_up)
        poison_device(shared[1][static_cast<std::size_t>(me_only)], size.shared[1]);
      process->exchange("", "to start " + op);
#endif
    }
  }

  // Grids before the timed region: the occupancy queries are host work.
  const KernelEntry up = entry_of<ScaleUp, kFusedBlocksPerSm>(),
                    out = entry_of<ScaleOut, kFusedBlocksPerSm>(), partial = entry_of<Partial>();
  LaunchBuffers buffers(P);
  std::vector<float*> y;  // where each rank's result is downloaded from
  int grid = 1;
  const gemv_setup::SignalSet sig = gemv_setup::reserve_signals(
      pl, mode, [&](const char* name, int n) { return ctx.slots(name, n); });
  if (mode == Mode::scale_up) {
    grid = ctx.fit_blocks(up.blocks_per_sm(), num_tiles);
    const Symmetric<float> parts = buffers.add(shared[0], size.shared[0], route[0]),
                           ysym = buffers.add(shared[1], size.shared[1], route[1]),
                           wgbuf = buffers.add(local(grid * size.wgbuf_per_wg),
                                               grid * size.wgbuf_per_wg);
    for (int r = lo; r < hi; ++r) {
      mine(r).partials = parts;
      mine(r).ysym = ysym;
      mine(r).wgbuf = wgbuf;
    }
    y = shared[1];
  } else if (mode == Mode::scale_out) {
    grid = ctx.fit_blocks(out.blocks_per_sm(), static_cast<std::int64_t>(pl.scale_out_items()));
    const Symmetric<float> slices = buffers.add(shared[0], size.shared[0], route[0]),
                           gathered = buffers.add(shared[1], size.shared[1], route[1]),
                           stage = buffers.add(local(size.stage), size.stage),
                           reduced = buffers.add(local(size.reduced), size.reduced);
    y = local(std::max<std::int64_t>(M * N, 1), true);
    for (int r = lo; r < hi; ++r) {
      GemvKernelParams& p = mine(r);
      p.y = y[static_cast<std::size_t>(r)];
      p.ldy = N;
      p.stage = stage;
      p.slices = slices;
      p.reduced = reduced;
      p.gathered = gathered;
    }
  } else {
    grid = ctx.fit_blocks(partial.blocks_per_sm(), num_tiles);
    // The partials; process mode's AllReduce reads this rank's from the host (below).
    const std::vector<float*> partials = local(size.partial);
    for (int r = lo; r < hi; ++r) {
      mine(r).y = partials[static_cast<std::size_t>(r)];
      mine(r).ldy = N;
    }
    y = process == nullptr ? local(size.partial, true) : partials;
  }
  for (int r = lo; r < hi; ++r)
    gemv_setup::set_signals(
        mine(r), plans[static_cast<std::size_t>(r)], mode, sig,
        [&](int slot, std::uint64_t n) { return ctx.expect(r, slot, n); }, upload);
  const KernelView view = buffers.view(ctx, arena, here, process != nullptr);
  const GemvKernelParams* dparams = arena.upload(ps);
  DirectParams direct{P, M * N, nullptr, nullptr};
  int direct_grid = 1;
  const bool direct_kernel = mode == Mode::unfused && process == nullptr;
  if (direct_kernel) {
    std::vector<const float*> from;
    for (int r = 0; r < P; ++r) from.push_back(mine(r).y);
    direct.partial = arena.upload(from);
    direct.y = arena.upload(y);
    const std::int64_t per_rank_count = (M * N + P - 1) / P;
    direct_grid =
        ctx.blocks_per_rank(gemv_allreduce_direct, (per_rank_count + kThreads - 1) / kThreads);
  }

  ctx.start_timing();
  if (mode == Mode::scale_up) {
    up.launch(grid, here, ctx.stream(), dparams, view);
  } else if (mode == Mode::scale_out) {
    out.launch(grid, here, ctx.stream(), dparams, view);
  } else {
    partial.launch(grid, here, ctx.stream(), dparams, view);
    if (direct_kernel)
      gemv_allreduce_direct<<<dim3(direct_grid, P), kThreads, 0, ctx.stream()>>>(direct);
  }
  ctx.stop_timing();
  ctx.finish(op);

  if (mode == Mode::unfused && process != nullptr) {
    // Process mode's unfused form: the partial, then process mode's AllReduce over it (the
    // collectives' own path: its plan, heap and puts), timed as both kernels together.
    const double gemv_ms = ctx.last_kernel_ms();
    std::vector<float> part(static_cast<std::size_t>(M * N)), result(part.size());
    if (!part.empty())
      FC_CHECK_GPU(gpuMemcpy(part.data(), y[static_cast<std::size_t>(me_only)],
                             part.size() * sizeof(float), gpuMemcpyDeviceToHost));
    const std::vector<AllReduceArgs> ar =
        gemv_setup::unfused_all_reduce(all[me_only], me_only, P, part.data(), result.data());
    coll::all_reduce(ctx, ar);
    ctx.add_kernel_ms(gemv_ms);
    if (M > 0 && N > 0)
      for (std::int64_t r = 0; r < M; ++r)
        std::memcpy(static_cast<float*>(all[me_only].y.data()) + r * all[me_only].y.stride(0),
                    result.data() + r * N, static_cast<std::size_t>(N) * sizeof(float));
    return;
  }
  for (int r = lo; r < hi; ++r)
    download_rows(y[static_cast<std::size_t>(r)], M, N, static_cast<float*>(all[r].y.data()),
                  M > 0 ? all[r].y.stride(0) : N);
}

}  // namespace fusedcoll::gpu::ops
