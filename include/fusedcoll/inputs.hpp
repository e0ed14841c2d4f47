#pragma once
/// @file
/// Seeded input generators. Every value is a pure function of (seed, a stream id, and the
/// element's *global* coordinates), never of the order of generation, so any rank can regenerate
/// any rank's inputs from (problem, rank) alone: an MPI rank rebuilds the whole world to run
/// ref/ locally, and a failing case replays from its seed.
///
/// `ValueMode::integer` draws small integers, so every sum the ops form is exact in f32 in any
/// order; that is the mode for cross-backend exact checks (e.g. GPU kernels that may reassociate).
///
/// Output buffers start filled with `kPoisonBits` (a quiet NaN), so an element a backend forgot to
/// write never compares equal by accident.

#include <cstdint>
#include <span>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/dtype.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/gemv_allreduce.hpp"

namespace fusedcoll {

/// Which values the generators draw.
enum class ValueMode : std::uint8_t {
  random = 0,   ///< Floats in (-2, 2): 24 random mantissa bits times a random 2^e, e in [-6, 1],
                ///< so that sums round and a wrong evaluation order shows in the bits.
  integer = 1,  ///< Integers in [-4, 4] (weights: [-2, 2]); sums are exact while |sum| < 2^24.
};

/// Bit pattern written into every output buffer before a run: a quiet NaN, so an unwritten
/// element never equals a computed one.
inline constexpr std::uint32_t kPoisonBits = 0x7FC0DEADu;

/// Splits `total` into `parts` contiguous sizes, the first `total % parts` one larger.
std::vector<std::int64_t> split_evenly(std::int64_t total, int parts);

/// A uniform 64-bit value from (seed, stream, a, b): a counter-based hash (splitmix64 rounds).
std::uint64_t hash_draw(std::uint64_t seed, std::uint64_t stream, std::uint64_t a,
                        std::uint64_t b) noexcept;

/// The value for (seed, stream, a, b) in `mode`, as a float.
float draw_value(std::uint64_t seed, std::uint64_t stream, std::uint64_t a, std::uint64_t b,
                 ValueMode mode) noexcept;

/// Fills `count` elements of `dtype` at `data` with values keyed by (seed, stream, rank, index).
/// f32/i32/i64 follow `mode`; the 16- and 8-bit types get random bit patterns.
void fill_values(void* data, std::int64_t count, DType dtype, std::uint64_t seed,
                 std::uint64_t stream, int rank, ValueMode mode);

/// Fills `bytes` bytes with `kPoisonBits` repeated.
void poison(void* data, std::size_t bytes) noexcept;

// ---------------------------------------------------------------------------------------------
// EmbeddingAllToAll

/// A whole EmbeddingAllToAll problem (all ranks).
struct EmbeddingProblem {
  int world_size = 1;
  std::int64_t dim = 0;
  std::vector<std::int64_t> table_rows;   ///< [T]
  std::vector<int> owner;                 ///< [T]
  std::vector<std::int64_t> batch_sizes;  ///< [P]
  PoolingMode pooling = PoolingMode::sum;
  std::int64_t min_bag = 0;  ///< bag lengths are uniform in [min_bag, max_bag]
  std::int64_t max_bag = 0;
  bool weighted = false;           ///< per-sample weights (sum pooling only)
  DType index_dtype = DType::i64;  ///< i32 or i64
  ValueMode values = ValueMode::random;
  std::uint64_t seed = 0;

  /// A DLRM-shaped default: 8 tables per rank of 10,000..14,000 rows (table t has
  /// 10000 + 1000 * (t % 5)), D = 64, batch 256 per rank, bags of 1..40, tables dealt
  /// round-robin, sum pooling, seed 2024.
  static EmbeddingProblem dlrm(int world_size);
  std::int64_t num_tables() const { return static_cast<std::int64_t>(owner.size()); }
  std::int64_t global_batch() const;
  /// The length of bag `sample` (a global sample id) of table `table`, as the generator draws
  /// it: what the simulator prices without building the tables (sim/ops.cpp).
  std::int64_t bag_length(std::int64_t table, std::int64_t sample) const;
};

/// One rank's inputs and output buffer; `args()` returns views into them (the views stay valid
/// while this object lives, including after it is moved).
class EmbeddingRankData {
 public:
  EmbeddingRankData(const EmbeddingProblem& problem, int rank);
  EmbeddingAllToAllArgs args();

  int rank = 0;
  std::vector<int> local_table_ids;
  std::vector<std::vector<float>> tables;
  std::vector<std::vector<std::int64_t>> offsets64, indices64;
  std::vector<std::vector<std::int32_t>> offsets32, indices32;  ///< filled when index_dtype is i32
  std::vector<std::vector<float>> weights;                      ///< empty when not weighted
  std::vector<float> output;

 private:
  EmbeddingProblem problem_;
};

/// Every rank's data, index = rank.
std::vector<EmbeddingRankData> make_world(const EmbeddingProblem& problem);

// ---------------------------------------------------------------------------------------------
// GemvAllReduce

/// A whole GemvAllReduce problem.
struct GemvProblem {
  int world_size = 1;
  std::int64_t m = 1;
  std::int64_t n = 0;
  std::vector<std::int64_t> k_splits;  ///< [P]
  ValueMode values = ValueMode::random;
  std::uint64_t seed = 0;

  /// A Transformer-decode default: M = 4, N = 4096, K = 11008 split evenly (an MLP down-proj).
  static GemvProblem transformer(int world_size);
  std::int64_t k() const;
};

/// One rank's slices `W_p`, `x_p` of the global W and x, and its `y` buffer.
class GemvRankData {
 public:
  GemvRankData(const GemvProblem& problem, int rank);
  GemvAllReduceArgs args();

  int rank = 0;
  std::vector<float> w, x, y;

 private:
  GemvProblem problem_;
};

std::vector<GemvRankData> make_world(const GemvProblem& problem);

// ---------------------------------------------------------------------------------------------
// GemmAllToAll

/// A whole GemmAllToAll problem.
struct GemmProblem {
  int world_size = 1;
  std::int64_t k = 0;
  std::int64_t n = 0;
  std::vector<int> host;              ///< [E]
  std::vector<std::int64_t> counts;   ///< [P * E]
  ValueMode values = ValueMode::random;
  std::uint64_t seed = 0;

  /// An MoE-combine default: 2 experts per rank, K = 1024 (expert FFN width), N = 512 (model
  /// width), skewed routing of about 256 rows per source rank.
  static GemmProblem moe(int world_size);
  /// Draws `counts` uniformly in [0, max_rows] from `seed` (replaces the current matrix).
  void random_routing(std::int64_t max_rows);
  std::int64_t num_experts() const { return static_cast<std::int64_t>(host.size()); }
};

/// One rank's expert inputs and weights and its output buffer.
class GemmRankData {
 public:
  GemmRankData(const GemmProblem& problem, int rank);
  GemmAllToAllArgs args();

  int rank = 0;
  std::vector<int> local_expert_ids;
  std::vector<std::vector<float>> a, w;
  std::vector<float> output;

 private:
  GemmProblem problem_;
};

std::vector<GemmRankData> make_world(const GemmProblem& problem);

/// Calls `args()` on every rank's data.
template <class RankData>
auto args_of(std::vector<RankData>& world) {
  std::vector<decltype(world.front().args())> out;
  out.reserve(world.size());
  for (auto& r : world) out.push_back(r.args());
  return out;
}

/// FNV-1a over the bytes of `data`: the demo's and the tests' checksum of an output.
std::uint64_t checksum(const void* data, std::size_t bytes) noexcept;

}  // namespace fusedcoll
