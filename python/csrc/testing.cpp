// fusedcoll's seeded inputs from Python (`fusedcoll.testing`): `fill_values_` draws the values the
// C++ suites use, and the `problem_*` operators build one rank's inputs of a whole operator
// problem with the generators of inputs.hpp, together with that rank's output as `ref/` computes
// it over the whole world. A Python test then runs the operator on the same inputs and compares
// bytes: the expected bits never pass through the binding's own argument construction.

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstring>
#include <tuple>

#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"
#include "python/csrc/extension.hpp"

namespace fusedcoll::torch_ext {
namespace {

using fusedcoll::detail::make_string;

ValueMode parse_values(std::string_view op, c10::string_view s) {
  if (s == "random") return ValueMode::random;
  if (s == "integer") return ValueMode::integer;
  value_error(op, make_string("values '", s, "' is not one of 'random', 'integer'"));
}

template <class T>
at::Tensor tensor_of(const std::vector<T>& v, std::vector<std::int64_t> shape,
                     c10::ScalarType type) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  FC_CHECK_INTERNAL(static_cast<std::size_t>(t.numel()) == v.size(), "tensor_of: ", t.numel(),
                    " elements for ", v.size(), " values");
  if (!v.empty()) std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return t;
}

at::Tensor& fill_values_op(at::Tensor& self, std::int64_t seed, std::int64_t stream,
                           std::int64_t rank, c10::string_view mode) {
  translate([&] {
    constexpr std::string_view kOp = "testing.fill_values_";
    check_tensor(kOp, "self", self);
    const DType d = exact_dtype(kOp, "self", self,
                                "torch.float32, torch.float16, torch.bfloat16, torch.int32 or "
                                "torch.int64");
    FC_ENFORCE(rank >= 0 && rank <= INT32_MAX, "rank ", rank, " is out of range");
    fill_values(self.data_ptr(), self.numel(), d, static_cast<std::uint64_t>(seed),
                static_cast<std::uint64_t>(stream), static_cast<int>(rank),
                parse_values(kOp, mode));
  });
  return self;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> problem_gemv(
    std::int64_t world_size, std::int64_t rank, std::int64_t m, std::int64_t n,
    at::IntArrayRef k_splits, std::int64_t seed, c10::string_view values) {
  return translate([&] {
    GemvProblem p;
    p.world_size = static_cast<int>(world_size);
    p.m = m;
    p.n = n;
    p.k_splits = to_vector(k_splits);
    p.values = parse_values("testing.problem_gemv", values);
    p.seed = static_cast<std::uint64_t>(seed);
    FC_ENFORCE(rank >= 0 && rank < world_size, "rank ", rank, " outside a world of ", world_size);
    auto world = make_world(p);
    ref::gemv_allreduce(args_of(world));
    const auto& mine = world[static_cast<std::size_t>(rank)];
    const std::int64_t k = p.k_splits[static_cast<std::size_t>(rank)];
    return std::make_tuple(tensor_of(mine.w, {n, k}, at::kFloat),
                           tensor_of(mine.x, {m, k}, at::kFloat),
                           tensor_of(mine.y, {m, n}, at::kFloat));
  });
}

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>,
           std::vector<at::Tensor>, at::Tensor>
problem_embedding(std::int64_t world_size, std::int64_t rank, std::int64_t dim,
                  at::IntArrayRef table_rows, at::IntArrayRef owner, at::IntArrayRef batch_sizes,
                  c10::string_view pooling, std::int64_t min_bag, std::int64_t max_bag,
                  bool weighted, bool i32_indices, std::int64_t seed, c10::string_view values) {
  return translate([&] {
    constexpr std::string_view kOp = "testing.problem_embedding";
    EmbeddingProblem p;
    p.world_size = static_cast<int>(world_size);
    p.dim = dim;
    p.table_rows = to_vector(table_rows);
    for (const auto o : owner) p.owner.push_back(static_cast<int>(o));
    p.batch_sizes = to_vector(batch_sizes);
    p.pooling = parse_pooling(kOp, pooling);
    p.min_bag = min_bag;
    p.max_bag = max_bag;
    p.weighted = weighted;
    p.index_dtype = i32_indices ? DType::i32 : DType::i64;
    p.values = parse_values(kOp, values);
    p.seed = static_cast<std::uint64_t>(seed);
    FC_ENFORCE(rank >= 0 && rank < world_size, "rank ", rank, " outside a world of ", world_size);
    auto world = make_world(p);
    ref::embedding_alltoall(args_of(world));
    const auto& mine = world[static_cast<std::size_t>(rank)];
    std::vector<at::Tensor> weights, offsets, indices, psw;
    for (std::size_t i = 0; i < mine.local_table_ids.size(); ++i) {
      const std::int64_t rows = p.table_rows[static_cast<std::size_t>(mine.local_table_ids[i])];
      weights.push_back(tensor_of(mine.tables[i], {rows, dim}, at::kFloat));
      if (i32_indices) {
        offsets.push_back(tensor_of(
            mine.offsets32[i], {static_cast<std::int64_t>(mine.offsets32[i].size())}, at::kInt));
        indices.push_back(tensor_of(
            mine.indices32[i], {static_cast<std::int64_t>(mine.indices32[i].size())}, at::kInt));
      } else {
        offsets.push_back(tensor_of(
            mine.offsets64[i], {static_cast<std::int64_t>(mine.offsets64[i].size())}, at::kLong));
        indices.push_back(tensor_of(
            mine.indices64[i], {static_cast<std::int64_t>(mine.indices64[i].size())}, at::kLong));
      }
      if (weighted)
        psw.push_back(tensor_of(mine.weights[i],
                                {static_cast<std::int64_t>(mine.weights[i].size())}, at::kFloat));
    }
    at::Tensor expected = tensor_of(mine.output,
                                    {p.batch_sizes[static_cast<std::size_t>(rank)],
                                     static_cast<std::int64_t>(p.owner.size()), dim},
                                    at::kFloat);
    return std::make_tuple(weights, offsets, indices, psw, expected);
  });
}

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, at::Tensor> problem_gemm(
    std::int64_t world_size, std::int64_t rank, std::int64_t k, std::int64_t n,
    at::IntArrayRef host, at::IntArrayRef counts, std::int64_t seed, c10::string_view values) {
  return translate([&] {
    GemmProblem p;
    p.world_size = static_cast<int>(world_size);
    p.k = k;
    p.n = n;
    for (const auto h : host) p.host.push_back(static_cast<int>(h));
    p.counts = to_vector(counts);
    p.values = parse_values("testing.problem_gemm", values);
    p.seed = static_cast<std::uint64_t>(seed);
    FC_ENFORCE(rank >= 0 && rank < world_size, "rank ", rank, " outside a world of ", world_size);
    auto world = make_world(p);
    auto args = args_of(world);
    ref::gemm_alltoall(args);
    const auto& mine = world[static_cast<std::size_t>(rank)];
    std::vector<at::Tensor> a, w;
    for (std::size_t i = 0; i < mine.local_expert_ids.size(); ++i) {
      const auto e = static_cast<std::size_t>(mine.local_expert_ids[i]);
      std::int64_t rows = 0;
      for (std::size_t s = 0; s < static_cast<std::size_t>(world_size); ++s)
        rows += p.counts[s * p.host.size() + e];
      a.push_back(tensor_of(mine.a[i], {rows, k}, at::kFloat));
      w.push_back(tensor_of(mine.w[i], {k, n}, at::kFloat));
    }
    const std::int64_t out_rows =
        output_rows(args[static_cast<std::size_t>(rank)], static_cast<int>(rank));
    return std::make_tuple(a, w, tensor_of(mine.output, {out_rows, n}, at::kFloat));
  });
}

}  // namespace
}  // namespace fusedcoll::torch_ext

TORCH_LIBRARY_FRAGMENT(fusedcoll, m) {
  using namespace fusedcoll::torch_ext;
  m.def(
      "fill_values_(Tensor(a!) self, int seed, int stream, int rank, str values=\"random\") -> "
      "Tensor(a!)",
      &fill_values_op);
  m.def(
      "problem_gemv(int world_size, int rank, int m, int n, int[] k_splits, int seed, "
      "str values=\"random\") -> (Tensor, Tensor, Tensor)",
      &problem_gemv);
  m.def(
      "problem_embedding(int world_size, int rank, int dim, int[] table_rows, int[] owner, "
      "int[] batch_sizes, str pooling, int min_bag, int max_bag, bool weighted, bool i32_indices, "
      "int seed, str values=\"random\") -> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor)",
      &problem_embedding);
  m.def(
      "problem_gemm(int world_size, int rank, int k, int n, int[] host, int[] counts, int seed, "
      "str values=\"random\") -> (Tensor[], Tensor[], Tensor)",
      &problem_gemm);
}
