// The GPU backend's collectives: one persistent kernel runs a plan (gpu/collective_plan.hpp) for
// every rank at once, grid = (G, P) with blockIdx.y = rank, each rank's steps dealt round-robin to
// its G blocks (all G x P resident: Context::blocks_per_rank), with the fused kernels' primitives:
// a step's targets are written by all threads, then block_signal publishes them (put, signal),
// and a step that reads scratch first block_waits for its slot (wait, read). The per-element work
// is gpu/collective_exec.hpp's, the code the normal suite runs on the CPU against ref/.
//
// Compressed calls agree on their scales first, as the emulator and the MPI backend do before any
// data moves: a kernel folds every rank's |values| into one amax table (atomicMax on the bits of
// |v|, which orders non-negative floats and puts NaN above inf), the host turns the table into
// scales with detail::make_plan (the code ref/ uses, so the scales are ref/'s; a NaN or infinite
// amax is InvalidArgument here, before any slot is expected or any data moves), and the plan's
// kernel runs with them. last_kernel_ms() covers both kernels and the round trip between them;
// the resolved plan's upload, like the host arguments', precedes it.
//
// Process mode (docs/gpu.md, "Process mode"; gpu/collective_process.hpp) runs the same kernel
// over this process's rank only (grid (G, 1), the rank passed in), on buffers carved from its
// symmetric heap: the plan is built with Reach::process, a target on a proxied peer is written
// into this process's shadow of that peer's heap and put from there before its signal, and the
// amax tables of a compressed call are merged across ranks on the host.

#include "gpu/collectives.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "fusedcoll/detail/validate.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "gpu/collective_exec.hpp"
#include "gpu/collective_plan.hpp"
#include "gpu/collective_process.hpp"
#if defined(FC_GPU_PROCESS)
#include "gpu/process.hpp"
#endif

