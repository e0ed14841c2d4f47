#pragma once
// The fused-operator problems every backend's suite runs (emu, MPI): uneven placements of tables
// and experts, uneven batches with empty ranges, empty bags, both index types, weighted and mean
// pooling, integer and random values. Inputs are pure functions of the problem and its seed, so a
// multi-process suite regenerates any rank's data locally.

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/inputs.hpp"

namespace fctest::ops {

using fusedcoll::DType;
using fusedcoll::EmbeddingProblem;
using fusedcoll::GemmProblem;
using fusedcoll::PoolingMode;
using fusedcoll::ValueMode;

/// Where tables or experts go: 0 round robin, 1 all on rank 0, 2 odd ranks only, 3 all on the
/// last rank, 4 reversed blocks.
inline std::vector<int> place(std::int64_t count, int P, int how) {
  std::vector<int> owner(static_cast<std::size_t>(count));
  for (std::int64_t t = 0; t < count; ++t) {
    int o = 0;
    switch (how % 5) {
      case 0: o = static_cast<int>(t % P); break;
      case 1: o = 0; break;
      case 2: o = P / 2 == 0 ? 0 : 1 + 2 * static_cast<int>(t % (P / 2)); break;
      case 3: o = P - 1; break;
      case 4: o = P - 1 - static_cast<int>(t * P / std::max<std::int64_t>(count, 1)); break;
    }
    owner[static_cast<std::size_t>(t)] = o;
  }
  return owner;
}

/// Uneven batch ranges: every third rank gets none, the others 1..37 (so some ranges span several
/// 16-sample tiles and end in a partial one).
inline std::vector<std::int64_t> batches(int P, std::uint64_t salt) {
  std::vector<std::int64_t> b(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q)
    b[q] = (q % 3 == 1) ? 0 : 1 + static_cast<std::int64_t>((q * 11 + salt * 7 + P) % 37);
  return b;
}

/// Variant v: 0 sum/i64, 1 weighted sum/i32, 2 mean/i64, 3 sum/i32 integer values, 4 mean/i32,
/// 5 weighted sum/i64 integer values.
inline EmbeddingProblem emb_problem(int P, int variant, std::uint64_t seed) {
  EmbeddingProblem pb;
  pb.world_size = P;
  const std::int64_t dims[] = {1, 3, 8, 13, 20};
  pb.dim = dims[(variant + P) % 5];
  const std::int64_t T = P + 1 + variant % 2;
  for (std::int64_t t = 0; t < T; ++t) pb.table_rows.push_back(3 + (t * 7 + variant) % 23);
  pb.owner = place(T, P, variant + P);
  pb.batch_sizes = batches(P, static_cast<std::uint64_t>(variant));
  pb.min_bag = 0;  // empty bags occur
  pb.max_bag = 6;
  pb.pooling = (variant == 2 || variant == 4) ? PoolingMode::mean : PoolingMode::sum;
  pb.weighted = variant == 1 || variant == 5;
  pb.index_dtype = (variant == 1 || variant == 3 || variant == 4) ? DType::i32 : DType::i64;
  pb.values = (variant == 3 || variant == 5) ? ValueMode::integer : ValueMode::random;
  pb.seed = seed;
  return pb;
}

inline std::string describe(const EmbeddingProblem& pb) {
  std::ostringstream os;
  os << "P=" << pb.world_size << " D=" << pb.dim << " T=" << pb.num_tables() << " owner=[";
  for (int o : pb.owner) os << o << " ";
  os << "] batch=[";
  for (auto b : pb.batch_sizes) os << b << " ";
  os << "] " << fusedcoll::to_string(pb.pooling) << (pb.weighted ? " weighted" : "")
     << " idx=" << fusedcoll::dtype_name(pb.index_dtype) << " seed=" << pb.seed;
  return os.str();
}

inline GemmProblem gemm_problem(int P, int variant, std::uint64_t seed) {
  GemmProblem pb;
  pb.world_size = P;
  const std::int64_t ks[] = {1, 7, 33, 4, 16};
  const std::int64_t ns[] = {5, 70, 1, 130, 16};
  pb.k = ks[(variant + P) % 5];
  pb.n = ns[(variant + 2 * P) % 5];
  const std::int64_t E = variant % 2 == 0 ? P + 1 : 2 * P;
  pb.host = place(E, P, variant + P);
  pb.values = variant % 3 == 2 ? ValueMode::integer : ValueMode::random;
  pb.seed = seed;
  pb.random_routing(variant % 2 == 0 ? 37 : 9);  // zero counts occur; some span several tiles
  return pb;
}

inline std::string describe(const GemmProblem& pb) {
  std::ostringstream os;
  os << "P=" << pb.world_size << " K=" << pb.k << " N=" << pb.n << " host=[";
  for (int h : pb.host) os << h << " ";
  os << "] counts=[";
  for (auto c : pb.counts) os << c << " ";
  os << "] seed=" << pb.seed;
  return os.str();
}

}  // namespace fctest::ops
