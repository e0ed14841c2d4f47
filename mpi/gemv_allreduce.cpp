// GemvAllReduce on MPI: the row-parallel GEMV fused with a direct AllReduce (reduce-scatter by
// owner chunk `chunk_of(N, P, j)`, then all-gather), as in emu/gemv_allreduce.cpp. Partials are
// folded in rank order once all P are present, never in arrival order, so every mode gives ref/'s
// bits. Chunks, tiles, their order and the slice size S are detail/gemv_plan.hpp's.
//
// Window layout (floats, S = m * max chunk length):
//   inbox  [P][S]  owner side: slot p holds rank p's partial of this rank's chunk, [m, n_me]
//   stage  [P][S]  this rank's partial of owner j's chunk, [m, n_j]
//   gather [P][S]  every rank: owner j's reduced chunk, [m, n_j]
//
//   scale_up : a workgroup computes the partial of a tile (kTileN columns of one owner chunk) and
//              puts its m row segments straight into their place in the owner's inbox slot; it
//              signals 'gemv.in'[me] there once per owner, with its tile count, after its last
//              tile (why: embedding_alltoall.cpp).
//   scale_out: tiles fill the staging slice of their owner; the workgroup completing a slice puts
//              it whole and signals once.
//   both     : the owner waits for every source, folds, and puts its reduced chunk to every rank
//              ('gemv.out'[owner]); every rank copies the chunks into y.
//   unfused  : the GEMV writes the whole partial (owner-major slabs), then MPI_Ialltoallv hands
//              each owner its chunk's partials, the owner folds in rank order, and
//              MPI_Iallgatherv returns the reduced chunks. MPI_Allreduce is not used: Open MPI's
//              reduction order for P > 2 is not rank order, so its bits differ from ref/.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "fusedcoll/detail/gemv_plan.hpp"
#include "mpi/ops.hpp"