namespace fusedcoll::gpu::coll {
namespace {

/// A block's transport for run_item (gpu/collective_exec.hpp): the runtime's primitives.
struct BlockIo {
  const SyncView& sync;
  int me;
  int heap;  // process mode: the symmetric heap's id (put records)
  __device__ bool wait(int slot, std::uint64_t target) {
    return block_wait(sync, me, slot, target);
  }
  __device__ void run(const Exec& x, const XStep& s) {
    run_step(x, s, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  }
  __device__ void put(int peer, std::uint64_t offset, const unsigned char* src,
                      std::uint64_t bytes) {
    block_put(sync, me, peer, heap, offset, src, bytes);
  }
  __device__ void signal(int rank, int slot) { block_signal(sync, rank, slot, 1, me); }
};

/// `me` >= 0 in process mode (this process's rank, grid (G, 1)); -1 in the single mode, where
/// blockIdx.y is the rank.
__global__ void collective_kernel(Exec x, SyncView sync, int me_only, int heap) {
  const int me = me_only >= 0 ? me_only : static_cast<int>(blockIdx.y);
  BlockIo io{sync, me, heap};
  const int begin = x.step_begin[me], count = x.step_begin[me + 1] - begin;
  for (int i = static_cast<int>(blockIdx.x); i < count; i += static_cast<int>(gridDim.x)) {
    const XStep s = x.steps[begin + i];  // a local copy: the step's loops reread its fields
    if (!run_item(x, s, io)) return;
  }
}

/// A run of f32 values whose |max| goes into table entry `entry`.
struct AmaxPiece {
  const float* p;
  std::int64_t n;
  std::int64_t entry;
};
constexpr std::int64_t kAmaxPiece = 16384;

__global__ void amax_kernel(const AmaxPiece* pieces, int count, unsigned int* table,
                            int predivide_by) {
  __shared__ unsigned int red[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  for (int i = static_cast<int>(blockIdx.x); i < count; i += static_cast<int>(gridDim.x)) {
    const AmaxPiece pc = pieces[i];
    unsigned int m = 0;
    for (std::int64_t e = tid; e < pc.n; e += blockDim.x) {
      float v = pc.p[e];
      if (predivide_by > 0) v = port::div(v, static_cast<float>(predivide_by));
      const unsigned int a = __float_as_uint(v) & 0x7FFFFFFFu;
      m = a > m ? a : m;
    }
    red[tid] = m;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
      if (tid < w) red[tid] = red[tid + w] > red[tid] ? red[tid + w] : red[tid];
      __syncthreads();
    }
    if (tid == 0) atomicMax(&table[pc.entry], red[0]);
    __syncthreads();
  }
}

using Bases = std::vector<std::array<unsigned char*, kNumBufs>>;

/// The agreed scales of a compressed call (docs/compression.md, "Scaling"), or a wire without
/// scales. The amax kernel folds `runs` (every rank's in the single mode; in process mode this
/// rank's, whose table the ranks then merge on the host). Throws InvalidArgument for a
/// non-finite amax (on every rank alike); nothing has been expected yet then.
codec::Wire agree_scales(Context& ctx, const Plan& plan, const std::vector<AmaxRun>& runs,
                         const Bases& base, Arena& arena) {
  codec::Wire w;
  w.format = static_cast<int>(plan.wire.format);
  w.saturate = plan.wire.overflow == Overflow::saturate;
  std::vector<float> table = detail::empty_amax(plan.wire);
  if (plan.amax_entries > 0) {
    const std::int64_t B = resolved_scaling(plan.wire) == Scaling::per_block ? plan.wire.block : 0;
    std::vector<AmaxPiece> pieces;
    for (const AmaxRun& run : runs) {
      const auto* x = reinterpret_cast<const float*>(base[run.rank][0] + run.offset);
      for (std::int64_t i = 0; i < run.n;) {
        const std::int64_t idx = run.index0 + i;
        std::int64_t end = std::min(run.n, i + kAmaxPiece);
        if (B > 0) end = std::min(end, (idx / B + 1) * B - run.index0);
        pieces.push_back({x + i, end - i, B > 0 ? idx / B : 0});
        i = end;
      }
    }
    unsigned int* dev = arena.alloc<unsigned int>(plan.amax_entries);
    FC_CHECK_GPU(
        gpuMemsetAsync(dev, 0, static_cast<std::size_t>(plan.amax_entries) * 4, ctx.stream()));
    if (!pieces.empty()) {
      const AmaxPiece* dp = arena.upload(pieces);
      const int g = static_cast<int>(std::min<std::int64_t>(std::ssize(pieces), ctx.sms() * 4L));
      amax_kernel<<<g, kThreads, 0, ctx.stream()>>>(dp, static_cast<int>(pieces.size()), dev,
                                                    plan.amax_predivide ? plan.P : 0);
      FC_CHECK_GPU(gpuGetLastError());
    }
    std::vector<std::uint32_t> bits(static_cast<std::size_t>(plan.amax_entries));
    FC_CHECK_GPU(gpuStreamSynchronize(ctx.stream()));
    FC_CHECK_GPU(gpuMemcpy(bits.data(), dev, bits.size() * 4, gpuMemcpyDeviceToHost));
    if (ctx.me() >= 0) {
#if defined(FC_GPU_PROCESS)
      table = merge_amax(
          ctx.process()->exchange(amax_bytes(bits), "to agree on the scales of " + plan.name));
#endif
    } else {
      table.resize(bits.size());
      for (std::size_t k = 0; k < bits.size(); ++k) table[k] = codec::float_of(bits[k]);
    }
  }
  const detail::WirePlan wp = detail::make_plan(plan.wire, table, plan.headroom);
  w.block = wp.block;
  if (!wp.scales.empty()) w.scales = arena.upload(wp.scales);
  return w;
}

/// The resolved plan's four (or, with puts, five) arrays in one device buffer, each at a
/// 16-byte-aligned offset, uploaded in one copy.
void upload_exec(Exec& x, const Resolved& rs, const std::vector<XPut>& puts, Arena& arena) {
  auto bytes_of = [](const auto& v) { return (v.size() * sizeof(v[0]) + 15) / 16 * 16; };
  const std::size_t o1 = bytes_of(rs.steps), o2 = o1 + bytes_of(rs.step_begin),
                    o3 = o2 + bytes_of(rs.sources), o4 = o3 + bytes_of(rs.targets),
                    total = o4 + bytes_of(puts);
  std::vector<exec::Unit16> host((total + 15) / 16);
  auto* h = reinterpret_cast<unsigned char*>(host.data());
  auto put = [&](std::size_t at, const auto& v) {
    if (!v.empty()) std::memcpy(h + at, v.data(), v.size() * sizeof(v[0]));
  };
  put(0, rs.steps);
  put(o1, rs.step_begin);
  put(o2, rs.sources);
  put(o3, rs.targets);
  put(o4, puts);
  auto* d = reinterpret_cast<unsigned char*>(arena.upload(host));
  x.steps = reinterpret_cast<const XStep*>(d);
  x.step_begin = reinterpret_cast<const int*>(d + o1);
  x.sources = reinterpret_cast<const XSource*>(d + o2);
  x.targets = reinterpret_cast<const XTarget*>(d + o3);
  x.puts = puts.empty() ? nullptr : reinterpret_cast<const XPut*>(d + o4);
}

void run(Context& ctx, const Plan& plan) {
  const int P = plan.P;
  // Process mode: this process's rank, which runs only its own steps, uploads only its own
  // inputs and downloads only its own outputs (docs/gpu.md, "Process mode").
  const int me = ctx.me();
  ctx.begin_call(plan.name);
  // Context hands out slot ids contiguously, so the plan's relative ids shift by one base.
  int slot0 = 0;
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    const int b = ctx.slots(plan.slots[i].name, plan.slots[i].count);
    if (i == 0) slot0 = b - plan.slots[i].base;
  }
  Arena arena;
  Bases base(static_cast<std::size_t>(P));
  HeapLayout layout;
  int heap = -1;
  std::vector<unsigned char*> heaps(static_cast<std::size_t>(P), nullptr);
  std::vector<bool> proxied(static_cast<std::size_t>(P), false);
  if (me < 0) {
    for (int r = 0; r < P; ++r)
      for (int b = 0; b < kNumBufs; ++b)
        base[r][b] = arena.alloc<unsigned char>(plan.buf_bytes[b][static_cast<std::size_t>(r)]);
  } else {
#if defined(FC_GPU_PROCESS)
    // Every rank's buffers at the same offsets of its heap; a peer's as this rank writes it.
    // Peers put into this rank's scratch and outputs only, which nothing here writes before the
    // kernel, and only after every rank entered the call (agree_world), so no further meeting.
    Process& pr = *ctx.process();
    layout = heap_layout(plan);
    pr.reserve(static_cast<std::size_t>(layout.bytes));
    heap = pr.heap_id();
    for (int r = 0; r < P; ++r) {
      heaps[r] = pr.peer_heap(r);
      proxied[r] = pr.routes()[static_cast<std::size_t>(r)] == process::Route::proxy;
      for (int b = 0; b < kNumBufs; ++b) base[r][b] = heaps[r] + layout.offset[b];
    }
#endif
  }
  for (const Upload& u : plan.uploads)
    if (me < 0 || u.at.rank == me)
      FC_CHECK_GPU(gpuMemcpy(base[u.at.rank][static_cast<int>(u.at.buf)] + u.at.offset, u.host,
                             static_cast<std::size_t>(u.bytes), gpuMemcpyHostToDevice));

