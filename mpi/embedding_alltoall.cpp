// EmbeddingAllToAll on MPI (docs/semantics.md, "EmbeddingAllToAll"; the kernels follow
// emu/embedding_alltoall.cpp). The plan (tiles, order, counts, layouts) is
// detail/embedding_plan.hpp's; this file says how rows move and how completion is observed. A tile is (local table, block of up to kBagBlock samples of ONE
// destination's batch range); every pooled element comes from the shared kernel
// `detail::embedding_bag_rows`, so the bits are ref/'s whatever the tiling or the mode.
//
// Every mode runs a persistent grid of workgroups (oneTBB tasks) over the tiles, table by table
// and within a table in the transport's destination order (rma: rank+1, rank+2, ..., local
// last); where the transport wants data finished destination by destination (p2p, across hosts:
// other hosts' ranks first), scale-up goes destination by destination and scale-out, where its
// wire time reaches its compute, destination by destination and block by block within a
// destination, so that each slice is complete, and leaves, while the rest is computed
// (order_for; mpi/transport.hpp; detail::embedding::scale_out_order). Workgroups poll the transport
// between tiles. No workgroup waits for another: the waits for peers come after this rank's grid
// has sent everything, so the grid's size never decides whether the call can finish.
//
// - scale_up (per-tile puts): a tile is pooled into this rank's staging area and each of its rows
//   is put straight to its final position in the destination's receive area (laid out like the
//   output, [B_q, T, D]). The tiles' signals on 'emb.from'[me] (MPI_Win_flush, then an atomic add)
//   are coalesced: one per (workgroup, destination) after the workgroup's last tile, adding its
//   tile count. A signal costs two MPI_Win_flush calls, measured at 50-100 us each with 4 ranks on
//   2 cores (Open MPI yields inside its progress loop when oversubscribed), i.e. most of the call
//   if paid per tile; and the receiver only waits once its own tiles are done, so earlier signals
//   would not let it start sooner. The receiver waits for every source's tile count and copies the
//   remote rows into its output: MPI one-sided puts land in a window, not in ordinary user memory.
//   When the destination's output lies in a SymmetricBuffer, rows go straight into it and nothing
//   is copied (the emulator's zero-copy store).
// - scale_out (staged slices): remote tiles pool straight into this rank's staging slice for the
//   destination ([B_q, T_me, D], in the window); the workgroup whose tile completes a slice puts
//   the whole slice with one MPI_Put and signals 'emb.arrive'[me]; where the transport asks for
//   pieces (Transport::piece_bytes: p2p, to another host, when the link this rank measured
//   bounds the call), a slice leaves in pieces of whole sample blocks as they complete, and the
//   workgroup putting the last piece signals. Receivers unpack the slices.
// - unfused: pool everything into L [B, T_me, D], then MPI_Ialltoallv and the permutation into
//   table-id order.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fusedcoll/detail/embedding_plan.hpp"
#include "mpi/ops.hpp"