namespace fusedcoll::mpi {
namespace {

using namespace fusedcoll::detail::gemv;  // Plan, Tile, kTileN, partial_tile

/// Copies the reduced chunks [m, n_j] of `slabs` (slab j at j * stride floats) into y.
void scatter_into_y(Runtime& rt, const Plan& pl, const float* slabs, std::int64_t stride,
                    const GemvAllReduceArgs& a) {
  auto* y = static_cast<float*>(a.y.data());
  const std::int64_t ldy = a.y.stride(0);
  const int grid = rt.grid_for(static_cast<std::size_t>(pl.P));
  rt.launch(grid, [&](int wg) {
    for (int j = wg; j < pl.P; j += grid) {
      const Chunk c = pl.chunks[j];
      if (c.length == 0) continue;
      for (std::int64_t r = 0; r < pl.m; ++r)
        std::memcpy(y + r * ldy + c.offset, slabs + j * stride + r * c.length, fbytes(c.length));
    }
  });
}

void run_fused(Runtime& rt, const Plan& pl, const GemvAllReduceArgs& a, Mode mode) {
  const int P = pl.P, me = pl.me;
  const std::int64_t S = pl.S;
  const std::size_t inbox_at = 0, stage_at = fbytes(P * S), gather_at = fbytes(2 * P * S);
  rt.reserve(fbytes(3 * P * S));
  const int in = rt.slots("gemv.in", P), out = rt.slots("gemv.out", P);
  const std::int64_t n_me = pl.chunks[me].length;
  float* inbox = rt.data_as<float>(inbox_at);
  float* stage = rt.data_as<float>(stage_at);
  std::vector<std::atomic<std::int64_t>> done(static_cast<std::size_t>(P));
  for (auto& d : done) d.store(0, std::memory_order_relaxed);
  const int grid = rt.grid_for(pl.compute.size());
  rt.launch(grid, [&](int wg) {
    std::vector<std::uint64_t> sent(static_cast<std::size_t>(P), 0);
    for (std::size_t i = static_cast<std::size_t>(wg); i < pl.compute.size();
         i += static_cast<std::size_t>(grid)) {
      rt.poll();  // finished partials leave, peers' arrive, while this rank computes
      const Tile& t = pl.tiles[pl.compute[i]];
      const std::int64_t len = pl.chunks[t.owner].length, width = t.n1 - t.n0;
      if (t.owner == me) {
        partial_tile(pl, a, t, inbox + me * S + pl.in_slice(t), len);
        continue;
      }
      if (mode == Mode::scale_up) {
        // The partial goes to the staging slice, untouched until the call ends, so its puts need
        // no completion before the next tile.
        float* rows = stage + t.owner * S + pl.in_slice(t);  // row stride len
        partial_tile(pl, a, t, rows, len);
        for (std::int64_t r = 0; r < pl.m; ++r)
          rt.put(t.owner, inbox_at + fbytes(me * S + r * len + pl.in_slice(t)), rows + r * len,
                 fbytes(width));
        ++sent[static_cast<std::size_t>(t.owner)];
      } else {
        float* slice = stage + t.owner * S;
        partial_tile(pl, a, t, slice + pl.in_slice(t), len);
        if (done[t.owner].fetch_add(1, std::memory_order_acq_rel) + 1 == pl.tiles_of[t.owner]) {
          rt.put(t.owner, inbox_at + fbytes(me * S), slice, fbytes(pl.m * len));
          rt.signal(t.owner, in + me, 1, Runtime::Sources::kept);
        }
      }
    }
    // scale_up: one signal per (workgroup, owner), as in embedding_alltoall.cpp's scale_up.
    for (int j : remote_first(me, P))
      if (sent[static_cast<std::size_t>(j)] > 0)
        rt.signal(j, in + me, sent[static_cast<std::size_t>(j)], Runtime::Sources::kept);
  });
  const std::uint64_t per_source =
      mode == Mode::scale_up ? static_cast<std::uint64_t>(pl.tiles_of[me]) : (n_me > 0 ? 1 : 0);
  for (int p : remote_first(me, P))
    if (p != me && per_source > 0)
      rt.wait(in + p, rt.expect(in + p, per_source),
              detail::make_string("gemv.in[", p, "]: partials from rank ", p));
  float* reduced = rt.data_as<float>(gather_at) + me * S;
  fold_rank_order(rt, reduced, pl.m * n_me, DType::f32, ReduceOp::sum,
                  [&](int p) -> const void* { return inbox + p * S; });
  const std::vector<int> order = remote_first(me, P);
  const int g2 = rt.grid_for(static_cast<std::size_t>(P - 1));
  if (P > 1)
    rt.launch(g2, [&](int wg) {
      for (int j = wg; j < P - 1; j += g2) {
        rt.put(order[j], gather_at + fbytes(me * S), reduced, fbytes(pl.m * n_me));
        // Peers put into their own gather slabs only: `reduced` stays as it is until the call
        // ends, so the chunk goes to every peer at once rather than one peer after the other.
        rt.signal(order[j], out + me, 1, Runtime::Sources::kept);
      }
    });
  for (int p : order)
    if (p != me)
      rt.wait(out + p, rt.expect(out + p, 1),
              detail::make_string("gemv.out[", p, "]: reduced chunk of rank ", p));
  scatter_into_y(rt, pl, rt.data_as<const float>(gather_at), S, a);
}

void run_unfused(Runtime& rt, const Plan& pl, const GemvAllReduceArgs& a) {
  const int P = pl.P, me = pl.me;
  // The partial [m, N] as owner-major slabs [m, n_j]: owner j's block is contiguous.
  // Scratch in the runtime's data area, reused across calls (fresh vectors cost page faults and
  // zeroing every call; see embedding_alltoall.cpp). Agreed sizes: reserve is collective.
  const std::int64_t most = pl.max_chunk;
  const std::size_t inbox_at = fbytes(pl.m * pl.n), reduced_at = inbox_at + fbytes(P * pl.m * most);
  rt.reserve(reduced_at + fbytes(pl.m * most));
  float* partial = rt.data_as<float>(0);
  float* inbox = rt.data_as<float>(inbox_at);
  float* reduced = rt.data_as<float>(reduced_at);
  const int grid = rt.grid_for(pl.compute.size());
  rt.launch(grid, [&](int wg) {
    for (std::size_t i = static_cast<std::size_t>(wg); i < pl.compute.size();
         i += static_cast<std::size_t>(grid)) {
      const Tile& t = pl.tiles[pl.compute[i]];
      const Chunk c = pl.chunks[t.owner];
      partial_tile(pl, a, t, partial + pl.m * c.offset + pl.in_slice(t), c.length);
    }
  });
  const std::int64_t n_me = pl.chunks[me].length;
  std::vector<int> sc(P), sd(P), rc(P), rd(P);
  FC_ENFORCE(pl.m * pl.n * P <= INT32_MAX, "fusedcoll mpi: GemvAllReduce of ", pl.m * pl.n,
             " elements exceeds MPI's int counts in the unfused baseline");
  for (int j = 0; j < P; ++j) {
    sc[j] = static_cast<int>(pl.m * pl.chunks[j].length);
    sd[j] = static_cast<int>(pl.m * pl.chunks[j].offset);
    rc[j] = static_cast<int>(pl.m * n_me);
    rd[j] = static_cast<int>(j * pl.m * n_me);
  }
  std::vector<MPI_Request> req(1, MPI_REQUEST_NULL);
  FC_CHECK_MPI(MPI_Ialltoallv(partial, sc.data(), sd.data(), MPI_FLOAT, inbox, rc.data(), rd.data(),
                              MPI_FLOAT, rt.comm(), &req[0]));
  rt.wait_requests(req, "MPI_Ialltoallv of the partials");
  fold_rank_order(rt, reduced, pl.m * n_me, DType::f32, ReduceOp::sum,
                  [&](int p) -> const void* { return inbox + p * pl.m * n_me; });
  // The gathered slabs land owner-major, exactly the layout of `partial`, which is free again.
  FC_CHECK_MPI(MPI_Iallgatherv(reduced, static_cast<int>(pl.m * n_me), MPI_FLOAT, partial,
                               sc.data(), sd.data(), MPI_FLOAT, rt.comm(), &req[0]));
  rt.wait_requests(req, "MPI_Iallgatherv of the reduced chunks");
  auto* y = static_cast<float*>(a.y.data());
  for (int j = 0; j < P; ++j) {
    const Chunk c = pl.chunks[j];
    if (c.length == 0) continue;
    for (std::int64_t r = 0; r < pl.m; ++r)
      std::memcpy(y + r * a.y.stride(0) + c.offset, partial + pl.m * c.offset + r * c.length,
                  fbytes(c.length));
  }
}

}  // namespace

void gemv_allreduce(Runtime& rt, const GemvAllReduceArgs& args, Mode mode) {
  enter(rt, "gemv_allreduce", mode, args);
  const Plan pl(args, rt.rank(), rt.size());
  if (mode == Mode::unfused)
    run_unfused(rt, pl, args);
  else
    run_fused(rt, pl, args, mode);
}

}  // namespace fusedcoll::mpi
