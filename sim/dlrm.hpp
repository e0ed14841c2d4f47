#pragma once
/// @file
/// The DLRM training iteration and the operators as programs for the simulator, and the
/// closed-form alpha-beta estimate beside them (docs/simulation.md, "Scale-out").

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/sim.hpp"

namespace fusedcoll::sim {

/// How the embedding tables are spread over the ranks.
enum class Sharding : std::uint8_t {
  automatic,  ///< table-wise when there are at least as many tables as ranks, else column-wise
  table,      ///< whole tables, largest pooling first onto the least loaded rank
  column,     ///< the tables' columns, concatenated, cut into P equal ranges (a range may span two
              ///< tables); every rank gets T·D/P columns (+-1)
  row,        ///< every table's rows cut into P ranges; every rank pools partial sums for every
              ///< sample, which the exchange sends to the sample's owner to be summed
};
const char* to_string(Sharding s) noexcept;
Sharding parse_sharding(const std::string& s);

/// How the bottom MLP's output and the pooled embeddings meet before the top MLP.
enum class Interaction : std::uint8_t {
  dot,  ///< DLRM's pairwise dot products (no self-interaction), concatenated with the dense output
  dcn,  ///< DCNv2's low-rank cross network over the concatenated features (in = (T + 1) x dim)
};
const char* to_string(Interaction i) noexcept;
Interaction parse_interaction(const std::string& s);

/// A DLRM model and its batch.
struct Dlrm {
  std::int64_t global_batch = 65536;
  std::int64_t dim = 128;
  std::vector<std::int64_t> rows;     ///< per table
  std::vector<std::int64_t> pooling;  ///< indices per bag, per table
  std::vector<std::int64_t> bottom{13, 512, 256, 128};  ///< input, then each layer's outputs
  std::vector<std::int64_t> top{1024, 1024, 512, 256, 1};  ///< each layer's outputs
  Interaction interaction = Interaction::dcn;
  int dcn_layers = 3;           ///< cross layers x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l
  std::int64_t dcn_rank = 512;  ///< V_l: in -> rank, W_l: rank -> in
  Sharding sharding = Sharding::automatic;
  /// Also fuse the backward pass's All-to-All with the embedding backward (the received
  /// gradients are consumed slice by slice as they land). Off: only the forward is fused, which
  /// is the operator fusedcoll implements.
  bool fuse_backward = false;
};

/// MLPerf Training's DLRM-DCNv2 (recommendation_v2, Criteo 1TB multi-hot; docs/references.md):
/// 26 tables of dim 128 with their row counts and multi-hot sizes, bottom MLP 13-512-256-128,
/// a DCNv2 interaction of 3 layers of rank 512, top MLP 1024-1024-512-256-1, global batch 65,536;
/// `one_hot` sets every pooling to 1 (the v1 benchmark's lookups).
Dlrm mlperf_dlrm(bool one_hot = false);

/// One rank's piece of one table.
struct Shard {
  int table = 0;
  std::int64_t c0 = 0, c1 = 0;    ///< columns
  double row_fraction = 1.0;      ///< of the table's rows (row-wise sharding)
};

/// The shards of every rank. Throws InvalidArgument for a sharding the model does not allow
/// (more row shards than a table has rows, no tables, a batch smaller than the ranks...).
std::vector<std::vector<Shard>> shard(const Dlrm& m, int ranks);
Sharding effective(const Dlrm& m, int ranks);

/// Rank `rank`'s program for one iteration, baseline or fused.
Program dlrm_program(const Dlrm& m, const Cluster& c, const std::vector<std::vector<Shard>>& shards,
                     int rank, bool fused);

/// Every rank's program, as `dlrm_program` gives it, priced once per batch size (the dense
/// layers) and, when the global batch divides evenly, once per load (the embedding kernels of
/// ranks whose shards have the same poolings, widths and row fractions, in order: their sends
/// turned by rank). What makes 128 nodes at thousands of samples per device take seconds.
std::function<Program(int)> dlrm_programs(const Dlrm& m, const Cluster& c,
                                          const std::vector<std::vector<Shard>>& shards,
                                          bool fused);

/// The same iteration in closed form: compute from the same kernel costs, every collective as
/// latency + bytes / bandwidth on its bottleneck link.
struct Estimate {
  double iteration = 0, compute = 0, exposed = 0;
};
Estimate alpha_beta(const Dlrm& m, const Cluster& c, const std::vector<std::vector<Shard>>& shards,
                    bool fused);

}  // namespace fusedcoll::sim
