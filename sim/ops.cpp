// The operators as simulator programs (sim/ops.hpp), each mode priced as the emulator's kernel of
// that mode runs: a persistent kernel (Kernel: the plan's work items, detail::persistent_grid),
// workgroup w on compute unit w mod CUs. The operators' tile loops claim their tiles (emu:
// `WgContext::claim`): in tile order, each goes to the compute unit that frees first; the
// collectives' and the owners' reductions are dealt statically, tiles w, w + grid, ... to
// workgroup w. A CU runs its tiles back to back, each for the cost model's seconds of the tile's
// work (a latency-bound tile holds its workgroup longer, not its CU: model::latency_seconds). Copies and reductions after the data landed are priced per workgroup the same way (the
// busiest CU's sum), not spread over the device: a kernel whose copy falls to few workgroups is
// that slow in the emulator too.
#include "sim/ops.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fusedcoll/detail/collective_plan.hpp"
#include "fusedcoll/detail/gemv_plan.hpp"
#include "fusedcoll/detail/schedule.hpp"
#include "fusedcoll/error.hpp"

namespace fusedcoll::sim {
namespace {

int cus(const Cluster& c) { return c.preset.device.compute_units; }
double launch(const Cluster& c) { return model::launch_seconds(c.preset); }

/// A fused kernel's tiles in plan order on `k`: under scale_up each remote tile's bytes leave as
/// it ends; under scale_out the time each remote destination's slice is complete (its last tile's
/// end) is returned. `tile(i)` gives {cost, destination, bytes} of tile i.
template <class TileOf>
std::vector<double> run_fused_tiles(const Cluster& c, Kernel& k, std::size_t tiles, int me, int P,
                                    Mode mode, Step& x, TileOf tile) {
  std::vector<double> slice_end(static_cast<std::size_t>(P), 0.0);
  for (std::size_t i = 0; i < tiles; ++i) {
    const auto [cost, q, bytes] = tile(i);
    const double end = launch(c) + k.claim(cost);
    if (q == me) continue;
    if (mode == Mode::scale_up)
      x.sends.push_back({end, q, bytes});
    else
      slice_end[static_cast<std::size_t>(q)] = std::max(slice_end[static_cast<std::size_t>(q)], end);
  }
  return slice_end;
}

/// GemmAllToAll's first touches (emu/gemm_alltoall.cpp, Touched): a kernel's first tile on each
/// weight panel reads it from memory. Tiles are priced in claim order; one per kernel.
/// `working_set`: the call's (detail::gemm::Plan::working_set_bytes), as the emulator declares it.
class Panels {
 public:
  Panels(const detail::gemm::Plan& pl, double working_set)
      : pl_(pl), working_set_(working_set),
        seen_(static_cast<std::size_t>(std::max<std::int64_t>(1, pl.panels())), 0) {}
  Cost cost(const Cluster& c, const detail::gemm::Tile& t) {
    const bool first = std::exchange(seen_[static_cast<std::size_t>(pl_.panel_of(t))], 1) == 0;
    return cost_of(c, model::gemm(t.r1 - t.r0, t.n1 - t.n0, pl_.K, first), working_set_);
  }