  // The plan's steps, sources and targets resolved against this call's buffers and uploaded in
  // one copy before the timed region: like the host arguments' uploads, they are the call's
  // argument marshalling (a function of the shapes and buffers only), not its data movement. The
  // wait targets are what Context::expect will return, but the expects themselves come after
  // agree_scales: a call that throws there must leave the slots' targets untouched.
  const auto counts = signal_counts(plan);
  Resolved rs;
  std::vector<XPut> puts;
  if (me < 0) {
    rs = resolve(plan, base, slot0,
                 [&](int r, int s) { return ctx.issued(r, slot0 + s) + counts[r][s]; });
  } else {
    ProcessResolved pres = resolve_process(plan, me, layout, heaps, proxied, slot0, [&](int s) {
      return ctx.issued(me, slot0 + s) + counts[me][s];
    });
    rs = std::move(pres.x);
    puts = std::move(pres.puts);
  }
  int most = 0;
  for (int r = 0; r < P; ++r) most = std::max(most, rs.step_begin[r + 1] - rs.step_begin[r]);
  const int g = most > 0 ? ctx.blocks_per_rank(collective_kernel, most) : 0;
  Exec x{};
  x.P = P;
  x.dtype = static_cast<int>(plan.dtype);
  x.op = static_cast<int>(plan.reduce);
  x.elem = static_cast<int>(plan.elem);
  upload_exec(x, rs, puts, arena);

