// The three fused operators as torch operators (docs/pytorch.md, "Fused operators"). Each builds
// its Args from contiguous CPU tensors and runs in the given mode on the calling thread's
// communicator; fusedcoll's own checks judge shapes, indices and cross-rank agreement.

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "python/csrc/extension.hpp"

namespace fusedcoll::torch_ext {
namespace {

using fusedcoll::detail::make_string;

void require_matrix(std::string_view op, std::string_view what, const at::Tensor& t) {
  if (t.dim() != 2)
    value_error(op, make_string(what, " must be 2-dimensional, got ", t.dim(), " dimensions"));
}

at::Tensor embedding_alltoall_op(at::TensorList weights, at::TensorList offsets,
                                 at::TensorList indices,
                                 const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                                 std::int64_t dim, at::IntArrayRef owner,
                                 at::IntArrayRef batch_sizes, c10::string_view pooling,
                                 c10::string_view mode) {
  return translate([&] {
    constexpr std::string_view kOp = "embedding_alltoall";
    const std::size_t local = weights.size();
    if (offsets.size() != local || indices.size() != local)
      value_error(kOp, make_string("weights, offsets and indices need one entry per local table; "
                                   "got ",
                                   local, ", ", offsets.size(), " and ", indices.size()));
    if (!per_sample_weights.empty() && per_sample_weights.size() != local)
      value_error(kOp, make_string("per_sample_weights has ", per_sample_weights.size(),
                                   " entries for ", local, " local tables (pass [] for none)"));
    EmbeddingAllToAllArgs args;
    args.dim = dim;
    for (const auto o : owner) {
      if (o < INT32_MIN || o > INT32_MAX)
        value_error(kOp, make_string("owner ", o, " is not a rank"));
      args.owner.push_back(static_cast<int>(o));
    }
    args.batch_sizes = to_vector(batch_sizes);
    args.pooling = parse_pooling(kOp, pooling);
    const Mode m = parse_mode(kOp, mode);
    for (std::size_t i = 0; i < local; ++i) {
      const auto name = [&](const char* what) { return make_string(what, "[", i, "]"); };
      check_tensor(kOp, name("weights"), weights[i]);
      require_f32(kOp, name("weights"), weights[i]);
      check_tensor(kOp, name("offsets"), offsets[i]);
      check_tensor(kOp, name("indices"), indices[i]);
      EmbeddingTableShard s;
      s.weights = const_view(weights[i], DType::f32);
      s.offsets = const_view(
          offsets[i], exact_dtype(kOp, name("offsets"), offsets[i], "torch.int32 or torch.int64"));
      s.indices = const_view(
          indices[i], exact_dtype(kOp, name("indices"), indices[i], "torch.int32 or torch.int64"));
      if (!per_sample_weights.empty()) {
        const c10::optional<at::Tensor> w = per_sample_weights.get(i);
        if (w.has_value() && w->defined()) {
          check_tensor(kOp, name("per_sample_weights"), *w);
          require_f32(kOp, name("per_sample_weights"), *w);
          s.per_sample_weights = const_view(*w, DType::f32);
        }
      }
      args.local_tables.push_back(s);
    }
    const int rank = current_rank();
    if (rank >= static_cast<int>(args.batch_sizes.size()))
      value_error(kOp, make_string("batch_sizes has ", args.batch_sizes.size(),
                                   " entries; this is rank ", rank));
    // Negative sizes are left for fusedcoll's check to name; the buffer is then empty.
    at::Tensor out =
        at::empty({std::max<std::int64_t>(0, args.batch_sizes[static_cast<std::size_t>(rank)]),
                   static_cast<std::int64_t>(args.owner.size()), std::max<std::int64_t>(0, dim)},
                  at::TensorOptions().dtype(at::kFloat));
    args.output = mutable_view(out, DType::f32);
    with_communicator(kOp, [&](Communicator& comm) { embedding_alltoall(comm, args, m); });
    return out;
  });
}

at::Tensor gemv_allreduce_op(const at::Tensor& w, const at::Tensor& x, at::IntArrayRef k_splits,
                             c10::string_view mode) {
  return translate([&] {
    constexpr std::string_view kOp = "gemv_allreduce";
    check_tensor(kOp, "w", w);
    check_tensor(kOp, "x", x);
    require_f32(kOp, "w", w);
    require_f32(kOp, "x", x);
    require_matrix(kOp, "w", w);
    require_matrix(kOp, "x", x);
    GemvAllReduceArgs args;
    args.m = x.size(0);
    args.n = w.size(0);
    args.k_splits = to_vector(k_splits);
    args.w = const_view(w, DType::f32);
    args.x = const_view(x, DType::f32);
    const Mode m = parse_mode(kOp, mode);
    at::Tensor y = at::empty({args.m, args.n}, at::TensorOptions().dtype(at::kFloat));
    args.y = mutable_view(y, DType::f32);
    with_communicator(kOp, [&](Communicator& comm) { gemv_allreduce(comm, args, m); });
    return y;
  });
}

at::Tensor gemm_alltoall_op(at::TensorList a, at::TensorList w, std::int64_t k, std::int64_t n,
                            at::IntArrayRef host, at::IntArrayRef counts, c10::string_view mode) {
  return translate([&] {
    constexpr std::string_view kOp = "gemm_alltoall";
    if (a.size() != w.size())
      value_error(kOp, make_string("a and w need one entry per local expert; got ", a.size(),
                                   " and ", w.size()));
    GemmAllToAllArgs args;
    args.k = k;
    args.n = n;
    for (const auto h : host) {
      if (h < INT32_MIN || h > INT32_MAX)
        value_error(kOp, make_string("host ", h, " is not a rank"));
      args.host.push_back(static_cast<int>(h));
    }
    args.counts = to_vector(counts);
    const Mode m = parse_mode(kOp, mode);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const auto name = [&](const char* what) { return make_string(what, "[", i, "]"); };
      check_tensor(kOp, name("a"), a[i]);
      check_tensor(kOp, name("w"), w[i]);
      require_f32(kOp, name("a"), a[i]);
      require_f32(kOp, name("w"), w[i]);
      args.local_experts.push_back({const_view(a[i], DType::f32), const_view(w[i], DType::f32)});
    }
    const int rank = current_rank(), world = current_size();
    const auto experts = static_cast<std::int64_t>(args.host.size());
    if (static_cast<std::int64_t>(args.counts.size()) != experts * world)
      value_error(kOp, make_string("counts has ", args.counts.size(),
                                   " entries; expected P x E = ", world, " x ", experts));
    std::int64_t rows = 0;
    for (std::int64_t e = 0; e < experts; ++e)
      rows += std::max<std::int64_t>(0, args.counts[static_cast<std::size_t>(rank * experts + e)]);
    at::Tensor out =
        at::empty({rows, std::max<std::int64_t>(0, n)}, at::TensorOptions().dtype(at::kFloat));
    args.output = mutable_view(out, DType::f32);
    with_communicator(kOp, [&](Communicator& comm) { gemm_alltoall(comm, args, m); });
    return out;
  });
}

}  // namespace
}  // namespace fusedcoll::torch_ext

TORCH_LIBRARY_FRAGMENT(fusedcoll, m) {
  using namespace fusedcoll::torch_ext;
  m.def(
      "embedding_alltoall(Tensor[] weights, Tensor[] offsets, Tensor[] indices, "
      "Tensor?[] per_sample_weights, int dim, int[] owner, int[] batch_sizes, "
      "str pooling=\"sum\", str mode=\"scale_up\") -> Tensor",
      &embedding_alltoall_op);
  m.def("gemv_allreduce(Tensor w, Tensor x, int[] k_splits, str mode=\"scale_up\") -> Tensor",
        &gemv_allreduce_op);
  m.def(
      "gemm_alltoall(Tensor[] a, Tensor[] w, int k, int n, int[] host, int[] counts, "
      "str mode=\"scale_up\") -> Tensor",
      &gemm_alltoall_op);
}
