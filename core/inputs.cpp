// Seeded, order-independent input generators (see inputs.hpp). Each value is hashed from its
// global coordinates, so building rank 3's data never requires building ranks 0..2 first.

#include "fusedcoll/inputs.hpp"

#include <cmath>
#include <cstring>

namespace fusedcoll {
namespace {

// Stream ids keep the different kinds of values independent of each other.
enum Stream : std::uint64_t {
  kTableValues = 1,
  kBagLength = 2,
  kBagIndex = 3,
  kBagWeight = 4,
  kGemvW = 5,
  kGemvX = 6,
  kGemmA = 7,
  kGemmW = 8,
  kRouting = 9,
  kUserFill = 1000,  // fill_values(stream) uses kUserFill + stream
};

std::uint64_t splitmix(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float weight_value(std::uint64_t seed, std::uint64_t a, std::uint64_t b, ValueMode mode) {
  const std::uint64_t h = hash_draw(seed, kBagWeight, a, b);
  if (mode == ValueMode::integer) return static_cast<float>(static_cast<int>(h % 5) - 2);
  return draw_value(seed, kBagWeight, a, b, mode);
}

std::vector<float> poisoned(std::int64_t count) {
  std::vector<float> v(static_cast<std::size_t>(count));
  poison(v.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace

std::vector<std::int64_t> split_evenly(std::int64_t total, int parts) {
  std::vector<std::int64_t> out;
  for (int p = 0; p < parts; ++p) out.push_back(chunk_of(total, parts, p).length);
  return out;
}

std::uint64_t hash_draw(std::uint64_t seed, std::uint64_t stream, std::uint64_t a,
                        std::uint64_t b) noexcept {
  return splitmix(splitmix(splitmix(seed ^ splitmix(stream)) ^ a) ^ b);
}

float draw_value(std::uint64_t seed, std::uint64_t stream, std::uint64_t a, std::uint64_t b,
                 ValueMode mode) noexcept {
  const std::uint64_t h = hash_draw(seed, stream, a, b);
  if (mode == ValueMode::integer) return static_cast<float>(static_cast<int>(h % 9) - 4);
  // 24 random bits scaled exactly into [-1, 1), then by a random power of two in [2^-6, 2]:
  // values of mixed magnitude make sums round, so a wrong summation order changes bits.
  const auto bits = static_cast<std::int64_t>(h >> 40) - (std::int64_t{1} << 23);
  const int exponent = static_cast<int>((h >> 8) & 7) - 6;
  return std::ldexp(static_cast<float>(bits) * 0x1p-23f, exponent);
}

void fill_values(void* data, std::int64_t count, DType dtype, std::uint64_t seed,
                 std::uint64_t stream, int rank, ValueMode mode) {
  enforce_valid(dtype, "fill_values");
  FC_ENFORCE(data != nullptr || count == 0, "fill_values: null pointer with ", count, " elements");
  const std::uint64_t s = kUserFill + stream;
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = draw_value(seed, s, static_cast<std::uint64_t>(rank), i, mode);
    switch (dtype) {
      case DType::f32: static_cast<float*>(data)[i] = v; break;
      case DType::i32:
        static_cast<std::int32_t*>(data)[i] =
            mode == ValueMode::integer ? static_cast<std::int32_t>(v)
                                       : static_cast<std::int32_t>(hash_draw(seed, s, rank, i));
        break;
      case DType::i64:
        static_cast<std::int64_t*>(data)[i] =
            mode == ValueMode::integer ? static_cast<std::int64_t>(v)
                                       : static_cast<std::int64_t>(hash_draw(seed, s, rank, i));
        break;
      case DType::f16:
      case DType::bf16: {
        const auto bits = static_cast<std::uint16_t>(hash_draw(seed, s, rank, i));
        std::memcpy(static_cast<unsigned char*>(data) + 2 * i, &bits, 2);
        break;
      }
      case DType::f8_e4m3:
      case DType::f8_e5m2:
        static_cast<unsigned char*>(data)[i] =
            static_cast<unsigned char>(hash_draw(seed, s, rank, i));
        break;
    }
  }
}

void poison(void* data, std::size_t bytes) noexcept {
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i)
    p[i] = static_cast<unsigned char>(kPoisonBits >> (8 * (i % 4)));
}

std::uint64_t checksum(const void* data, std::size_t bytes) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

// ----------------------------------------------------------------------------------------------
// EmbeddingAllToAll

EmbeddingProblem EmbeddingProblem::dlrm(int world_size) {
  EmbeddingProblem p;
  p.world_size = world_size;
  p.dim = 64;
  const int num_tables = 8 * world_size;
  for (int t = 0; t < num_tables; ++t) {
    p.table_rows.push_back(10000 + 1000 * (t % 5));  // unequal tables, as in real models
    p.owner.push_back(t % world_size);
  }
  p.batch_sizes.assign(world_size, 256);
  p.min_bag = 1;
  p.max_bag = 40;
  p.seed = 2024;
  return p;
}

std::int64_t EmbeddingProblem::bag_length(std::int64_t table, std::int64_t sample) const {
  const auto span = static_cast<std::uint64_t>(max_bag - min_bag + 1);
  return min_bag + static_cast<std::int64_t>(hash_draw(seed, kBagLength, static_cast<std::uint64_t>(table),
                                                       static_cast<std::uint64_t>(sample)) %
                                             span);
}

std::int64_t EmbeddingProblem::global_batch() const {
  std::int64_t b = 0;
  for (auto x : batch_sizes) b += x;
  return b;
}

EmbeddingRankData::EmbeddingRankData(const EmbeddingProblem& problem, int r)
    : rank(r), problem_(problem) {
  FC_ENFORCE(r >= 0 && r < problem.world_size, "rank ", r, " outside a world of ",
             problem.world_size);
  FC_ENFORCE_EQ(problem.table_rows.size(), problem.owner.size(),
                "table_rows and owner must both have one entry per table");
  FC_ENFORCE(problem.min_bag >= 0 && problem.min_bag <= problem.max_bag, "bag lengths [",
             problem.min_bag, ", ", problem.max_bag, "] are not a valid range");
  FC_ENFORCE(problem.index_dtype == DType::i32 || problem.index_dtype == DType::i64,
             "index_dtype must be i32 or i64, is ", problem.index_dtype);
  const std::uint64_t seed = problem.seed;
  const std::int64_t dim = problem.dim;
  const std::int64_t global_batch = problem.global_batch();
  for (int t = 0; t < problem.num_tables(); ++t) {
    if (problem.owner[t] != r) continue;
    local_table_ids.push_back(t);
    const std::int64_t rows = problem.table_rows[t];
    FC_ENFORCE(rows > 0 || problem.max_bag == 0, "table ", t, " has ", rows,
               " rows but bags may be non-empty");
    std::vector<float> table(static_cast<std::size_t>(rows * dim));
    for (std::int64_t i = 0; i < rows * dim; ++i)
      table[i] = draw_value(seed, kTableValues, t, i, problem.values);
    tables.push_back(std::move(table));

    std::vector<std::int64_t> offsets{0}, indices;
    std::vector<float> w;
    for (std::int64_t b = 0; b < global_batch; ++b) {
      const std::int64_t len = problem.bag_length(t, b);
      for (std::int64_t j = 0; j < len; ++j) {
        const auto pos = static_cast<std::uint64_t>(offsets.back() + j);
        indices.push_back(static_cast<std::int64_t>(hash_draw(seed, kBagIndex, t, pos) %
                                                    static_cast<std::uint64_t>(rows)));
        if (problem.weighted) w.push_back(weight_value(seed, t, pos, problem.values));
      }
      offsets.push_back(offsets.back() + len);
    }
    if (problem.index_dtype == DType::i32) {
      offsets32.emplace_back(offsets.begin(), offsets.end());
      indices32.emplace_back(indices.begin(), indices.end());
    }
    offsets64.push_back(std::move(offsets));
    indices64.push_back(std::move(indices));
    weights.push_back(std::move(w));
  }
  output = poisoned(problem.batch_sizes[r] * problem.num_tables() * dim);
}

EmbeddingAllToAllArgs EmbeddingRankData::args() {
  EmbeddingAllToAllArgs a;
  a.dim = problem_.dim;
  a.owner = problem_.owner;
  a.batch_sizes = problem_.batch_sizes;
  a.pooling = problem_.pooling;
  const bool i32 = problem_.index_dtype == DType::i32;
  for (std::size_t i = 0; i < local_table_ids.size(); ++i) {
    EmbeddingTableShard s;
    const std::int64_t rows = problem_.table_rows[local_table_ids[i]];
    s.weights = ConstTensorView(tables[i].data(), DType::f32, {rows, problem_.dim});
    const auto n_off = static_cast<std::int64_t>(offsets64[i].size());
    const auto n_idx = static_cast<std::int64_t>(indices64[i].size());
    if (i32) {
      s.offsets = ConstTensorView(offsets32[i].data(), DType::i32, {n_off});
      s.indices = ConstTensorView(indices32[i].data(), DType::i32, {n_idx});
    } else {
      s.offsets = ConstTensorView(offsets64[i].data(), DType::i64, {n_off});
      s.indices = ConstTensorView(indices64[i].data(), DType::i64, {n_idx});
    }
    if (problem_.weighted) s.per_sample_weights = ConstTensorView(weights[i].data(), DType::f32, {n_idx});
    a.local_tables.push_back(s);
  }
  a.output = TensorView(output.data(), DType::f32,
                        {problem_.batch_sizes[rank], problem_.num_tables(), problem_.dim});
  return a;
}

std::vector<EmbeddingRankData> make_world(const EmbeddingProblem& problem) {
  std::vector<EmbeddingRankData> world;
  for (int r = 0; r < problem.world_size; ++r) world.emplace_back(problem, r);
  return world;
}

// ----------------------------------------------------------------------------------------------
// GemvAllReduce

GemvProblem GemvProblem::transformer(int world_size) {
  GemvProblem p;
  p.world_size = world_size;
  p.m = 4;
  p.n = 4096;
  p.k_splits = split_evenly(11008, world_size);
  p.seed = 2025;
  return p;
}

std::int64_t GemvProblem::k() const {
  std::int64_t k = 0;
  for (auto x : k_splits) k += x;
  return k;
}

GemvRankData::GemvRankData(const GemvProblem& problem, int r) : rank(r), problem_(problem) {
  FC_ENFORCE(r >= 0 && r < problem.world_size, "rank ", r, " outside a world of ",
             problem.world_size);
  FC_ENFORCE_EQ(problem.k_splits.size(), static_cast<std::size_t>(problem.world_size),
                "k_splits needs one entry per rank");
  std::int64_t k0 = 0;
  for (int p = 0; p < r; ++p) k0 += problem.k_splits[p];
  const std::int64_t kp = problem.k_splits[r];
  const std::int64_t k = problem.k();
  w.resize(static_cast<std::size_t>(problem.n * kp));
  x.resize(static_cast<std::size_t>(problem.m * kp));
  // Keyed by the global element index, so the global W and x do not depend on the split.
  for (std::int64_t n = 0; n < problem.n; ++n)
    for (std::int64_t j = 0; j < kp; ++j)
      w[n * kp + j] = draw_value(problem.seed, kGemvW, 0, n * k + k0 + j, problem.values);
  for (std::int64_t m = 0; m < problem.m; ++m)
    for (std::int64_t j = 0; j < kp; ++j)
      x[m * kp + j] = draw_value(problem.seed, kGemvX, 0, m * k + k0 + j, problem.values);
  y = poisoned(problem.m * problem.n);
}

GemvAllReduceArgs GemvRankData::args() {
  GemvAllReduceArgs a;
  a.m = problem_.m;
  a.n = problem_.n;
  a.k_splits = problem_.k_splits;
  const std::int64_t kp = problem_.k_splits[rank];
  a.w = ConstTensorView(w.data(), DType::f32, {problem_.n, kp});
  a.x = ConstTensorView(x.data(), DType::f32, {problem_.m, kp});
  a.y = TensorView(y.data(), DType::f32, {problem_.m, problem_.n});
  return a;
}

std::vector<GemvRankData> make_world(const GemvProblem& problem) {
  std::vector<GemvRankData> world;
  for (int r = 0; r < problem.world_size; ++r) world.emplace_back(problem, r);
  return world;
}

// ----------------------------------------------------------------------------------------------
// GemmAllToAll

GemmProblem GemmProblem::moe(int world_size) {
  GemmProblem p;
  p.world_size = world_size;
  p.k = 1024;
  p.n = 512;
  for (int e = 0; e < 2 * world_size; ++e) p.host.push_back(e % world_size);
  p.seed = 2026;
  p.random_routing(2 * 256 / p.num_experts());
  return p;
}

void GemmProblem::random_routing(std::int64_t max_rows) {
  FC_ENFORCE_GE(max_rows, 0, "random_routing: max_rows is negative");
  counts.assign(static_cast<std::size_t>(world_size * num_experts()), 0);
  for (int s = 0; s < world_size; ++s)
    for (std::int64_t e = 0; e < num_experts(); ++e)
      counts[s * num_experts() + e] = static_cast<std::int64_t>(
          hash_draw(seed, kRouting, s, e) % static_cast<std::uint64_t>(max_rows + 1));
}

GemmRankData::GemmRankData(const GemmProblem& problem, int r) : rank(r), problem_(problem) {
  FC_ENFORCE(r >= 0 && r < problem.world_size, "rank ", r, " outside a world of ",
             problem.world_size);
  const std::int64_t num_experts = problem.num_experts();
  FC_ENFORCE_EQ(problem.counts.size(), static_cast<std::size_t>(problem.world_size * num_experts),
                "counts must hold P * E entries");
  const std::int64_t k = problem.k, n = problem.n;
  for (std::int64_t e = 0; e < num_experts; ++e) {
    if (problem.host[e] != r) continue;
    local_expert_ids.push_back(static_cast<int>(e));
    std::vector<float> we(static_cast<std::size_t>(k * n));
    for (std::int64_t i = 0; i < k * n; ++i)
      we[i] = draw_value(problem.seed, kGemmW, e, i, problem.values);
    std::vector<float> ae;
    for (int s = 0; s < problem.world_size; ++s) {
      // Row i of the block source s routed to e: keyed by (e, s, i), not by its position in A_e.
      const std::int64_t rows = problem.counts[s * num_experts + e];
      for (std::int64_t i = 0; i < rows * k; ++i)
        ae.push_back(draw_value(problem.seed, kGemmA + (static_cast<std::uint64_t>(s) << 8), e, i,
                                problem.values));
    }
    w.push_back(std::move(we));
    a.push_back(std::move(ae));
  }
  std::int64_t rows = 0;
  for (std::int64_t e = 0; e < num_experts; ++e) rows += problem.counts[r * num_experts + e];
  output = poisoned(rows * n);
}

GemmAllToAllArgs GemmRankData::args() {
  GemmAllToAllArgs args;
  args.k = problem_.k;
  args.n = problem_.n;
  args.host = problem_.host;
  args.counts = problem_.counts;
  const std::int64_t num_experts = problem_.num_experts();
  for (std::size_t i = 0; i < local_expert_ids.size(); ++i) {
    const int e = local_expert_ids[i];
    std::int64_t rows = 0;
    for (int s = 0; s < problem_.world_size; ++s) rows += problem_.counts[s * num_experts + e];
    args.local_experts.push_back({ConstTensorView(a[i].data(), DType::f32, {rows, problem_.k}),
                                  ConstTensorView(w[i].data(), DType::f32, {problem_.k, problem_.n})});
  }
  args.output = TensorView(output.data(), DType::f32, {output_rows(args, rank), problem_.n});
  return args;
}

std::vector<GemmRankData> make_world(const GemmProblem& problem) {
  std::vector<GemmRankData> world;
  for (int r = 0; r < problem.world_size; ++r) world.emplace_back(problem, r);
  return world;
}

}  // namespace fusedcoll
