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

#include "gpu/collectives.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fusedcoll/detail/validate.hpp"
#include "fusedcoll/detail/wire.hpp"
#include "gpu/collective_exec.hpp"
#include "gpu/collective_plan.hpp"

namespace fusedcoll::gpu::coll {
namespace {

__global__ void collective_kernel(Exec x, SyncView sync) {
  const int me = static_cast<int>(blockIdx.y);
  const int begin = x.step_begin[me], count = x.step_begin[me + 1] - begin;
  for (int i = static_cast<int>(blockIdx.x); i < count; i += static_cast<int>(gridDim.x)) {
    const XStep s = x.steps[begin + i];
    if (s.wait_slot >= 0 && !block_wait(sync, me, s.wait_slot, s.wait_target)) return;
    run_step(x, s, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
    for (int d = 0; d < s.dst_count; ++d) {
      const XTarget& t = x.targets[s.dst_begin + d];
      if (t.signal_slot >= 0) block_signal(sync, t.signal_rank, t.signal_slot, 1);
    }
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
/// scales. Throws InvalidArgument for a non-finite amax; nothing has been expected yet then.
codec::Wire agree_scales(Context& ctx, const Plan& plan, const Bases& base, Arena& arena) {
  codec::Wire w;
  w.format = static_cast<int>(plan.wire.format);
  w.saturate = plan.wire.overflow == Overflow::saturate;
  std::vector<float> table = detail::empty_amax(plan.wire);
  if (plan.amax_entries > 0) {
    const std::int64_t B = resolved_scaling(plan.wire) == Scaling::per_block ? plan.wire.block : 0;
    std::vector<AmaxPiece> pieces;
    for (const AmaxRun& run : plan.amax_runs) {
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
    std::vector<unsigned int> bits(static_cast<std::size_t>(plan.amax_entries));
    FC_CHECK_GPU(gpuStreamSynchronize(ctx.stream()));
    FC_CHECK_GPU(gpuMemcpy(bits.data(), dev, bits.size() * 4, gpuMemcpyDeviceToHost));
    table.resize(bits.size());
    for (std::size_t k = 0; k < bits.size(); ++k) table[k] = codec::float_of(bits[k]);
  }
  const detail::WirePlan wp = detail::make_plan(plan.wire, table, plan.headroom);
  w.block = wp.block;
  if (!wp.scales.empty()) w.scales = arena.upload(wp.scales);
  return w;
}

void run(Context& ctx, const Plan& plan) {
  const int P = plan.P;
  ctx.begin_call(plan.name);
  // Context hands out slot ids contiguously, so the plan's relative ids shift by one base.
  int slot0 = 0;
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    const int b = ctx.slots(plan.slots[i].name, plan.slots[i].count);
    if (i == 0) slot0 = b - plan.slots[i].base;
  }
  Arena arena;
  Bases base(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r)
    for (int b = 0; b < kNumBufs; ++b)
      base[r][b] = arena.alloc<unsigned char>(plan.buf_bytes[b][static_cast<std::size_t>(r)]);
  for (const Upload& u : plan.uploads)
    FC_CHECK_GPU(gpuMemcpy(base[u.at.rank][static_cast<int>(u.at.buf)] + u.at.offset, u.host,
                           static_cast<std::size_t>(u.bytes), gpuMemcpyHostToDevice));

  // The plan's steps, sources and targets resolved against this call's buffers and uploaded in
  // one copy before the timed region: like the host arguments' uploads, they are the call's
  // argument marshalling (a function of the shapes and buffers only), not its data movement. The
  // wait targets are what Context::expect will return, but the expects themselves come after
  // agree_scales: a call that throws there must leave the slots' targets untouched.
  std::size_t max_steps = 0;
  for (const auto& steps : plan.steps) max_steps = std::max(max_steps, steps.size());
  const int g = max_steps > 0
                    ? ctx.blocks_per_rank(collective_kernel, static_cast<std::int64_t>(max_steps))
                    : 0;
  const auto counts = signal_counts(plan);
  const Resolved rs = resolve(plan, base, slot0, [&](int r, int s) {
    return ctx.issued(r, slot0 + s) + counts[r][s];
  });
  Exec x{};
  x.P = P;
  x.dtype = static_cast<int>(plan.dtype);
  x.op = static_cast<int>(plan.reduce);
  x.elem = static_cast<int>(plan.elem);
  {
    // One buffer for the four arrays, each at a 16-byte-aligned offset.
    auto bytes_of = [](const auto& v) {
      return (v.size() * sizeof(v[0]) + 15) / 16 * 16;
    };
    const std::size_t o1 = bytes_of(rs.steps), o2 = o1 + bytes_of(rs.step_begin),
                      o3 = o2 + bytes_of(rs.sources), total = o3 + bytes_of(rs.targets);
    std::vector<exec::Unit16> host((total + 15) / 16);
    auto* h = reinterpret_cast<unsigned char*>(host.data());
    auto put = [&](std::size_t at, const auto& v) {
      if (!v.empty()) std::memcpy(h + at, v.data(), v.size() * sizeof(v[0]));
    };
    put(0, rs.steps);
    put(o1, rs.step_begin);
    put(o2, rs.sources);
    put(o3, rs.targets);
    auto* d = reinterpret_cast<unsigned char*>(arena.upload(host));
    x.steps = reinterpret_cast<const XStep*>(d);
    x.step_begin = reinterpret_cast<const int*>(d + o1);
    x.sources = reinterpret_cast<const XSource*>(d + o2);
    x.targets = reinterpret_cast<const XTarget*>(d + o3);
  }

  ctx.start_timing();
  if (plan.compressed()) x.wire = agree_scales(ctx, plan, base, arena);
  for (int r = 0; r < P; ++r)
    for (int s = 0; s < plan.slot_count; ++s)
      if (counts[r][s] > 0) (void)ctx.expect(r, slot0 + s, counts[r][s]);
  if (g > 0) {
    collective_kernel<<<dim3(g, P), kThreads, 0, ctx.stream()>>>(x, ctx.view());
  }
  ctx.stop_timing();
  ctx.finish(plan.name);
  for (const Download& d : plan.downloads)
    FC_CHECK_GPU(gpuMemcpy(d.host, base[d.from.rank][static_cast<int>(d.from.buf)] + d.from.offset,
                           static_cast<std::size_t>(d.bytes), gpuMemcpyDeviceToHost));
}

template <class Args>
void check_all(const Context& ctx, std::span<const Args> all) {
  FC_ENFORCE_EQ(static_cast<int>(all.size()), ctx.world_size(), "one call per rank of the world");
  detail::check_world_calls(all);
}

}  // namespace

void all_reduce(Context& ctx, std::span<const AllReduceArgs> all) {
  check_all(ctx, all);
  run(ctx, plan_all_reduce(all));
}

void reduce_scatter(Context& ctx, std::span<const ReduceScatterArgs> all) {
  check_all(ctx, all);
  run(ctx, plan_reduce_scatter(all));
}

void all_gather(Context& ctx, std::span<const AllGatherArgs> all) {
  check_all(ctx, all);
  run(ctx, plan_all_gather(all));
}

void all_to_allv(Context& ctx, std::span<const AllToAllvArgs> all) {
  check_all(ctx, all);
  run(ctx, plan_all_to_allv(all));
}

void broadcast(Context& ctx, std::span<const BroadcastArgs> all) {
  check_all(ctx, all);
  run(ctx, plan_broadcast(all));
}

}  // namespace fusedcoll::gpu::coll
