// The DLRM iteration as a simulator program, costed by the model (docs/simulation.md,
// "Scale-out"). The embedding forward and its All-to-All are EmbeddingAllToAll's kernels priced
// by sim/ops.cpp (embedding_steps: the plan's tiles, grids and unpacks, as the emulator runs
// them), the MLPs' GEMMs GemmAllToAll's expert kernel on a one-expert plan, and the other
// kernels sim/ops.cpp's Kernel: one pricing of each operator for the operators and the iteration.
#include "sim/dlrm.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>

#include "fusedcoll/detail/embedding_plan.hpp"
#include "fusedcoll/detail/gemm_plan.hpp"
#include "fusedcoll/error.hpp"
#include "sim/ops.hpp"

namespace fusedcoll::sim {

const char* to_string(Sharding s) noexcept {
  switch (s) {
    case Sharding::automatic: return "auto";
    case Sharding::table: return "table";
    case Sharding::column: return "column";
    case Sharding::row: return "row";
  }
  return "invalid";
}

Sharding parse_sharding(const std::string& s) {
  for (Sharding v : {Sharding::automatic, Sharding::table, Sharding::column, Sharding::row})
    if (s == to_string(v)) return v;
  throw InvalidArgument("unknown sharding '" + s + "' (auto, table, column or row)");
}

const char* to_string(Interaction i) noexcept {
  switch (i) {
    case Interaction::dot:
      return "dot";
    case Interaction::dcn:
      return "dcn";
  }
  return "invalid";
}

Interaction parse_interaction(const std::string& s) {
  for (Interaction v : {Interaction::dot, Interaction::dcn})
    if (s == to_string(v)) return v;
  throw InvalidArgument("unknown interaction '" + s + "' (dot or dcn)");
}

Dlrm mlperf_dlrm(bool one_hot) {
  Dlrm m;
  // mlcommons/training recommendation_v2/torchrec_dlrm/README.MD, "Running the MLPerf DLRM v2
  // benchmark": the Criteo 1TB tables (capped at 40M rows), the multi-hot sizes of the synthetic
  // multi-hot dataset, --interaction_type=dcn --dcn_num_layers=3 --dcn_low_rank_dim=512, global
  // batch 65,536 (the struct's defaults hold the MLPs, the DCN and the batch).
  m.rows = {40000000, 39060,   17295, 7424,  20265, 3,        7122,     1543,     63,
            40000000, 3067956, 405282, 10,   2209,  11938,    155,      4,        976,
            14,       40000000, 40000000, 40000000, 590152, 12973, 108, 36};
  m.pooling = {3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
  if (one_hot) std::fill(m.pooling.begin(), m.pooling.end(), 1);
  return m;
}

namespace {

std::int64_t T_of(const Dlrm& m) { return static_cast<std::int64_t>(m.rows.size()); }

std::vector<std::int64_t> batches(std::int64_t B, int P) {
  std::vector<std::int64_t> b(static_cast<std::size_t>(P), B / P);
  for (std::int64_t q = 0; q < B % P; ++q) ++b[static_cast<std::size_t>(q)];
  return b;
}

double launch(const Cluster& c) { return model::launch_seconds(c.preset); }

/// Work spread evenly over every CU: the optimizer's elementwise step, the closed form's
/// reductions.
double spread(const Cluster& c, const model::Work& w) {
  const double n = c.preset.device.compute_units;
  return model::seconds(c.preset, {w.kernel, w.flops / n, w.bytes / n});
}

/// Rows a shard gathers for `bags` samples.
std::int64_t gathered(const Dlrm& m, const Shard& s, std::int64_t bags) {
  return std::max<std::int64_t>(
      1, std::llround(static_cast<double>(bags * m.pooling[static_cast<std::size_t>(s.table)]) *
                      s.row_fraction));
}

double emb_tile(const Cluster& c, const Dlrm& m, const Shard& s, std::int64_t bags) {
  return model::seconds(c.preset, model::embedding(gathered(m, s, bags), bags, s.c1 - s.c0));
}

/// Backward: the pooled gradient read per bag, every gathered row updated (read, add, write).
double emb_bwd_tile(const Cluster& c, const Dlrm& m, const Shard& s, std::int64_t bags) {
  return emb_tile(c, m, s, bags) +
         model::seconds(c.preset, model::reduce(gathered(m, s, bags) * (s.c1 - s.c0)));
}

/// A GEMM [rows x k] x [k x n]: GemmAllToAll's expert kernel on a one-rank, one-expert plan (its
/// 16 x 64 tiles, claimed).
double gemm_kernel(const Cluster& c, std::int64_t rows, std::int64_t k, std::int64_t n) {
  GemmAllToAllArgs a;
  a.k = k;
  a.n = n;
  a.host = {0};
  a.counts = {rows};
  return expert_kernel_seconds(detail::gemm::Plan(a, 0, 1), c);
}

struct Mlp {
  double fwd = 0, bwd = 0;
  std::int64_t params = 0;
};

/// An elementwise kernel over `rows` rows of `width` floats, a workgroup per row (claimed), each
/// row `flops` and `bytes` per float: the DCN's cross x_0 * (x_w + b) + x_l (3 operations, 3
/// floats read and 1 written) and its backward.
double rows_kernel(const Cluster& c, std::int64_t rows, std::int64_t width, double flops,
                   double bytes) {
  Kernel k(c, static_cast<std::size_t>(rows));
  const model::Work w{model::Kernel::reduce, flops * static_cast<double>(width),
                      bytes * static_cast<double>(width)};
  for (std::int64_t i = 0; i < rows; ++i) k.claim(model::seconds(c.preset, w));
  return k.seconds();
}

Mlp mlp(const Cluster& c, std::int64_t b, std::int64_t in, const std::vector<std::int64_t>& outs) {
  Mlp r;
  for (std::int64_t out : outs) {
    r.fwd += gemm_kernel(c, b, in, out);
    r.bwd += gemm_kernel(c, b, out, in) + gemm_kernel(c, in, b, out);  // dX, dW
    r.params += in * out + out;
    in = out;
  }
  return r;
}

/// The columns of all tables concatenated.
std::vector<Shard> column_range(const Dlrm& m, std::int64_t g0, std::int64_t g1) {
  std::vector<Shard> out;
  for (std::int64_t t = 0; t < T_of(m) && g0 < g1; ++t) {
    const std::int64_t t0 = t * m.dim, t1 = t0 + m.dim;
    const std::int64_t a = std::max(g0, t0), b = std::min(g1, t1);
    if (a < b) out.push_back({static_cast<int>(t), a - t0, b - t0, 1.0});
  }
  return out;
}

/// The plan of detail/embedding_plan.hpp over the shards: each shard is one of the plan's tables
/// (owner = the shard's rank, global ids rank by rank), so tiles, their order, the grids and the
/// slices are the kernels' own; a shard's width and pooling price its tiles.
detail::embedding::Plan emb_plan(const std::vector<std::vector<Shard>>& shards, int rank,
                                 const std::vector<std::int64_t>& batch, std::int64_t dim) {
  EmbeddingAllToAllArgs a;
  a.dim = dim;
  a.batch_sizes = batch;
  for (std::size_t p = 0; p < shards.size(); ++p)
    for (std::size_t k = 0; k < shards[p].size(); ++k) a.owner.push_back(static_cast<int>(p));
  return {a, rank, static_cast<int>(shards.size())};
}

/// The shards' widths in the plan's table numbering.
std::vector<std::int64_t> widths(const std::vector<std::vector<Shard>>& shards) {
  std::vector<std::int64_t> w;
  for (const auto& mine : shards)
    for (const Shard& s : mine) w.push_back(s.c1 - s.c0);
  return w;
}

std::int64_t cols_of(const std::vector<Shard>& s) {
  std::int64_t n = 0;
  for (const Shard& x : s) n += x.c1 - x.c0;
  return n;
}

}  // namespace

Sharding effective(const Dlrm& m, int P) {
  if (m.sharding != Sharding::automatic) return m.sharding;
  return T_of(m) >= P ? Sharding::table : Sharding::column;
}

std::vector<std::vector<Shard>> shard(const Dlrm& m, int P) {
  const std::int64_t T = T_of(m);
  if (P < 1) throw InvalidArgument("dlrm: " + std::to_string(P) + " ranks");
  if (T == 0) throw InvalidArgument("dlrm: no embedding tables");
  if (m.pooling.size() != m.rows.size())
    throw InvalidArgument("dlrm: " + std::to_string(m.pooling.size()) + " pooling sizes for " +
                          std::to_string(T) + " tables");
  if (m.dim < 1) throw InvalidArgument("dlrm: dim = " + std::to_string(m.dim));
  if (m.bottom.size() < 2 || m.bottom.back() != m.dim)
    throw InvalidArgument("dlrm: the bottom MLP's output (" +
                          std::to_string(m.bottom.empty() ? 0 : m.bottom.back()) +
                          ") must be the embedding dim (" + std::to_string(m.dim) +
                          "): the interaction pairs it with the pooled rows");
  if (m.top.empty()) throw InvalidArgument("dlrm: no top MLP");
  if (m.interaction == Interaction::dcn && (m.dcn_layers < 0 || m.dcn_rank < 1))
    throw InvalidArgument("dlrm: DCN of " + std::to_string(m.dcn_layers) + " layers of rank " +
                          std::to_string(m.dcn_rank));
  if (m.global_batch < P)
    throw InvalidArgument("dlrm: global batch " + std::to_string(m.global_batch) + " < " +
                          std::to_string(P) + " ranks (every rank needs a sample)");
  for (std::int64_t t = 0; t < T; ++t) {
    if (m.rows[static_cast<std::size_t>(t)] < 1 || m.pooling[static_cast<std::size_t>(t)] < 1)
      throw InvalidArgument("dlrm: table " + std::to_string(t) + " has " +
                            std::to_string(m.rows[static_cast<std::size_t>(t)]) + " rows and pooling " +
                            std::to_string(m.pooling[static_cast<std::size_t>(t)]) + " (both must be >= 1)");
  }
  std::vector<std::vector<Shard>> out(static_cast<std::size_t>(P));
  switch (effective(m, P)) {
    case Sharding::table: {
      std::vector<int> order(static_cast<std::size_t>(T));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return m.pooling[static_cast<std::size_t>(a)] > m.pooling[static_cast<std::size_t>(b)];
      });
      std::vector<std::int64_t> load(static_cast<std::size_t>(P), 0);
      for (int t : order) {
        const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        load[r] += m.pooling[static_cast<std::size_t>(t)];
        out[r].push_back({t, 0, m.dim, 1.0});
      }
      for (auto& v : out)
        std::sort(v.begin(), v.end(), [](const Shard& a, const Shard& b) { return a.table < b.table; });
      break;
    }
    case Sharding::column: {
      const std::int64_t total = T * m.dim;
      if (total < P)
        throw InvalidArgument("dlrm: column-wise sharding of " + std::to_string(T) + " tables x " +
                              std::to_string(m.dim) + " columns over " + std::to_string(P) +
                              " ranks leaves ranks without a column");
      for (int r = 0; r < P; ++r) out[static_cast<std::size_t>(r)] = column_range(m, total * r / P, total * (r + 1) / P);
      break;
    }
    case Sharding::row:
      for (std::int64_t t = 0; t < T; ++t) {
        if (m.rows[static_cast<std::size_t>(t)] < P)
          throw InvalidArgument("dlrm: row-wise sharding splits table " + std::to_string(t) +
                                " (" + std::to_string(m.rows[static_cast<std::size_t>(t)]) +
                                " rows) over " + std::to_string(P) +
                                " ranks: more shards than rows; use column or table sharding");
        for (int r = 0; r < P; ++r)
          out[static_cast<std::size_t>(r)].push_back({static_cast<int>(t), 0, m.dim, 1.0 / P});
      }
      break;
    case Sharding::automatic: break;
  }
  return out;
}

