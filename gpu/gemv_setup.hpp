#pragma once
// GemvAllReduce's launch setup on the GPU backend, in plain host code (no GPU types): the
// symmetric buffers and signals of each mode, every rank's wait targets, where process mode puts
// the buffers that peers write in every rank's heap, and process mode's unfused AllReduce call.
// All of it follows from the shared plan (detail/gemv_plan.hpp) and the agreed arguments, so it
// is the same on every rank. The GPU's launcher (gpu/gemv_allreduce.cpp) and the CPU suite's
// replay of process mode (tests/mpi/gpu_process_replay_test.cpp), which runs the same kernel
// bodies (detail/gemv_kernel.hpp) over host threads and the real proxy, both build their
// GemvKernelParams here, so what the replay checks against ref/ is what the device is given.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/communicator.hpp"
#include "fusedcoll/detail/gemv_kernel.hpp"
#include "fusedcoll/detail/gemv_plan.hpp"
#include "fusedcoll/gemv_allreduce.hpp"

namespace fusedcoll::gpu::gemv_setup {

namespace plan = fusedcoll::detail::gemv;

/// Floats of each buffer of a call (at least one, so that empty shapes still have an address).
/// `shared` are the two that peers put into (scale_up: partials, then y; scale_out: slices, then
/// gathered); the others only their own rank touches (scale_up's tile per workgroup, `wgbuf`,
/// per workgroup; scale_out's stage and reduced chunk; unfused's partial).
struct Sizes {
  std::int64_t shared[2] = {1, 1};
  std::int64_t wgbuf_per_wg = 1, stage = 1, reduced = 1, partial = 1;
};

inline Sizes sizes(const plan::Plan& pl, Mode mode) {
  auto at_least_one = [](std::int64_t n) { return std::max<std::int64_t>(n, 1); };
  const std::int64_t tf = pl.m * plan::kTileN, S = pl.S, P = pl.P;
  Sizes s;
  if (mode == Mode::scale_up) {
    s.shared[0] = at_least_one(P * pl.num_tiles() * tf);
    s.shared[1] = at_least_one(pl.m * pl.n);
    s.wgbuf_per_wg = at_least_one(tf);
  } else if (mode == Mode::scale_out) {
    s.shared[0] = at_least_one(P * S);
    s.shared[1] = at_least_one(P * S);
    s.stage = at_least_one(P * S);
    s.reduced = at_least_one(S);
  } else {
    s.partial = at_least_one(pl.m * pl.n);
  }
  return s;
}

/// Process mode: the two shared buffers' byte offsets in every rank's symmetric heap (256-byte
/// aligned, as every carved region), and the heap bytes the call needs.
struct HeapPlace {
  std::size_t offset[2] = {0, 0};
  std::size_t bytes = 0;
};

inline HeapPlace heap_place(const Sizes& s) {
  auto aligned = [](std::int64_t floats) {
    return (static_cast<std::size_t>(floats) * sizeof(float) + 255) / 256 * 256;
  };
  HeapPlace h;
  h.offset[1] = aligned(s.shared[0]);
  h.bytes = h.offset[1] + aligned(s.shared[1]);
  return h;
}

/// The plan's lists as `upload` (a host vector to the kernel's address of its copy) makes them,
/// and rank `r`'s inputs: the caller adds the mode's buffers, signals and targets.
template <class Upload>
plan::GemvKernelParams params_of(const plan::Plan& pl, const float* w, const float* x,
                                 const plan::Tile* tiles, const Chunk* chunks, Upload&& upload) {
  plan::GemvKernelParams p;
  p.m = pl.m;
  p.n = pl.n;
  p.k = pl.k;
  p.w = w;
  p.ldw = pl.k;
  p.x = x;
  p.ldx = pl.k;
  p.tiles = tiles;
  p.num_tiles = pl.num_tiles();
  p.compute = upload(pl.compute);
  p.num_compute = static_cast<int>(pl.compute.size());
  p.mine = upload(pl.mine);
  p.num_mine = static_cast<int>(pl.mine.size());
  p.chunks = chunks;
  p.slice = pl.S;
  return p;
}

/// The mode's signals of one call, the same on every rank: `slots(name, count)` reserves
/// `count` named slots and returns the first.
struct SignalSet {
  Signals part, yready, done, arrive, rdone, gather;
};

template <class Slots>
SignalSet reserve_signals(const plan::Plan& pl, Mode mode, Slots&& slots) {
  auto of = [&](const char* name, std::int64_t count) {
    const int n = static_cast<int>(std::max<std::int64_t>(count, 1));
    return Signals{slots(name, n), n};
  };
  SignalSet s;
  if (mode == Mode::scale_up) {
    s.part = of("gemv.partial", pl.num_tiles());
    s.yready = of("gemv.y", 1);
  } else if (mode == Mode::scale_out) {
    s.done = of("gemv.slice_done", pl.P);
    s.arrive = of("gemv.slice_arrive", 1);
    s.rdone = of("gemv.reduced_done", 1);
    s.gather = of("gemv.gathered", 1);
  }
  return s;
}

/// Sets rank `pl.me`'s signals and wait targets in `p`: `expect(slot, n)` is the cumulative value
/// that rank's `slot` reaches after `n` more updates in this call (Context::expect for that
/// rank); `upload` makes a target array the kernel reads.
template <class Expect, class Upload>
void set_signals(plan::GemvKernelParams& p, const plan::Plan& pl, Mode mode, const SignalSet& s,
                 Expect&& expect, Upload&& upload) {
  const int P = pl.P;
  if (mode == Mode::scale_up) {
    p.part = s.part;
    p.yready = s.yready;
    std::vector<std::uint64_t> target(static_cast<std::size_t>(s.part.count), 0);
    for (int t : pl.mine)
      target[static_cast<std::size_t>(t)] = expect(s.part[t].slot, static_cast<std::uint64_t>(P));
    p.part_target = upload(target);
    p.y_target = expect(s.yready[0].slot, static_cast<std::uint64_t>(pl.num_tiles()));
  } else if (mode == Mode::scale_out) {
    p.done = s.done;
    p.arrive = s.arrive;
    p.rdone = s.rdone;
    p.gather = s.gather;
    std::vector<std::uint64_t> target(static_cast<std::size_t>(P));
    for (int j = 0; j < P; ++j)
      target[static_cast<std::size_t>(j)] = expect(
          s.done[j].slot, static_cast<std::uint64_t>(pl.tiles_of[static_cast<std::size_t>(j)]));
    p.done_target = upload(target);
    p.arrive_target = expect(s.arrive[0].slot, static_cast<std::uint64_t>(P));
    p.rdone_target = expect(s.rdone[0].slot, static_cast<std::uint64_t>(pl.mine.size()));
    p.gather_target = expect(s.gather[0].slot, static_cast<std::uint64_t>(P));
  }
}

/// Process mode's unfused form, after the GEMV kernel wrote this rank's partial [m, n] into
/// `partial`: every rank's AllReduce call (sum, `direct`: ref/'s order of the P partials) over
/// it into `y` [m, n], this rank's in full and the peers' with their agreed fields only, as
/// process mode's entry would return them. Every field follows from the agreed GEMV arguments,
/// so the ranks need not meet again to agree on it.
inline std::vector<AllReduceArgs> unfused_all_reduce(const GemvAllReduceArgs& g, int me, int P,
                                                     const float* partial, float* y) {
  AllReduceArgs peer;
  peer.count = g.m * g.n;
  peer.dtype = DType::f32;
  peer.op = ReduceOp::sum;
  peer.algo = AllReduceAlgo::direct;
  std::vector<AllReduceArgs> all(static_cast<std::size_t>(P), peer);
  all[static_cast<std::size_t>(me)].send = partial;
  all[static_cast<std::size_t>(me)].recv = y;
  return all;
}

}  // namespace fusedcoll::gpu::gemv_setup
