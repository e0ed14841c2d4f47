// GemvAllReduce on the emulator: the row-parallel GEMV fused with a direct (reduce-scatter +
// all-gather) AllReduce. The kernels are detail/gemv_kernel.hpp's, written once against the public
// device API and shared with gpu/; this file supplies their CPU arithmetic (the shared kernels of
// core/, which ref/ calls too), sizes their buffers and signals, and launches them. The plan is
// detail/gemv_plan.hpp's, shared with mpi/ and gpu/.
//
// scale_up puts the reduced tiles into a symmetric y on every rank; each rank copies its own into
// the caller's y after the kernel (the caller's rows may be padded differently on every rank).
// unfused runs the GEMV kernel over the whole partial, then the emulator's AllReduce (direct).

#include <algorithm>
#include <cstring>
#include <vector>

#include "emu/ops.hpp"
#include "fusedcoll/detail/gemv_kernel.hpp"
#include "fusedcoll/detail/gemv_plan.hpp"

namespace fusedcoll::emu::ops {
namespace {

using namespace fusedcoll::detail::gemv;  // Plan, Tile, kTileN, the kernels

/// The kernels' arithmetic on the CPU: the shared kernels of core/, as ref/ computes.
struct CpuMath {
  template <class Wg>
  static void tile(Wg&, const GemvKernelParams& p, const Tile& t, float* out, std::int64_t ld) {
    detail::gemv_rows(p.w + t.n0 * p.ldw, p.ldw, p.x, p.ldx, p.m, p.k, 0, t.n1 - t.n0, out, ld);
  }
  template <class Wg>
  static void copy_rows(Wg&, float* dst, std::int64_t dst_ld, const float* src, std::int64_t src_ld,
                        std::int64_t rows, std::int64_t cols) {
    if (cols > 0)
      for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(dst + r * dst_ld, src + r * src_ld, static_cast<std::size_t>(cols) * 4);
  }
  template <class Wg>
  static void add_rows(Wg&, float* acc, std::int64_t acc_ld, const float* v, std::int64_t v_ld,
                       std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r)
      detail::reduce_into(acc + r * acc_ld, v + r * v_ld, cols, DType::f32, ReduceOp::sum);
  }
};

/// A symmetric scratch buffer of at least one float (empty shapes still get an address).
Symmetric<float> scratch_floats(Rank& rk, const char* tag, std::int64_t floats) {
  floats = std::max<std::int64_t>(floats, 1);
  return {rk.scratch(tag, static_cast<std::size_t>(floats) * 4).id, floats};
}

/// Signals `count` (at least one) reserved under `key`.
Signals slots_of(Rank& rk, const char* key, std::int64_t count) {
  const int n = static_cast<int>(std::max<std::int64_t>(count, 1));
  return {rk.slots(key, n), n};
}

template <class K>
void run_kernel(Rank& rk, int grid, const GemvKernelParams& params) {
  rk.launch(K::name, grid,
            [&params](WgContext& wg) -> WgTask { return K::template run<WgContext>(wg, params); });
}

/// The plan's lists and this rank's inputs; the caller adds its mode's buffers and signals.
GemvKernelParams params_of(const Plan& pl, const GemvAllReduceArgs& a) {
  GemvKernelParams p;
  p.m = pl.m;
  p.n = pl.n;
  p.k = pl.k;
  p.w = static_cast<const float*>(a.w.data());
  p.ldw = a.w.stride(0);
  p.x = static_cast<const float*>(a.x.data());
  p.ldx = a.x.stride(0);
  p.tiles = pl.tiles.data();
  p.num_tiles = pl.num_tiles();
  p.compute = pl.compute.data();
  p.num_compute = static_cast<int>(pl.compute.size());
  p.mine = pl.mine.data();
  p.num_mine = static_cast<int>(pl.mine.size());
  p.chunks = pl.chunks.data();
  p.slice = pl.S;
  return p;
}

/// Copies rows `[m, n]` (row stride `ld_src`) into the caller's y.
void copy_out(const GemvAllReduceArgs& a, const float* src, std::int64_t ld_src) {
  float* y = static_cast<float*>(a.y.data());
  if (a.m == 0 || a.n == 0) return;
  for (std::int64_t r = 0; r < a.m; ++r)
    std::memcpy(y + r * a.y.stride(0), src + r * ld_src, static_cast<std::size_t>(a.n) * 4);
}

void run_scale_up(Rank& rk, const Plan& pl, const GemvAllReduceArgs& a) {
  const std::int64_t tf = pl.m * kTileN;
  const int num_tiles = pl.num_tiles();
  const int grid = grid_for(rk, num_tiles);
  GemvKernelParams p = params_of(pl, a);
  p.partials = scratch_floats(rk, "gemv.partials", pl.P * num_tiles * tf);
  p.ysym = scratch_floats(rk, "gemv.ysym", pl.m * pl.n);
  p.wgbuf = scratch_floats(rk, "gemv.wgbuf", grid * tf);
  p.part = slots_of(rk, "gemv.partial", num_tiles);
  p.yready = slots_of(rk, "gemv.y", 1);
  std::vector<std::uint64_t> part_target(static_cast<std::size_t>(std::max(num_tiles, 1)), 0);
  for (int t : pl.mine) part_target[t] = rk.expect(p.part[t].slot, pl.P);
  p.part_target = part_target.data();
  p.y_target = rk.expect(p.yready[0].slot, num_tiles);
  run_kernel<GemvScaleUp<CpuMath>>(rk, grid, p);
  copy_out(a, reinterpret_cast<const float*>(rk.local(SymBuffer{p.ysym.id, 0})), pl.n);
}

void run_scale_out(Rank& rk, const Plan& pl, const GemvAllReduceArgs& a) {
  const int P = pl.P;
  GemvKernelParams p = params_of(pl, a);
  p.y = static_cast<float*>(a.y.data());
  p.ldy = pl.m > 0 ? a.y.stride(0) : pl.n;
  p.stage = scratch_floats(rk, "gemv.stage", P * pl.S);
  p.slices = scratch_floats(rk, "gemv.slices", P * pl.S);
  p.reduced = scratch_floats(rk, "gemv.reduced", pl.S);
  p.gathered = scratch_floats(rk, "gemv.gathered", P * pl.S);
  p.done = slots_of(rk, "gemv.slice_done", P);
  p.arrive = slots_of(rk, "gemv.slice_arrive", 1);
  p.rdone = slots_of(rk, "gemv.reduced_done", 1);
  p.gather = slots_of(rk, "gemv.gathered", 1);
  std::vector<std::uint64_t> done_target(P);
  for (int j = 0; j < P; ++j)
    done_target[j] = rk.expect(p.done[j].slot, static_cast<std::uint64_t>(pl.tiles_of[j]));
  p.done_target = done_target.data();
  p.arrive_target = rk.expect(p.arrive[0].slot, P);
  p.rdone_target = rk.expect(p.rdone[0].slot, pl.mine.size());
  p.gather_target = rk.expect(p.gather[0].slot, P);
  run_kernel<GemvScaleOut<CpuMath>>(rk, grid_for(rk, pl.scale_out_items()), p);
}

void run_unfused(Rank& rk, const Plan& pl, const GemvAllReduceArgs& a) {
  std::vector<float> partial(static_cast<std::size_t>(pl.m * pl.n));
  GemvKernelParams p = params_of(pl, a);
  p.y = partial.data();
  p.ldy = pl.n;
  run_kernel<GemvPartial<CpuMath>>(rk, grid_for(rk, pl.tiles.size()), p);
  std::vector<float> y(partial.size());
  AllReduceArgs ar;
  ar.send = partial.data();
  ar.recv = y.data();
  ar.count = pl.m * pl.n;
  ar.dtype = DType::f32;
  ar.op = ReduceOp::sum;
  ar.algo = AllReduceAlgo::direct;
  all_reduce(rk, ar);
  copy_out(a, y.data(), pl.n);
}

}  // namespace

void gemv_allreduce(Rank& rk, const GemvAllReduceArgs& args, Mode mode) {
  detail::check_mode(mode);
  const std::string name = std::string("gemv_allreduce ") + to_string(mode);
  enter(rk, name, args);
  const Plan plan(args, rk.rank(), rk.size());
  leave_args(rk, name);
  switch (mode) {
    case Mode::scale_up:
      run_scale_up(rk, plan, args);
      break;
    case Mode::scale_out:
      run_scale_out(rk, plan, args);
      break;
    case Mode::unfused:
      run_unfused(rk, plan, args);
      break;
  }
  rk.set_activity("returned from " + name);
}

}  // namespace fusedcoll::emu::ops