 private:
  const detail::gemm::Plan& pl_;
  double working_set_;
  std::vector<char> seen_;
};

void check_ranks(int world_size, const Cluster& c, const char* op) {
  if (world_size != c.ranks())
    throw InvalidArgument(std::string("op ") + op + ": the problem has " + std::to_string(world_size) +
                          " ranks, the cluster " + std::to_string(c.ranks()));
}

}  // namespace

// --- Kernels ------------------------------------------------------------------------------------

Kernel::Kernel(const Cluster& c, std::size_t work)
    : c_(&c),
      grid_(detail::persistent_grid(work,
                                    static_cast<std::size_t>(c.preset.device.resident_wgs_per_cu) *
                                        static_cast<std::size_t>(cus(c)))),
      cu_(static_cast<std::size_t>(cus(c)), 0.0) {}

Cost cost_of(const Cluster& c, std::initializer_list<model::Work> works, double working_set) {
  // Every node of the cluster is full: G devices share a node's memory where the preset's
  // devices are cores of one machine (model::shares_node_memory), as the emulator's do.
  const int share = model::shares_node_memory(c.preset) ? c.preset.links.gpus_per_node : 0;
  double latency = 0;
  for (const model::Work& w : works) latency += model::latency_seconds(c.preset, w);
  return {model::span_seconds(c.preset, works, share, working_set), latency};
}

void Kernel::track_workgroups() {
  if (!wg_.empty()) return;
  // Until now no item outlasted its unit's time: every workgroup was free by its unit's time.
  wg_.assign(static_cast<std::size_t>(grid_), 0.0);
  free_.clear();
}

double Kernel::book(std::size_t w, Cost cost) {
  double& unit = cu_[w % cu_.size()];
  // The item's loads are in flight from the workgroup's own free time, while it waits for its
  // turn on the unit (as the emulator counts them).
  const double start = std::max(wg_[w], unit);
  unit = start + cost.seconds;
  wg_[w] = std::max(unit, wg_[w] + cost.latency);
  return wg_[w];
}

double Kernel::claim(Cost cost) {
  if (cost.latency > 0) track_workgroups();
  if (!wg_.empty()) {
    std::size_t best = 0;
    double best_at = std::max(wg_[0], cu_[0]);
    for (std::size_t w = 1; w < wg_.size(); ++w) {
      const double at = std::max(wg_[w], cu_[w % cu_.size()]);
      if (at < best_at || (at == best_at && wg_[w] < wg_[best])) best = w, best_at = at;
    }
    return book(best, cost);
  }
  const double seconds = cost.seconds;
  // The CUs the grid occupies by (free time, index) in a min-heap: a 128-node iteration claims
  // ~10^7 tiles, and a scan of 100+ CUs per claim was most of its simulation time.
  const auto later = [](const std::pair<double, int>& a, const std::pair<double, int>& b) {
    return a > b;
  };
  if (free_.empty()) {
    const auto used = std::min(cu_.size(), static_cast<std::size_t>(grid_));
    for (std::size_t i = 0; i < used; ++i) free_.emplace_back(cu_[i], static_cast<int>(i));
    std::make_heap(free_.begin(), free_.end(), later);
  }
  std::pop_heap(free_.begin(), free_.end(), later);
  const double end = free_.back().first += seconds;
  cu_[static_cast<std::size_t>(free_.back().second)] = end;
  std::push_heap(free_.begin(), free_.end(), later);
  return end;
}

double Kernel::deal(std::size_t i, Cost cost) {
  free_.clear();
  if (cost.latency > 0) track_workgroups();
  if (!wg_.empty()) return book(i % static_cast<std::size_t>(grid_), cost);
  return cu_[(i % static_cast<std::size_t>(grid_)) % cu_.size()] += cost.seconds;
}

void Kernel::add(int w, Cost cost) {
  free_.clear();
  if (cost.latency > 0) track_workgroups();
  if (!wg_.empty()) {
    book(static_cast<std::size_t>(w) % wg_.size(), cost);
    return;
  }
  cu_[static_cast<std::size_t>(w) % cu_.size()] += cost.seconds;
}

double Kernel::makespan() const {
  const double units = *std::max_element(cu_.begin(), cu_.end());
  return wg_.empty() ? units : std::max(units, *std::max_element(wg_.begin(), wg_.end()));
}

double Kernel::seconds() const { return launch(*c_) + makespan(); }

double copy_kernel(const Cluster& c, std::size_t work,
                   const std::function<std::int64_t(std::int64_t w, std::int64_t grid)>& bytes,
                   double working_set) {
  Kernel k(c, work);
  for (int w = 0; w < k.grid(); ++w)
    k.add(w, cost_of(c, model::copy(bytes(w, k.grid())), working_set));
  return k.makespan();
}

// --- EmbeddingAllToAll (emu/embedding_alltoall.cpp) ---------------------------------------------

Program embedding_steps(const detail::embedding::Plan& pl, const EmbeddingCost& cost,
                        const Cluster& c, Mode mode, const std::string& kernel_phase,
                        const std::string& exchange_phase) {
  using detail::embedding::Tile;
  const int P = pl.P, me = pl.me;
  if (static_cast<std::int64_t>(cost.width.size()) != pl.T)
    throw InvalidArgument("sim: " + std::to_string(cost.width.size()) + " table widths for " +
                          std::to_string(pl.T) + " tables");
  // Floats per sample of each rank's slice.
  std::vector<std::int64_t> row(static_cast<std::size_t>(P), 0);
  for (int p = 0; p < P; ++p)
    for (std::int64_t t : pl.ids[static_cast<std::size_t>(p)])
      row[static_cast<std::size_t>(p)] += cost.width[static_cast<std::size_t>(t)];
  auto slice_bytes = [&](int p, int q) {
    return pl.batch[static_cast<std::size_t>(q)] * row[static_cast<std::size_t>(p)] * 4;
  };
  Program prog;
  if (mode == Mode::unfused) {
    // Kernel 1 pools every local bag; kernel 2 puts every block, then unpacks all P blocks.
    const std::vector<Tile> tiles = pl.unfused_tiles();
    Kernel k1(c, tiles.size());
    for (const Tile& t : tiles) k1.claim(cost.pool(t.k, t.i0, t.i1));
    prog.push_back(compute_step(kernel_phase, k1.seconds()));
    Step x = exchange_step(exchange_phase);
    x.seconds = launch(c);
    // The kernel's workgroup j puts the block of peer remote_first(me)[j].
    std::int64_t all = 0;
    for (int q : detail::remote_first(me, P)) {
      all += row[static_cast<std::size_t>(q)];
      if (q != me) x.sends.push_back({launch(c), q, slice_bytes(me, q)});
    }
    x.after = copy_kernel(c, pl.a2a_items(), [&](std::int64_t w, std::int64_t g) {
      return pl.unpack_rows(w, g) * all * 4;
    });
    prog.push_back(std::move(x));
    return prog;
  }
  const std::vector<Tile> tiles = pl.fused_tiles();
  Kernel k(c, tiles.size());
  Step x = exchange_step(exchange_phase);
  // Under scale_up a tile's rows are stored straight into q's output.
  const std::vector<double> slice_end = run_fused_tiles(c, k, tiles.size(), me, P, mode, x, [&](std::size_t i) {
    const Tile& t = tiles[i];
    const std::int64_t b0 = pl.start[static_cast<std::size_t>(t.q)];
    const std::int64_t width = cost.width[static_cast<std::size_t>(
        pl.ids[static_cast<std::size_t>(me)][static_cast<std::size_t>(t.k)])];
    Cost tile = cost.pool(t.k, b0 + t.i0, b0 + t.i1);
    // Under scale_up the workgroup issues a store per row and a signal, each on its unit
    // (model::issue_seconds, as the emulator's WgContext::store and signal book them).
    if (mode == Mode::scale_up)
      tile.seconds += double(t.i1 - t.i0 + 1) * model::issue_seconds(c.preset, me, t.q);
    return std::tuple{tile, t.q, (t.i1 - t.i0) * width * 4};
  });
  x.seconds = k.seconds();
  if (mode == Mode::scale_out) {
    // The slice leaves with its last tile; every workgroup unpacks its rows of each slice.
    std::int64_t remote = 0;
    for (int q : detail::remote_first(me, P)) {
      if (q == me) continue;
      if (pl.tiles(me, q) > 0)
        x.sends.push_back({slice_end[static_cast<std::size_t>(q)], q, slice_bytes(me, q)});
      if (pl.tiles(q, me) > 0) remote += row[static_cast<std::size_t>(q)];
    }
    x.after = copy_kernel(c, tiles.size(), [&](std::int64_t w, std::int64_t g) {
      return pl.unpack_rows(w, g) * remote * 4;
    });
  }
  prog.push_back(std::move(x));
  return prog;
}

Program embedding_program(const EmbeddingProblem& pb, const Cluster& c, int rank, Mode mode) {
  check_ranks(pb.world_size, c, "embedding");
  EmbeddingAllToAllArgs a;
  a.dim = pb.dim;
  a.owner = pb.owner;
  a.batch_sizes = pb.batch_sizes;
  a.pooling = pb.pooling;
  const detail::embedding::Plan pl(a, rank, c.ranks());
  const int index_bytes = pb.index_dtype == DType::i64 ? 8 : 4;
  EmbeddingCost cost;
  cost.width.assign(static_cast<std::size_t>(pl.T), pl.D);
  // The pool of bags [b0, b1) (global ids) of local table k: the bags' own lengths.
  cost.pool = [&](int k, std::int64_t b0, std::int64_t b1) {
    const std::int64_t t = pl.ids[static_cast<std::size_t>(pl.me)][static_cast<std::size_t>(k)];
    std::int64_t rows = 0;
    for (std::int64_t b = b0; b < b1; ++b) rows += pb.bag_length(t, b);
    return cost_of(c, model::embedding(rows, b1 - b0, pl.D, index_bytes, pb.weighted));
  };
  return embedding_steps(pl, cost, c, mode, "embedding_alltoall", "embedding_alltoall");
}

// --- GemmAllToAll (emu/gemm_alltoall.cpp) -------------------------------------------------------

double expert_kernel_seconds(const detail::gemm::Plan& pl, const Cluster& c) {
  const std::vector<detail::gemm::Tile> tiles = pl.unfused_tiles();
  Kernel k(c, tiles.size());
  Panels panels(pl, double(pl.working_set_bytes(Mode::unfused)));
  for (const detail::gemm::Tile& t : tiles) k.claim(panels.cost(c, t));
  return k.seconds();
}

Program gemm_program(const GemmProblem& pb, const Cluster& c, int rank, Mode mode) {
  using namespace detail::gemm;
  check_ranks(pb.world_size, c, "gemm");
  GemmAllToAllArgs a;
  a.k = pb.k;
  a.n = pb.n;
  a.host = pb.host;
  a.counts = pb.counts;
  const Plan pl(a, rank, c.ranks());
  const int P = pl.P, me = pl.me;
  const std::int64_t N = pl.N;
  const double working_set = double(pl.working_set_bytes(mode));
  auto slice_bytes = [&](int h, int s) {
    return pl.rows[static_cast<std::size_t>(h)][static_cast<std::size_t>(s)] * N * 4;
  };
  Program prog;
  if (mode == Mode::unfused) {
    prog.push_back(compute_step("gemm_alltoall", expert_kernel_seconds(pl, c)));
    Step x = exchange_step("gemm_alltoall");
    x.seconds = launch(c);
    for (int s = 0; s < P; ++s)
      if (s != me) x.sends.push_back({launch(c), s, slice_bytes(me, s)});
    x.after = copy_kernel(c, pl.a2a_items(), [&](std::int64_t w, std::int64_t g) {
      std::int64_t rows = 0;
      for (int h = 0; h < P; ++h) rows += pl.unpack_rows(h, w, g);
      return rows * N * 4;
    }, working_set);
    prog.push_back(std::move(x));
    return prog;
  }
  const std::vector<Tile> tiles = pl.fused_tiles();
  Kernel k(c, tiles.size());
  Panels panels(pl, working_set);
  Step x = exchange_step("gemm_alltoall");
  const std::vector<double> slice_end = run_fused_tiles(c, k, tiles.size(), me, P, mode, x, [&](std::size_t i) {
    const Tile& t = tiles[i];
    return std::tuple{panels.cost(c, t), t.s, (t.r1 - t.r0) * (t.n1 - t.n0) * 4};
  });
  x.seconds = k.seconds();
  if (mode == Mode::scale_out) {
    for (int s = 0; s < P; ++s)
      if (s != me && pl.tiles(me, s) > 0) x.sends.push_back({slice_end[static_cast<std::size_t>(s)], s, slice_bytes(me, s)});
    x.after = copy_kernel(c, tiles.size(), [&](std::int64_t w, std::int64_t g) {
      std::int64_t rows = 0;
      for (int h = 0; h < P; ++h)
        if (h != me && pl.tiles(h, me) > 0) rows += pl.unpack_rows(h, w, g);
      return rows * N * 4;
    }, working_set);
  }
  prog.push_back(std::move(x));
  return prog;
}

// --- GemvAllReduce (emu/gemv_allreduce.cpp; unfused: emu/collectives.cpp's direct AllReduce) ----

Program gemv_program(const GemvProblem& pb, const Cluster& c, int rank, Mode mode) {
  using namespace detail::gemv;
  check_ranks(pb.world_size, c, "gemv");
  GemvAllReduceArgs a;
  a.m = pb.m;
  a.n = pb.n;
  a.k_splits = pb.k_splits;
  const Plan p(a, rank, c.ranks());
  const int P = p.P, me = p.me;
  auto cost = [&](const Tile& t) { return cost_of(c, model::gemv(p.m, p.k, t.n1 - t.n0)); };
  Program prog;
  if (mode == Mode::unfused) {
    Kernel k1(c, p.tiles.size());
    for (const Tile& t : p.tiles) k1.claim(cost(t));
    prog.push_back(compute_step("gemv_allreduce", k1.seconds()));
    // The direct AllReduce of the m x n partial (emu/collectives.cpp, its owner plan tiled as the
    // emulator tiles in virtual time): part q = chunk_of(m n, P, q) to its owner in tiles; the
    // owner folds each tile (copy + P - 1 reductions), puts it to every rank and copies it into
    // place; every rank copies the other parts out of scratch.
    const detail::collective::OwnerPlan op(
        detail::collective::Parts::chunks(p.m * p.n, P), me, P,
        detail::collective::Tiling::device(c.preset.device.resident_wgs_per_cu * cus(c), P), 4,
        /*gather=*/true);
    const auto& len = op.parts.len;
    const std::int64_t mine = len[static_cast<std::size_t>(me)];
    const std::size_t items = op.most_items();
    Step rs = exchange_step("gemv_allreduce");
    rs.seconds = launch(c);
    for (int q = 0; q < P; ++q)
      if (q != me && len[static_cast<std::size_t>(q)] > 0) rs.sends.push_back({launch(c), q, len[static_cast<std::size_t>(q)] * 4});
    Kernel red(c, items);
    for (std::size_t i = 0; i < op.reduce.size(); ++i) {
      const std::int64_t n = op.span(op.reduce[i]).length;
      red.deal(i, cost_of(c, {model::copy(n * 4), model::reduce(n * (P - 1)), model::copy(n * 4)}));
    }
    rs.after = red.makespan();
    prog.push_back(std::move(rs));
    Step ag = exchange_step("gemv_allreduce");
    for (int q = 0; q < P; ++q)
      if (q != me && mine > 0) ag.sends.push_back({0.0, q, mine * 4});
    Kernel col(c, items);
    for (std::size_t i = 0; i < op.collect.size(); ++i)
      col.deal(i, cost_of(c, model::copy(op.span(op.collect[i]).length * 4)));
    ag.after = col.makespan();
    prog.push_back(std::move(ag));
    return prog;
  }
  const std::size_t items = mode == Mode::scale_up ? p.tiles.size() : p.scale_out_items();
  Kernel k(c, items);
  Step rs = exchange_step("gemv_allreduce");
  std::vector<double> slice_end(static_cast<std::size_t>(P), 0.0);
  const std::int64_t tile_floats = p.m * kTileN;
  for (std::size_t i = 0; i < p.compute.size(); ++i) {
    const Tile& t = p.tiles[static_cast<std::size_t>(p.compute[i])];
    const double end = launch(c) + k.claim(cost(t));
    if (t.owner == me) continue;
    if (mode == Mode::scale_up)  // the whole tile buffer, put to the owner
      rs.sends.push_back({end, t.owner, tile_floats * 4});
    else
      slice_end[static_cast<std::size_t>(t.owner)] = std::max(slice_end[static_cast<std::size_t>(t.owner)], end);
  }
  rs.seconds = k.seconds();
  const Chunk mine = p.chunks[static_cast<std::size_t>(me)];
  Step ag = exchange_step("gemv_allreduce");
  Kernel red(c, items);
  if (mode == Mode::scale_up) {
    // The owner folds each of its tiles once all partials are in, then stores it into every y.
    for (std::size_t i = 0; i < p.mine.size(); ++i) {
      const Tile& t = p.tiles[static_cast<std::size_t>(p.mine[i])];
      const double end = red.deal(
          i, cost_of(c, {model::copy(tile_floats * 4), model::reduce(tile_floats * (P - 1))}));
      for (int q = 0; q < P; ++q)
        if (q != me) ag.sends.push_back({end, q, p.m * (t.n1 - t.n0) * 4});
    }
    ag.seconds = red.makespan();
  } else {
    for (int j = 0; j < P; ++j)
      if (j != me && p.chunks[static_cast<std::size_t>(j)].length > 0)
        rs.sends.push_back({slice_end[static_cast<std::size_t>(j)], j, p.m * p.chunks[static_cast<std::size_t>(j)].length * 4});
    for (std::size_t i = 0; i < p.mine.size(); ++i) {
      const Tile& t = p.tiles[static_cast<std::size_t>(p.mine[i])];
      const std::int64_t w = t.n1 - t.n0;
      red.deal(i, cost_of(c, {model::copy(p.m * w * 4), model::reduce(p.m * w * (P - 1))}));
    }
    rs.after = red.makespan();
    for (int q = 0; q < P; ++q)
      if (q != me && mine.length > 0) ag.sends.push_back({0.0, q, p.m * mine.length * 4});
    Kernel u(c, items);
    for (int j = 0; j < P; ++j)
      u.deal(static_cast<std::size_t>(j),
             cost_of(c, model::copy(p.m * p.chunks[static_cast<std::size_t>(j)].length * 4)));
    ag.after = u.makespan();
  }
  prog.push_back(std::move(rs));
  prog.push_back(std::move(ag));
  return prog;
}

// --- Problems -----------------------------------------------------------------------------------

EmbeddingProblem embedding_problem(const EmbeddingOp& op, int ranks) {
  if (op.tables < 1 || op.dim < 1 || op.global_batch < ranks || op.min_bag < 0 || op.max_bag < op.min_bag)
    throw InvalidArgument("op embedding: tables, dim >= 1, batch >= ranks, 0 <= min bag <= max bag");
  EmbeddingProblem p;
  p.world_size = ranks;
  p.dim = op.dim;
  for (std::int64_t t = 0; t < op.tables; ++t) {
    p.table_rows.push_back(1 << 20);
    p.owner.push_back(static_cast<int>(t % ranks));
  }
  p.batch_sizes = split_evenly(op.global_batch, ranks);
  p.min_bag = op.min_bag;
  p.max_bag = op.max_bag;
  p.seed = 2024;
  return p;
}

GemmProblem gemm_problem(const GemmOp& op, int ranks) {
  if (op.tokens < 1 || op.k < 1 || op.n < 1) throw InvalidArgument("op gemm: tokens, k and n must be >= 1");
  GemmProblem p;
  p.world_size = ranks;
  p.k = op.k;
  p.n = op.n;
  const std::int64_t E = op.experts > 0 ? op.experts : ranks;
  for (std::int64_t e = 0; e < E; ++e) p.host.push_back(static_cast<int>(e % ranks));
  for (int s = 0; s < ranks; ++s)
    for (std::int64_t e = 0; e < E; ++e) p.counts.push_back(op.tokens / E + (e < op.tokens % E ? 1 : 0));
  return p;
}

GemvProblem gemv_problem(const GemvOp& op, int ranks) {
  if (op.m < 1 || op.k < ranks || op.n < ranks) throw InvalidArgument("op gemv: m >= 1, k and n >= ranks");
  GemvProblem p;
  p.world_size = ranks;
  p.m = op.m;
  p.n = op.n;
  p.k_splits = split_evenly(op.k, ranks);
  return p;
}

// The sizing of bench/perf_common.cpp's make_fused_case, on the generators' defaults.
EmbeddingProblem perf_embedding(int ranks, std::int64_t bytes) {
  auto p = EmbeddingProblem::dlrm(ranks);
  p.batch_sizes.assign(static_cast<std::size_t>(ranks),
                       std::max<std::int64_t>(1, bytes / (p.num_tables() * p.dim * 4)));
  return p;
}

GemmProblem perf_gemm(int ranks, std::int64_t bytes) {
  auto p = GemmProblem::moe(ranks);
  const std::int64_t rows = std::max<std::int64_t>(1, bytes / (p.n * 4));
  p.random_routing(std::max<std::int64_t>(1, 2 * rows / p.num_experts()));
  return p;
}

GemvProblem perf_gemv(int ranks, std::int64_t bytes) {
  auto p = GemvProblem::transformer(ranks);
  p.n = std::max<std::int64_t>(1, bytes / (p.m * 4));
  return p;
}

}  // namespace fusedcoll::sim