namespace {

/// The data-parallel layers of one rank: the same on every rank of the same batch.
struct Dense {
  Mlp bottom, top;
  double interaction_fwd = 0, interaction_bwd = 0, optimizer = 0;
  std::int64_t interaction_params = 0;  ///< DCN's V, W and biases (the dot interaction has none)
};

Dense dense(const Dlrm& m, const Cluster& c, std::int64_t b) {
  Dense k;
  k.bottom =
      mlp(c, b, m.bottom.front(), std::vector<std::int64_t>(m.bottom.begin() + 1, m.bottom.end()));
  const std::int64_t F = T_of(m) + 1;
  std::int64_t top_in = 0;
  if (m.interaction == Interaction::dot) {
    // The T embeddings and the bottom MLP's output: (T+1)T/2 pairs, plus the dense features,
    // feed the top MLP (DLRM's "dot" without self-interaction): a small GEMM per sample.
    top_in = m.bottom.back() + F * (F - 1) / 2;
    Kernel dots(c, static_cast<std::size_t>(b));
    for (std::int64_t i = 0; i < b; ++i)
      dots.claim(model::seconds(c.preset, model::gemm(F, F, m.dim)));
    k.interaction_fwd = dots.seconds();
    k.interaction_bwd = 2 * k.interaction_fwd;
  } else {
    // DCNv2 (torchrec's LowRankCrossNet): per layer the GEMMs in -> rank -> in (V without a
    // bias, W with one) and the cross; its backward the GEMMs' dX and dW and twice the cross's
    // traffic. The top MLP reads the in = (T + 1) x dim features.
    top_in = F * m.dim;
    for (int l = 0; l < m.dcn_layers; ++l) {
      const Mlp vw = mlp(c, b, top_in, {m.dcn_rank, top_in});
      const double cross = rows_kernel(c, b, top_in, 3, 16);
      k.interaction_fwd += vw.fwd + cross;
      k.interaction_bwd += vw.bwd + 2 * cross;
      k.interaction_params += vw.params - m.dcn_rank;
    }
  }
  k.top = mlp(c, b, top_in, m.top);
  k.optimizer =
      launch(c) + spread(c, model::reduce(k.bottom.params + k.interaction_params + k.top.params));
  return k;
}

/// The model-parallel part of one rank: its embedding kernels and what they send.
struct Sparse {
  /// The forward embedding and its All-to-All: EmbeddingAllToAll's steps (unfused: the pooling
  /// kernel and the All-to-All kernel; fused: scale_out's one kernel).
  Program fwd;
  /// Row-wise sharding: the received partial sums added up, a kernel after the unpack (else 0).
  double fwd_sum = 0;
  /// The backward: the pooled rows' gradients packed per owner (the mirror of the unpack), the
  /// All-to-All kernel's launch, the embedding backward over the received gradients.
  double bwd_pack = 0, bwd_launch = 0, bwd = 0;
};

Sparse sparse(const Dlrm& m, const Cluster& c, const std::vector<std::vector<Shard>>& shards,
              int rank, const std::vector<std::int64_t>& batch, bool fused) {
  Sparse k;
  const auto& mine = shards[static_cast<std::size_t>(rank)];
  const detail::embedding::Plan pl = emb_plan(shards, rank, batch, m.dim);
  EmbeddingCost fwd;
  fwd.width = widths(shards);
  fwd.pool = [&](int s, std::int64_t b0, std::int64_t b1) {
    return emb_tile(c, m, mine[static_cast<std::size_t>(s)], b1 - b0);
  };
  k.fwd = embedding_steps(pl, fwd, c, fused ? Mode::scale_out : Mode::unfused, "emb_fwd",
                          fused ? "emb_a2a_fwd" : "a2a_fwd");
  // The received rows, [B_r, T, D] in all: what the unpack copies and the backward packs.
  std::int64_t recv = 0;
  for (const auto& s : shards) recv += cols_of(s);
  if (effective(m, c.ranks()) == Sharding::row) {
    Kernel sum(c, pl.a2a_items());
    for (int w = 0; w < sum.grid(); ++w)
      sum.add(w, model::seconds(c.preset, model::reduce(pl.unpack_rows(w, sum.grid()) * recv)));
    k.fwd_sum = sum.seconds();
  }
  k.bwd_pack = launch(c) + copy_kernel(c, pl.a2a_items(), [&](std::int64_t w, std::int64_t g) {
                 return pl.unpack_rows(w, g) * recv * 4;
               });
  k.bwd_launch = launch(c);
  const std::vector<detail::embedding::Tile> tiles = pl.unfused_tiles();
  Kernel bwd(c, tiles.size());
  for (const detail::embedding::Tile& t : tiles)
    bwd.claim(emb_bwd_tile(c, m, mine[static_cast<std::size_t>(t.k)], t.i1 - t.i0));
  k.bwd = bwd.seconds();
  return k;
}

/// Rank `rank`'s program from its priced parts.
Program assemble(const Dlrm& m, const Cluster& c, const std::vector<std::vector<Shard>>& shards,
                 std::int64_t b, const Dense& d, const Sparse& k, bool fused) {
  const int P = c.ranks();
  Program p = k.fwd;
  if (k.fwd_sum > 0) p.push_back(compute_step(p.back().phase, k.fwd_sum));
  p.push_back(compute_step("mlp_fwd", d.bottom.fwd + d.interaction_fwd + d.top.fwd));
  p.push_back(compute_step("mlp_bwd", d.top.bwd));
  Step ar;
  ar.kind = Step::allreduce;
  ar.phase = "mlp_bwd";
  ar.bytes = d.top.params * 4;
  p.push_back(ar);
  if (d.interaction_params > 0) {
    p.push_back(compute_step("mlp_bwd", d.interaction_bwd));
    ar.bytes = d.interaction_params * 4;
    p.push_back(ar);
    p.push_back(compute_step("mlp_bwd", d.bottom.bwd));
  } else {
    p.push_back(compute_step("mlp_bwd", d.interaction_bwd + d.bottom.bwd));
  }
  ar.bytes = d.bottom.params * 4;
  p.push_back(ar);
  // Backward: the gradients of the pooled rows go back to the shards' owners.
  p.push_back(compute_step("a2a_emb_bwd", k.bwd_pack));
  Step y = exchange_step("a2a_emb_bwd");
  for (int o = 0; o < P; ++o)
    y.sends.push_back({k.bwd_launch, o, cols_of(shards[static_cast<std::size_t>(o)]) * b * 4});
  if (fused && m.fuse_backward) {
    // The embedding backward consumes each source's slice as it lands: modelled as the kernel
    // running alongside the exchange while data lands (never starved), the last source's share
    // after the last byte.
    y.seconds = k.bwd_launch + k.bwd * (P - 1) / P;
    y.after = k.bwd / P;
    p.push_back(std::move(y));
  } else {
    y.seconds = k.bwd_launch;
    p.push_back(std::move(y));
    p.push_back(compute_step("a2a_emb_bwd", k.bwd));
  }
  Step w;
  w.kind = Step::wait_comm;
  w.phase = "allreduce_wait";
  p.push_back(w);
  p.push_back(compute_step("optimizer", d.optimizer));
  return p;
}

/// What prices a rank's embedding kernels: its shards' poolings, widths and row fractions in
/// local order.
using Load = std::vector<std::tuple<std::int64_t, std::int64_t, double>>;
Load load_of(const Dlrm& m, const std::vector<Shard>& mine) {
  Load l;
  for (const Shard& s : mine)
    l.emplace_back(m.pooling[static_cast<std::size_t>(s.table)], s.c1 - s.c0, s.row_fraction);
  return l;
}

}  // namespace