  ctx.start_timing();
  if (plan.compressed())
    x.wire = agree_scales(ctx, plan, me < 0 ? plan.amax_runs : amax_runs_of(plan, me), base, arena);
  for (int r = 0; r < P; ++r)
    for (int s = 0; s < plan.slot_count; ++s)
      if (counts[r][s] > 0) (void)ctx.expect(r, slot0 + s, counts[r][s]);
  if (g > 0) {
    collective_kernel<<<dim3(g, me < 0 ? P : 1), kThreads, 0, ctx.stream()>>>(x, ctx.view(), me,
                                                                              heap);
  }
  ctx.stop_timing();
  ctx.finish(plan.name);
  for (const Download& d : plan.downloads)
    if (me < 0 || d.from.rank == me)
      FC_CHECK_GPU(gpuMemcpy(d.host,
                             base[d.from.rank][static_cast<int>(d.from.buf)] + d.from.offset,
                             static_cast<std::size_t>(d.bytes), gpuMemcpyDeviceToHost));
}

/// Every rank's call, checked: in the single mode here; in process mode agree_world checked this
/// rank's call and every rank's agreement, and a peer's call carries only its agreed fields.
template <class Args>
void check_all(const Context& ctx, std::span<const Args> all) {
  FC_ENFORCE_EQ(static_cast<int>(all.size()), ctx.world_size(), "one call per rank of the world");
  if (ctx.me() < 0) detail::check_world_calls(all);
}

/// The plan of a call: every rank's on this device, or this rank's in process mode.
template <class Args>
Plan plan_of(const Context& ctx, std::span<const Args> all) {
  check_all(ctx, all);
  if (ctx.me() >= 0) return process_plan(all);
  if constexpr (std::is_same_v<Args, AllReduceArgs>)
    return plan_all_reduce(all);
  else if constexpr (std::is_same_v<Args, ReduceScatterArgs>)
    return plan_reduce_scatter(all);
  else if constexpr (std::is_same_v<Args, AllGatherArgs>)
    return plan_all_gather(all);
  else if constexpr (std::is_same_v<Args, AllToAllvArgs>)
    return plan_all_to_allv(all);
  else
    return plan_broadcast(all);
}

}  // namespace

void all_reduce(Context& ctx, std::span<const AllReduceArgs> all) { run(ctx, plan_of(ctx, all)); }

void reduce_scatter(Context& ctx, std::span<const ReduceScatterArgs> all) {
  run(ctx, plan_of(ctx, all));
}

void all_gather(Context& ctx, std::span<const AllGatherArgs> all) { run(ctx, plan_of(ctx, all)); }

void all_to_allv(Context& ctx, std::span<const AllToAllvArgs> all) { run(ctx, plan_of(ctx, all)); }

void broadcast(Context& ctx, std::span<const BroadcastArgs> all) { run(ctx, plan_of(ctx, all)); }

}  // namespace fusedcoll::gpu::coll