namespace fusedcoll::mpi {
namespace {

using namespace fusedcoll::detail::embedding;  // Plan, Tile, kBagBlock, pool

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Out {
  float* data = nullptr;
  std::int64_t s0 = 0, s1 = 0;
};

/// kEmbeddingPoolWork's units in a call: the elements this rank gathers.
double gathered_elements(const Plan& pl, const std::vector<EmbeddingTableShard>& shards) {
  double rows = 0;
  for (const EmbeddingTableShard& sh : shards) rows += static_cast<double>(sh.indices.numel());
  return rows * static_cast<double>(pl.D);
}

/// The tile order. Where the transport wants data finished destination by destination (p2p:
/// finished slices then leave while the rest is computed), scale-up finishes each destination's
/// tiles in turn (it puts rows per tile anyway and keeps a table's tiles together), and scale-out
/// follows the plan's scale_out_order: its bytes for other hosts' ranks at the rate this rank
/// measured from each host (Transport::link_rate) against the call's pooling at the seconds per
/// gathered element this rank's earlier calls took (Runtime::compute_seconds_per). Bytes within a
/// host move at memory speed and count for nothing (one host over p2p: table-major). Elsewhere
/// puts are cheap and table-major's locality wins.
Plan::Order order_for(const Runtime& rt, const Plan& pl, Mode mode, double work) {
  if (!rt.transport().destination_by_destination()) return Plan::Order::table_major;
  if (mode == Mode::scale_up) return Plan::Order::destination_major;
  const std::vector<int>& host = rt.host_of();
  double wire = 0;
  for (int q = 0; q < pl.P; ++q) {
    const double bytes = static_cast<double>(fbytes(pl.slice_floats(pl.me, q)));
    if (host[q] == host[pl.me] || bytes == 0) continue;
    const double rate = rt.transport().link_rate(q);
    if (rate <= 0) return Plan::Order::table_major;  // unmeasured: whole slices measure it
    wire += bytes / rate;
  }
  return scale_out_order(wire, work * rt.compute_seconds_per(kEmbeddingPoolWork));
}

/// The sources in the order their slices for this rank are expected to complete: by this
/// rank's position in each source's destination order.
std::vector<int> sources_for(const Runtime& rt) {
  const int me = rt.rank(), P = rt.size();
  std::vector<int> order = remote_first(me, P), at(static_cast<std::size_t>(P), 0);
  for (int p = 0; p < P; ++p) {
    const std::vector<int> theirs = rt.transport().destinations(p);
    at[static_cast<std::size_t>(p)] =
        static_cast<int>(std::find(theirs.begin(), theirs.end(), me) - theirs.begin());
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return at[static_cast<std::size_t>(a)] < at[static_cast<std::size_t>(b)];
  });
  return order;
}

/// Copies the block [B_me, T_p, D] received from `p` into the output, rows spread over the grid.
void unpack(Runtime& rt, const Plan& pl, int p, const float* block, const Out& out) {
  if (pl.D == 0 || pl.tp[p] == 0) return;
  const std::int64_t tpp = pl.tp[p], B = pl.batch[pl.me];
  const int grid = rt.grid_for(static_cast<std::size_t>(ceil_div(B, kBagBlock)));
  rt.launch(grid, [&](int w) {
    for (std::int64_t i = w, n = 0; i < B; i += grid, ++n) {
      if (n % kBagBlock == 0) rt.poll();  // other sources' slices may still be on the wire
      for (std::int64_t k = 0; k < tpp; ++k)
        std::memcpy(out.data + i * out.s0 + pl.ids[p][k] * out.s1, block + (i * tpp + k) * pl.D,
                    fbytes(pl.D));
    }
  });
}

void run_scale_up(Runtime& rt, const Plan& pl, const std::vector<EmbeddingTableShard>& shards,
                  const Out& mine, const std::vector<Landing>& land) {
  const int P = pl.P, me = pl.me;
  const std::int64_t D = pl.D, T = pl.T, tpm = pl.tp[me];
  // Tiles pool into the staging area, which stays untouched until the call ends, so their puts
  // need no completion before the next tile (a reused buffer would need MPI_Win_flush_local,
  // which costs as much as a flush here).
  const std::size_t stage_at = 0, recv_at = fbytes(pl.stage_floats());
  rt.reserve(recv_at + fbytes(pl.recv_floats()));
  const int from = rt.slots("emb.from", P);
  const std::vector<Tile> tiles =
      pl.fused_tiles(order_for(rt, pl, Mode::scale_up, 0), rt.transport().destinations(me));
  const int grid = rt.grid_for(tiles.size());
  float* stage = rt.data_as<float>(stage_at);
  rt.launch(grid, [&](int w) {
    std::vector<std::uint64_t> sent(static_cast<std::size_t>(P), 0);
    for (std::size_t i = static_cast<std::size_t>(w); i < tiles.size();
         i += static_cast<std::size_t>(grid)) {
      rt.poll();  // earlier tiles' rows leave, peers' arrive, while this rank computes
      const Tile& tl = tiles[i];
      const std::int64_t t = pl.ids[me][tl.k];
      const std::int64_t b0 = pl.start[tl.q] + tl.i0, b1 = pl.start[tl.q] + tl.i1;
      if (tl.q == me) {
        if (D > 0)
          pool(shards[tl.k], D, pl.pooling, b0, b1, mine.data + tl.i0 * mine.s0 + t * mine.s1,
               mine.s0);
        continue;
      }
      float* rows = stage + pl.stage_offset(tl.q) + (tl.i0 * tpm + tl.k) * D;  // row stride tpm*D
      pool(shards[tl.k], D, pl.pooling, b0, b1, rows, tpm * D);
      const Landing& to = land[static_cast<std::size_t>(tl.q)];
      for (std::int64_t r = 0; r < tl.i1 - tl.i0; ++r) {
        const float* row = rows + r * tpm * D;
        if (to.id >= 0)  // zero-copy: into the destination's output itself
          rt.put_buffer(to.id, tl.q,
                        static_cast<std::size_t>(to.offset) +
                            fbytes((tl.i0 + r) * to.layout[0] + t * to.layout[1]),
                        row, fbytes(D));
        else
          rt.put(tl.q, recv_at + fbytes(((tl.i0 + r) * T + t) * D), row, fbytes(D));
      }
      ++sent[static_cast<std::size_t>(tl.q)];
    }
    // The tiles' signals, one per destination (see the file comment).
    for (int q : remote_first(me, P)) {
      if (sent[static_cast<std::size_t>(q)] == 0) continue;
      if (land[static_cast<std::size_t>(q)].id >= 0)
        rt.flush_buffer(land[static_cast<std::size_t>(q)].id, q);
      rt.signal(q, from + me, sent[static_cast<std::size_t>(q)], Runtime::Sources::kept);
    }
  });
  const float* recv = rt.data_as<const float>(recv_at);
  for (int p : sources_for(rt)) {
    if (p == me || pl.tiles(p, me) == 0) continue;
    rt.wait(from + p, rt.expect(from + p, static_cast<std::uint64_t>(pl.tiles(p, me))),
            detail::make_string("emb.from[", p, "]: tiles from rank ", p));
  }
  if (D == 0 || land[static_cast<std::size_t>(me)].id >= 0) return;
  const std::int64_t B = pl.batch[me];
  std::vector<char> remote(static_cast<std::size_t>(T), 1);
  for (std::int64_t t : pl.ids[me]) remote[static_cast<std::size_t>(t)] = 0;
  const int g2 = rt.grid_for(static_cast<std::size_t>(ceil_div(B, kBagBlock)));
  rt.launch(g2, [&](int w) {
    for (std::int64_t i = w; i < B; i += g2)
      for (std::int64_t t = 0; t < T; ++t)
        if (remote[static_cast<std::size_t>(t)])
          std::memcpy(mine.data + i * mine.s0 + t * mine.s1, recv + (i * T + t) * D, fbytes(D));
  });
}

void run_scale_out(Runtime& rt, const Plan& pl, const std::vector<EmbeddingTableShard>& shards,
                   const Out& mine) {
  const int P = pl.P, me = pl.me;
  const std::int64_t D = pl.D, tpm = pl.tp[me];
  const std::size_t stage_at = 0, recv_at = fbytes(pl.stage_floats());
  rt.reserve(recv_at + fbytes(pl.recv_floats()));
  const int arrive = rt.slots("emb.arrive", P);
  // Pieces: runs of whole sample blocks of one destination's slice, in the destination-block
  // order, of about the bytes the transport asks for (Transport::piece_bytes: p2p, to other
  // hosts, when the link bounds the call); otherwise the whole slice in one put.
  const std::vector<int>& host = rt.host_of();
  std::int64_t crossing = 0;  // bytes this rank's host sends to other hosts in this call
  for (int p = 0; p < P; ++p)
    for (int q = 0; q < P; ++q)
      if (host[p] == host[me] && host[q] != host[me])
        crossing += static_cast<std::int64_t>(fbytes(pl.slice_floats(p, q)));
  std::int64_t leaving = 0;  // bytes this rank sends to other hosts in this call
  for (int q = 0; q < P; ++q)
    if (host[q] != host[me]) leaving += static_cast<std::int64_t>(fbytes(pl.slice_floats(me, q)));
  const double work = gathered_elements(pl, shards);
  const Plan::Order order = order_for(rt, pl, Mode::scale_out, work);
  // Pieces need the blocks of a slice computed in sample order.
  const bool blocks = order == Plan::Order::destination_block_major;
  const std::int64_t block_bytes = static_cast<std::int64_t>(fbytes(kBagBlock * tpm * D));
  std::vector<std::int64_t> piece_rows(static_cast<std::size_t>(P));   // samples per piece
  std::vector<std::size_t> first(static_cast<std::size_t>(P) + 1, 0);  // q's first piece
  for (int q = 0; q < P; ++q) {
    const auto piece =
        blocks ? static_cast<std::int64_t>(rt.transport().piece_bytes(q, leaving, crossing)) : 0;
    piece_rows[q] =
        piece > 0
            ? std::max<std::int64_t>(1, piece / std::max<std::int64_t>(1, block_bytes)) * kBagBlock
            : std::max<std::int64_t>(1, pl.batch[q]);
    first[q + 1] = first[q] + static_cast<std::size_t>(ceil_div(pl.batch[q], piece_rows[q]));
  }
  // Tiles pooled per piece, and pieces put per destination (the last one signals).
  std::vector<std::atomic<std::int64_t>> done(first[P]), shipped(static_cast<std::size_t>(P));
  for (auto& d : done) d.store(0, std::memory_order_relaxed);
  for (auto& d : shipped) d.store(0, std::memory_order_relaxed);
  const std::vector<Tile> tiles = pl.fused_tiles(order, rt.transport().destinations(me));
  const int grid = rt.grid_for(tiles.size());
  float* stage = rt.data_as<float>(stage_at);
  const auto began = std::chrono::steady_clock::now();
  rt.launch(grid, [&](int w) {
    for (std::size_t i = static_cast<std::size_t>(w); i < tiles.size();
         i += static_cast<std::size_t>(grid)) {
      rt.poll();  // finished pieces leave, peers' arrive, while this rank computes
      const Tile& tl = tiles[i];
      const std::int64_t b0 = pl.start[tl.q] + tl.i0, b1 = pl.start[tl.q] + tl.i1;
      if (tl.q == me) {
        if (D > 0)
          pool(shards[tl.k], D, pl.pooling, b0, b1,
               mine.data + tl.i0 * mine.s0 + pl.ids[me][tl.k] * mine.s1, mine.s0);
        continue;
      }
      float* slice = stage + pl.stage_offset(tl.q);  // [B_q, T_me, D]
      pool(shards[tl.k], D, pl.pooling, b0, b1, slice + (tl.i0 * tpm + tl.k) * D, tpm * D);
      const std::int64_t rows = piece_rows[tl.q];
      const std::int64_t c = tl.i0 / rows;  // the piece: samples [r0, r1) of the slice
      const std::int64_t r0 = c * rows, r1 = std::min(r0 + rows, pl.batch[tl.q]);
      // acq_rel: the last workgroup must see every other workgroup's rows before it puts them.
      if (done[first[tl.q] + static_cast<std::size_t>(c)].fetch_add(1, std::memory_order_acq_rel) +
              1 ==
          ceil_div(r1 - r0, kBagBlock) * tpm) {
        rt.put(tl.q, recv_at + fbytes(pl.recv_offset(me, tl.q) + r0 * tpm * D),
               slice + r0 * tpm * D, fbytes((r1 - r0) * tpm * D));
        // After every piece's put has been issued (the puts to q then precede the signal in
        // q's view, whatever workgroups issued them). The staging slice stays untouched until
        // the call ends: the signal need not wait for the peer to take the data.
        if (shipped[tl.q].fetch_add(1, std::memory_order_acq_rel) + 1 ==
            static_cast<std::int64_t>(first[tl.q + 1] - first[tl.q]))
          rt.signal(tl.q, arrive + me, 1, Runtime::Sources::kept);
      }
    }
  });
  // The grid's wall time, its puts and polls included: what the call's compute costs this rank.
  rt.add_compute_sample(kEmbeddingPoolWork, work, seconds_since(began));
  for (int p : sources_for(rt)) {
    if (p == me || pl.tiles(p, me) == 0) continue;
    rt.wait(arrive + p, rt.expect(arrive + p, 1),
            detail::make_string("emb.arrive[", p, "]: slice from rank ", p));
    unpack(rt, pl, p, rt.data_as<const float>(recv_at) + pl.recv_offset(p, me), mine);
  }
}

void run_unfused(Runtime& rt, const Plan& pl, const std::vector<EmbeddingTableShard>& shards,
                 const Out& mine) {
  const int P = pl.P, me = pl.me;
  const std::int64_t D = pl.D, tpm = pl.tp[me];
  // The pooled blocks and the receive area live in the runtime's data area, as a user would keep
  // them across calls: two fresh 8 MiB vectors per call cost 9 of 24 ms at -e 8M here (page
  // faults and zeroing), the step the unfused times showed between 2 and 8 MiB. Sizes are agreed
  // maxima (reserve is collective).
  const std::size_t recv_at = fbytes(pl.stage_floats());
  rt.reserve(recv_at + fbytes(pl.recv_floats()));
  float* local = rt.data_as<float>(0);
  const std::vector<Tile> tiles = pl.unfused_tiles();
  const int grid = rt.grid_for(tiles.size());
  const auto began = std::chrono::steady_clock::now();
  rt.launch(grid, [&](int w) {
    for (std::size_t i = static_cast<std::size_t>(w); i < tiles.size();
         i += static_cast<std::size_t>(grid)) {
      const Tile& tl = tiles[i];
      pool(shards[tl.k], D, pl.pooling, tl.i0, tl.i1, local + (tl.i0 * tpm + tl.k) * D, tpm * D);
    }
  });
  rt.add_compute_sample(kEmbeddingPoolWork, gathered_elements(pl, shards), seconds_since(began));
  // MPI counts are int: this baseline refuses what MPI_Alltoallv cannot express.
  std::vector<int> sc(P), sd(P), rc(P), rd(P);
  for (int q = 0; q < P; ++q) {
    const std::int64_t v[4] = {pl.slice_floats(me, q), pl.stage_offset(q), pl.slice_floats(q, me),
                               pl.recv_offset(q, me)};
    for (std::int64_t x : v)
      if (x > INT32_MAX)
        throw UnsupportedError(
            "fusedcoll mpi: unfused EmbeddingAllToAll block exceeds MPI's int counts");
    sc[q] = static_cast<int>(v[0]);
    sd[q] = static_cast<int>(v[1]);
    rc[q] = static_cast<int>(v[2]);
    rd[q] = static_cast<int>(v[3]);
  }
  float* recv = rt.data_as<float>(recv_at);
  std::vector<MPI_Request> req(1, MPI_REQUEST_NULL);
  FC_CHECK_MPI(MPI_Ialltoallv(local, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(),
                              MPI_FLOAT, rt.comm(), &req[0]));
  rt.wait_requests(req, "MPI_Ialltoallv of the pooled blocks");
  for (int p = 0; p < P; ++p) unpack(rt, pl, p, recv + pl.recv_offset(p, me), mine);
}

}  // namespace

void embedding_alltoall(Runtime& rt, const EmbeddingAllToAllArgs& args, Mode mode) {
  // Scale-up puts rows straight into a destination's output when that is a SymmetricBuffer.
  std::vector<Landing> land;
  enter(rt, "embedding_alltoall", mode, args, &land,
        [&] { return mode == Mode::scale_up ? output_region(args.output) : Region{}; });
  const Plan pl(args, rt.rank(), rt.size());
  const Out mine{static_cast<float*>(args.output.data()), args.output.stride(0),
                 args.output.stride(1)};
  switch (mode) {
    case Mode::scale_up:
      run_scale_up(rt, pl, args.local_tables, mine, land);
      break;
    case Mode::scale_out:
      run_scale_out(rt, pl, args.local_tables, mine);
      break;
    case Mode::unfused:
      run_unfused(rt, pl, args.local_tables, mine);
      break;
  }
}

}  // namespace fusedcoll::mpi