Program dlrm_program(const Dlrm& m, const Cluster& c, const std::vector<std::vector<Shard>>& shards,
                     int rank, bool fused) {
  const std::vector<std::int64_t> batch = batches(m.global_batch, c.ranks());
  const std::int64_t b = batch[static_cast<std::size_t>(rank)];
  return assemble(m, c, shards, b, dense(m, c, b), sparse(m, c, shards, rank, batch, fused), fused);
}

std::function<Program(int)> dlrm_programs(const Dlrm& m, const Cluster& c,
                                          const std::vector<std::vector<Shard>>& shards,
                                          bool fused) {
  struct Cache {
    std::vector<std::int64_t> batch;
    bool even = false;
    std::map<std::int64_t, Dense> dense;
    std::map<Load, std::pair<int, Sparse>> sparse;
  };
  auto cache = std::make_shared<Cache>();
  cache->batch = batches(m.global_batch, c.ranks());
  cache->even = m.global_batch % c.ranks() == 0;
  return [m, c, shards, fused, cache](int rank) {
    const int P = c.ranks();
    const std::int64_t b = cache->batch[static_cast<std::size_t>(rank)];
    auto d = cache->dense.find(b);
    if (d == cache->dense.end()) d = cache->dense.emplace(b, dense(m, c, b)).first;
    if (!cache->even)
      return assemble(m, c, shards, b, d->second, sparse(m, c, shards, rank, cache->batch, fused),
                      fused);
    // Under an even batch, ranks of one load run the same kernels; the destinations of the
    // forward's sends turn with the rank (the plan's order starts at rank + 1).
    const Load load = load_of(m, shards[static_cast<std::size_t>(rank)]);
    auto s = cache->sparse.find(load);
    if (s == cache->sparse.end())
      s = cache->sparse
              .emplace(load, std::pair{rank, sparse(m, c, shards, rank, cache->batch, fused)})
              .first;
    Sparse k = s->second.second;
    const int turn = rank - s->second.first;
    for (Step& st : k.fwd)
      for (Send& x : st.sends) x.dst = ((x.dst + turn) % P + P) % P;
    return assemble(m, c, shards, b, d->second, k, fused);
  };
}

