// GemmAllToAll on MPI: per-expert GEMM fused with the combine All-to-All, as in
// emu/gemm_alltoall.cpp. A tile is a row block of one expert from ONE source s x a column block;
// every element comes from the shared kernel `detail::gemm_tile`, and the rest only moves rows,
// so all modes give ref/'s bits.
//
// - scale_up (per-tile puts): the tile's rows are put straight to their final rows in the
//   source's receive area (laid out like its output, [rows_s, N]); 'gemm.from'[me] is signalled
//   there once per (workgroup, destination) with the tile count (why: embedding_alltoall.cpp); the
//   source copies the remote experts' rows into its output, unless that output lies in a
//   SymmetricBuffer, where the rows were put straight into place.
// - scale_out (staged slices): tiles fill this rank's staging slice for s (its rows for s, expert
//   by expert); the workgroup completing the slice puts it whole and signals 'gemm.arrive'[me].
// - unfused: all local GEMMs into the staging layout, MPI_Ialltoallv, then the reorder into
//   expert order.
// Local tiles are computed straight into this rank's output in every mode.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fusedcoll/detail/gemm_plan.hpp"
#include "mpi/ops.hpp"

namespace fusedcoll::mpi {
namespace {

using namespace fusedcoll::detail::gemm;  // Plan, Tile, compute_tile

/// This rank's output.
struct OutRef {
  float* data = nullptr;
  std::int64_t ld = 0;  // row stride in elements
};

/// Copies the slice host `h` sent this rank (its rows for us, expert by expert) into the output.
void unpack(Runtime& rt, const Plan& pl, int h, const float* slice, const OutRef& out) {
  const int s = pl.me;
  if (pl.N == 0 || pl.rows[h][s] == 0) return;
  const int grid = rt.grid_for(static_cast<std::size_t>(ceil_div(pl.rows[h][s], kRowBlock)));
  rt.launch(grid, [&](int w) {
    for (int e : pl.experts_of[h]) {
      const std::int64_t base = pl.so[s][e];
      for (std::int64_t i = w; i < pl.c(s, e); i += grid)
        std::memcpy(out.data + (pl.o0[s][e] + i) * out.ld, slice + (base + i) * pl.N, fbytes(pl.N));
    }
  });
}

void run_scale_up(Runtime& rt, const Plan& pl, const std::vector<LocalExpert>& experts,
                  const OutRef& mine, const std::vector<Landing>& land) {
  const int P = pl.P, me = pl.me;
  const std::int64_t N = pl.N;
  std::int64_t most = 0;
  for (int s = 0; s < P; ++s) {
    std::int64_t r = 0;
    for (std::int64_t e = 0; e < pl.E; ++e) r += pl.c(s, e);
    most = std::max(most, r);
  }
  // Tiles are computed into the staging area (scale_out's layout), which stays untouched until
  // the call ends, so their puts need no completion before the next tile.
  const std::size_t stage_at = 0, recv_at = pl.stage_bytes();
  rt.reserve(recv_at + fbytes(most * N));
  const int from = rt.slots("gemm.from", P);
  const std::vector<Tile> tiles = pl.fused_tiles();
  const int grid = rt.grid_for(tiles.size());
  float* stage = rt.data_as<float>(stage_at);
  rt.launch(grid, [&](int w) {
    std::vector<std::uint64_t> sent(static_cast<std::size_t>(P), 0);
    for (std::size_t i = static_cast<std::size_t>(w); i < tiles.size();
         i += static_cast<std::size_t>(grid)) {
      rt.poll();  // earlier tiles' rows leave, peers' arrive, while this rank computes
      const Tile& tl = tiles[i];
      const int e = pl.experts_of[me][tl.j];
      const std::int64_t row0 = pl.o0[tl.s][e] + tl.r0, width = tl.n1 - tl.n0;
      if (tl.s == me) {
        compute_tile(pl, experts[tl.j], tl, mine.data + row0 * mine.ld + tl.n0, mine.ld);
        continue;
      }
      float* c = stage + (pl.stage_at[me][tl.s] + pl.so[tl.s][e] + tl.r0) * N + tl.n0;
      compute_tile(pl, experts[tl.j], tl, c, N);
      const Landing& to = land[static_cast<std::size_t>(tl.s)];
      for (std::int64_t r = 0; r < tl.r1 - tl.r0; ++r) {
        if (to.id >= 0)  // zero-copy: into the source's output itself
          rt.put_buffer(to.id, tl.s,
                        static_cast<std::size_t>(to.offset) +
                            fbytes((row0 + r) * to.layout[0] + tl.n0),
                        c + r * N, fbytes(width));
        else
          rt.put(tl.s, recv_at + fbytes((row0 + r) * N + tl.n0), c + r * N, fbytes(width));
      }
      ++sent[static_cast<std::size_t>(tl.s)];
    }
    // One signal per (workgroup, destination), as in embedding_alltoall.cpp's scale_up.
    for (int s : remote_first(me, P)) {
      if (sent[static_cast<std::size_t>(s)] == 0) continue;
      if (land[static_cast<std::size_t>(s)].id >= 0)
        rt.flush_buffer(land[static_cast<std::size_t>(s)].id, s);
      rt.signal(s, from + me, sent[static_cast<std::size_t>(s)], Runtime::Sources::kept);
    }
  });
  for (int h : remote_first(me, P))
    if (h != me && pl.tiles(h, me) > 0)
      rt.wait(from + h, rt.expect(from + h, static_cast<std::uint64_t>(pl.tiles(h, me))),
              detail::make_string("gemm.from[", h, "]: tiles from rank ", h));
  if (N == 0 || land[static_cast<std::size_t>(me)].id >= 0) return;
  const float* recv = rt.data_as<const float>(recv_at);
  const int g2 = rt.grid_for(static_cast<std::size_t>(pl.E));
  rt.launch(g2, [&](int w) {
    for (std::int64_t e = w; e < pl.E; e += g2) {
      if (pl.host[e] == me) continue;
      for (std::int64_t i = 0; i < pl.c(me, e); ++i)
        std::memcpy(mine.data + (pl.o0[me][e] + i) * mine.ld, recv + (pl.o0[me][e] + i) * N,
                    fbytes(N));
    }
  });
}

void run_scale_out(Runtime& rt, const Plan& pl, const std::vector<LocalExpert>& experts,
                   const OutRef& mine) {
  const int P = pl.P, me = pl.me;
  const std::int64_t N = pl.N;
  const std::size_t stage_at = 0, recv_at = pl.stage_bytes();
  rt.reserve(recv_at + pl.recv_bytes());
  const int arrive = rt.slots("gemm.arrive", P);
  std::vector<std::atomic<std::int64_t>> done(static_cast<std::size_t>(P));
  for (auto& d : done) d.store(0, std::memory_order_relaxed);
  float* stage = rt.data_as<float>(stage_at);
  const std::vector<Tile> tiles = pl.fused_tiles();
  const int grid = rt.grid_for(tiles.size());
  rt.launch(grid, [&](int w) {
    for (std::size_t i = static_cast<std::size_t>(w); i < tiles.size();
         i += static_cast<std::size_t>(grid)) {
      rt.poll();  // finished slices leave, peers' arrive, while this rank computes
      const Tile& tl = tiles[i];
      const int e = pl.experts_of[me][tl.j];
      if (tl.s == me) {
        compute_tile(pl, experts[tl.j], tl, mine.data + (pl.o0[me][e] + tl.r0) * mine.ld + tl.n0,
                     mine.ld);
        continue;
      }
      float* slice = stage + pl.stage_at[me][tl.s] * N;
      compute_tile(pl, experts[tl.j], tl, slice + (pl.so[tl.s][e] + tl.r0) * N + tl.n0, N);
      if (done[tl.s].fetch_add(1, std::memory_order_acq_rel) + 1 == pl.tiles(me, tl.s)) {
        rt.put(tl.s, recv_at + fbytes(pl.recv_at[me][tl.s] * N), slice,
               fbytes(pl.rows[me][tl.s] * N));
        rt.signal(tl.s, arrive + me, 1, Runtime::Sources::kept);  // the slice stays as it is
      }
    }
  });
  for (int h : remote_first(me, P)) {
    if (h == me || pl.tiles(h, me) == 0) continue;
    rt.wait(arrive + h, rt.expect(arrive + h, 1),
            detail::make_string("gemm.arrive[", h, "]: slice from rank ", h));
    unpack(rt, pl, h, rt.data_as<const float>(recv_at) + pl.recv_at[h][me] * N, mine);
  }
}

void run_unfused(Runtime& rt, const Plan& pl, const std::vector<LocalExpert>& experts,
                 const OutRef& mine) {
  const int P = pl.P, me = pl.me;
  const std::int64_t N = pl.N;
  // Scratch in the runtime's data area, reused across calls (fresh vectors cost page faults and
  // zeroing every call; see embedding_alltoall.cpp). Agreed sizes: reserve is collective.
  rt.reserve(pl.stage_bytes() + pl.recv_bytes());
  float* stage = rt.data_as<float>(0);
  std::vector<Tile> tiles;
  for (int s = 0; s < P; ++s) pl.add_tiles(s, tiles);
  const int grid = rt.grid_for(tiles.size());
  rt.launch(grid, [&](int w) {
    for (std::size_t i = static_cast<std::size_t>(w); i < tiles.size();
         i += static_cast<std::size_t>(grid)) {
      const Tile& tl = tiles[i];
      const int e = pl.experts_of[me][tl.j];
      compute_tile(pl, experts[tl.j], tl,
                   stage + (pl.stage_at[me][tl.s] + pl.so[tl.s][e] + tl.r0) * N + tl.n0, N);
    }
  });
  std::vector<int> sc(P), sd(P), rc(P), rd(P);
  for (int q = 0; q < P; ++q) {
    const std::int64_t v[4] = {pl.rows[me][q] * N, pl.stage_at[me][q] * N, pl.rows[q][me] * N,
                               pl.recv_at[q][me] * N};
    for (std::int64_t x : v)
      if (x > INT32_MAX)
        throw UnsupportedError(
            "fusedcoll mpi: unfused GemmAllToAll block exceeds MPI's int counts");
    sc[q] = static_cast<int>(v[0]);
    sd[q] = static_cast<int>(v[1]);
    rc[q] = static_cast<int>(v[2]);
    rd[q] = static_cast<int>(v[3]);
  }
  float* recv = rt.data_as<float>(pl.stage_bytes());
  std::vector<MPI_Request> req(1, MPI_REQUEST_NULL);
  FC_CHECK_MPI(MPI_Ialltoallv(stage, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(),
                              MPI_FLOAT, rt.comm(), &req[0]));
  rt.wait_requests(req, "MPI_Ialltoallv of the expert outputs");
  for (int h = 0; h < P; ++h) unpack(rt, pl, h, recv + pl.recv_at[h][me] * N, mine);
}

}  // namespace

void gemm_alltoall(Runtime& rt, const GemmAllToAllArgs& args, Mode mode) {
  // Scale-up puts rows straight into a source's output when that is a SymmetricBuffer.
  std::vector<Landing> land;
  enter(rt, "gemm_alltoall", mode, args, &land, [&] {
    return mode == Mode::scale_up ? output_region(args.output) : Region{};
  });
  const Plan pl(args, rt.rank(), rt.size());
  const OutRef mine{static_cast<float*>(args.output.data()), args.output.stride(0)};
  switch (mode) {
    case Mode::scale_up:
      run_scale_up(rt, pl, args.local_experts, mine, land);
      break;
    case Mode::scale_out:
      run_scale_out(rt, pl, args.local_experts, mine);
      break;
    case Mode::unfused:
      run_unfused(rt, pl, args.local_experts, mine);
      break;
  }
}

}  // namespace fusedcoll::mpi