namespace {

/// Latency + bytes / bandwidth of rank r's share of an exchange on its bottleneck link.
double exchange_seconds(const Cluster& c, const std::vector<std::int64_t>& to,
                        const std::vector<std::int64_t>& from, int r) {
  const model::Links& L = c.preset.links;
  const int G = L.gpus_per_node;
  double peer_max = 0, peer_sum_out = 0, peer_sum_in = 0, nic_out = 0, nic_in = 0;
  bool intra = false, inter = false;
  for (std::size_t q = 0; q < to.size(); ++q) {
    if (static_cast<int>(q) == r) continue;
    if (L.same_node(r, static_cast<int>(q))) {
      peer_max = std::max<double>(peer_max, static_cast<double>(std::max(to[q], from[q])));
      peer_sum_out += static_cast<double>(to[q]);
      peer_sum_in += static_cast<double>(from[q]);
      intra = intra || to[q] > 0 || from[q] > 0;
    } else {
      nic_out += static_cast<double>(to[q]);
      nic_in += static_cast<double>(from[q]);
      inter = inter || to[q] > 0 || from[q] > 0;
    }
  }
  (void)G;
  // shared: the node's devices send at once (a balanced exchange) through its one memory.
  const double peer_bytes = L.peer_topology == model::PeerTopology::mesh ? peer_max
                            : L.peer_topology == model::PeerTopology::switched
                                ? std::max(peer_sum_out, peer_sum_in)
                                : peer_sum_out * L.gpus_per_node;
  const double tp =
      intra ? L.peer_us * 1e-6 + model::peer_seconds(c.preset, std::int64_t(peer_bytes)) : 0;
  // The devices of a node send at once (a balanced exchange): each gets its share of the NICs.
  const double nic_share = L.nic_gbps * L.nics() / L.gpus_per_node;
  const double tn = inter ? L.nic_us * 1e-6 + std::max(nic_out, nic_in) / (nic_share * 1e9) : 0;
  return std::max(tp, tn);
}

double allreduce_seconds(const Cluster& c, std::int64_t S) {
  const model::Links& L = c.preset.links;
  const int G = L.gpus_per_node, N = c.nodes;
  const double chunk = static_cast<double>(S) / G;
  double t = 0;
  if (G > 1) {
    const double per_link = L.peer_topology == model::PeerTopology::mesh ? chunk
                            : L.peer_topology == model::PeerTopology::switched
                                ? chunk * (G - 1)
                                : chunk * (G - 1) * G;  // shared: every device's at once
    t += 2 * (L.peer_us * 1e-6 + model::peer_seconds(c.preset, std::int64_t(per_link)));
    t += spread(c, model::reduce(static_cast<std::int64_t>(chunk * (G - 1) / 4)));
  }
  if (N > 1) {
    const bool pow2 = (N & (N - 1)) == 0;
    const double steps = pow2 ? 2 * std::log2(N) : 2.0 * (N - 1);
    // Every device of a node runs its chunk's ring at once, on its share of the node's NICs.
    const double nic_share = L.nic_gbps * L.nics() / G;
    t += steps * L.nic_us * 1e-6 + 2.0 * (N - 1) / N * chunk / (nic_share * 1e9);
    t += spread(c, model::reduce(static_cast<std::int64_t>(chunk / 4)));
  }
  return t;
}

}  // namespace

Estimate alpha_beta(const Dlrm& m, const Cluster& c, const std::vector<std::vector<Shard>>& shards,
                    bool fused) {
  const int P = c.ranks();
  const int r = 0;
  const std::vector<std::int64_t> batch = batches(m.global_batch, P);
  const Dense d = dense(m, c, batch[0]);
  const Sparse k = sparse(m, c, shards, r, batch, fused);
  std::vector<std::int64_t> to(static_cast<std::size_t>(P)), from(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q) {
    to[static_cast<std::size_t>(q)] = cols_of(shards[0]) * batch[static_cast<std::size_t>(q)] * 4;
    from[static_cast<std::size_t>(q)] = cols_of(shards[static_cast<std::size_t>(q)]) * batch[0] * 4;
  }
  const double a2a_fwd = exchange_seconds(c, to, from, r);
  const double a2a_bwd = exchange_seconds(c, from, to, r);
  Estimate e;
  const double mlp =
      d.bottom.fwd + d.interaction_fwd + d.top.fwd + d.top.bwd + d.interaction_bwd + d.bottom.bwd;
  // The forward's kernels from its steps: the pooling (its own kernel, or the fused kernel), the
  // All-to-All kernel's launch, the unpack.
  const Step& x = k.fwd.back();
  const double kernel = fused ? x.seconds : k.fwd.front().seconds + x.seconds;
  const double unpack = x.after + k.fwd_sum;
  e.compute = kernel + unpack + mlp + k.bwd_pack + k.bwd_launch + k.bwd + d.optimizer;
  double fwd = 0;
  if (fused) {
    // The first remote slice leaves when its tiles finish; the rest of the exchange follows it.
    double first = kernel;
    for (const Send& s : x.sends) first = std::min(first, s.at);
    fwd = std::max(kernel, first + a2a_fwd) + unpack;
  } else {
    fwd = kernel + a2a_fwd + unpack;
  }
  double bwd = k.bwd_pack + k.bwd_launch + a2a_bwd + k.bwd;
  if (fused && m.fuse_backward)
    bwd = k.bwd_pack + k.bwd_launch + std::max(a2a_bwd, k.bwd) + k.bwd / P;
  // The AllReduces start after the top and bottom MLPs' backward and hide behind what follows.
  const double ar =
      allreduce_seconds(c, d.top.params * 4) +
      (d.interaction_params > 0 ? allreduce_seconds(c, d.interaction_params * 4) : 0) +
      allreduce_seconds(c, d.bottom.params * 4);
  const double window = d.interaction_bwd + d.bottom.bwd + bwd;
  e.iteration = fwd + mlp + bwd + std::max(0.0, ar - window) + d.optimizer;
  e.exposed = e.iteration - e.compute;
  return e;
}

}  // namespace fusedcoll::sim
