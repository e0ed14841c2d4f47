// The collectives as torch operators (docs/pytorch.md, "Collectives"), and their ref/ oracle over
// the inputs of every rank (`ref_*`), built from the same argument construction.
//
// Tensors split along dimension 0: counts are in rows, a row being the product of the other
// dimensions (torch.distributed's convention); fusedcoll's Args take elements.

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <numeric>

#include "fusedcoll/ref.hpp"
#include "python/csrc/extension.hpp"

namespace fusedcoll::torch_ext {
namespace {

using fusedcoll::detail::make_string;

struct WireArgs {
  c10::string_view format, overflow, scaling;
  std::int64_t block;
  bool pow2_scale, predivide;
  CompressionOptions parse(std::string_view op) const {
    return parse_wire(op, format, overflow, scaling, block, pow2_scale, predivide);
  }
};

std::int64_t rows_of(const at::Tensor& t) { return t.dim() == 0 ? 1 : t.size(0); }

/// Elements per row: the product of the dimensions after the first.
std::int64_t row_elems(const at::Tensor& t) {
  std::int64_t n = 1;
  for (std::int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

/// The shape `[rows, t.shape[1:]...]`.
std::vector<std::int64_t> with_rows(const at::Tensor& t, std::int64_t rows) {
  std::vector<std::int64_t> shape{rows};
  for (std::int64_t d = 1; d < t.dim(); ++d) shape.push_back(t.size(d));
  return shape;
}

std::vector<std::int64_t> equal_split(std::string_view op, std::string_view what, std::int64_t rows,
                                      int world) {
  if (rows % world != 0)
    value_error(op, make_string(what, " has ", rows, " rows, which do not split evenly over ",
                                world, " ranks; pass the counts"));
  return std::vector<std::int64_t>(static_cast<std::size_t>(world), rows / world);
}

std::vector<std::int64_t> counts_of(std::string_view op, std::string_view what,
                                    at::IntArrayRef counts, int world) {
  if (static_cast<int>(counts.size()) != world)
    value_error(op, make_string(what, " has ", counts.size(), " entries for ", world, " ranks"));
  for (const auto c : counts)
    if (c < 0) value_error(op, make_string(what, " has a negative count ", c));
  return to_vector(counts);
}

std::vector<std::int64_t> displs_of(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> d(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

std::vector<std::int64_t> times(std::vector<std::int64_t> v, std::int64_t k) {
  for (auto& x : v) x *= k;
  return v;
}

std::int64_t sum_of(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{0});
}

/// Throws unless `out` can receive `shape` elements of `input`'s dtype.
void check_out(std::string_view op, const at::Tensor& input, const at::Tensor& out,
               const std::vector<std::int64_t>& shape) {
  check_tensor(op, "out", out);
  if (out.scalar_type() != input.scalar_type())
    type_error(op, make_string("out has dtype ", torch_name(out.scalar_type()), ", input has ",
                               torch_name(input.scalar_type())));
  if (out.sizes() != at::IntArrayRef(shape)) {
    std::string want = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) want += make_string(i ? ", " : "", shape[i]);
    want += "]";
    value_error(op, make_string("out has shape ", out.sizes(), ", expected ", want));
  }
}

/// The `_out` variant's checked `out`, or a new tensor of `shape` and input's dtype and device.
at::Tensor output_tensor(std::string_view op, const at::Tensor& input, const at::Tensor* given_out,
                         const std::vector<std::int64_t>& shape) {
  if (given_out == nullptr) return empty_like_dtype(input, shape);
  check_out(op, input, *given_out, shape);
  return *given_out;
}

// --- AllReduce -----------------------------------------------------------------------------------

AllReduceArgs all_reduce_args(const at::Tensor& input, const at::Tensor& out, ReduceOp op,
                              AllReduceAlgo algo, const CompressionOptions& wire, DType dtype) {
  AllReduceArgs a;
  a.send = input.data_ptr();
  a.recv = out.data_ptr();
  a.count = input.numel();
  a.dtype = dtype;
  a.op = op;
  a.algo = algo;
  a.wire = wire;
  return a;
}

const at::Tensor& all_reduce_into(const at::Tensor& input, const at::Tensor& out,
                                  c10::string_view op_name, c10::string_view algo_name,
                                  const WireArgs& w) {
  constexpr std::string_view kOp = "all_reduce";
  check_tensor(kOp, "input", input);
  const DType dtype = reduced_dtype(kOp, "input", input);
  check_out(kOp, input, out, to_vector(input.sizes()));
  const auto args = all_reduce_args(input, out, parse_reduce_op(kOp, op_name),
                                    parse_algo(kOp, algo_name), w.parse(kOp), dtype);
  with_communicator(kOp, [&](Communicator& comm) { all_reduce(comm, args); });
  return out;
}

at::Tensor all_reduce_op(const at::Tensor& input, c10::string_view op, c10::string_view algo,
                         c10::string_view format, c10::string_view overflow,
                         c10::string_view scaling, std::int64_t block, bool pow2, bool predivide) {
  return translate([&] {
    check_tensor("all_reduce", "input", input);
    at::Tensor out = empty_like_dtype(input, input.sizes());
    all_reduce_into(input, out, op, algo, {format, overflow, scaling, block, pow2, predivide});
    return out;
  });
}

at::Tensor& all_reduce_inplace(at::Tensor& self, c10::string_view op, c10::string_view algo,
                               c10::string_view format, c10::string_view overflow,
                               c10::string_view scaling, std::int64_t block, bool pow2,
                               bool predivide) {
  translate([&] {
    all_reduce_into(self, self, op, algo, {format, overflow, scaling, block, pow2, predivide});
  });
  return self;
}

at::Tensor& all_reduce_out(const at::Tensor& input, c10::string_view op, c10::string_view algo,
                           c10::string_view format, c10::string_view overflow,
                           c10::string_view scaling, std::int64_t block, bool pow2, bool predivide,
                           at::Tensor& out) {
  translate([&] {
    all_reduce_into(input, out, op, algo, {format, overflow, scaling, block, pow2, predivide});
  });
  return out;
}

// --- All-to-All(v) -------------------------------------------------------------------------------

/// Rows sent to and received from every rank.
struct AllToAllRows {
  std::vector<std::int64_t> send, recv;
};

AllToAllvArgs all_to_all_args(const at::Tensor& input, const at::Tensor& out,
                              const AllToAllRows& rows, DType dtype,
                              const CompressionOptions& wire) {
  const std::int64_t row = row_elems(input);
  AllToAllvArgs a;
  a.send = input.data_ptr();
  a.recv = out.data_ptr();
  a.send_counts = times(rows.send, row);
  a.send_displs = displs_of(a.send_counts);
  a.recv_counts = times(rows.recv, row);
  a.recv_displs = displs_of(a.recv_counts);
  a.dtype = dtype;
  a.wire = wire;
  return a;
}

void check_split_input(std::string_view op, const at::Tensor& input) {
  if (input.dim() == 0)
    value_error(op, "input is a 0-dimensional tensor; it must have a dimension 0 to split");
}

at::Tensor all_to_all_impl(const at::Tensor& input, c10::optional<at::IntArrayRef> send_counts,
                           c10::optional<at::IntArrayRef> recv_counts, const WireArgs& w,
                           const at::Tensor* given_out) {
  constexpr std::string_view kOp = "all_to_all";
  check_tensor(kOp, "input", input);
  check_split_input(kOp, input);
  const DType dtype = moved_dtype(kOp, "input", input);
  const CompressionOptions wire = w.parse(kOp);
  const int world = current_size();
  AllToAllRows rows;
  rows.send = send_counts ? counts_of(kOp, "send_counts", *send_counts, world)
                          : equal_split(kOp, "input", input.size(0), world);
  if (sum_of(rows.send) != input.size(0))
    value_error(kOp, make_string("send_counts add up to ", sum_of(rows.send),
                                 " rows, but input has ", input.size(0)));
  if (recv_counts) {
    rows.recv = counts_of(kOp, "recv_counts", *recv_counts, world);
  } else if (send_counts) {
    // Every rank learns what it receives from what the others send: one All-to-All of counts.
    rows.recv.assign(static_cast<std::size_t>(world), 0);
    const auto args = make_alltoall(rows.send.data(), rows.recv.data(), 1, DType::i64, world);
    with_communicator(kOp, [&](Communicator& comm) { all_to_allv(comm, args); });
  } else {
    rows.recv = rows.send;
  }
  const auto shape = with_rows(input, sum_of(rows.recv));
  at::Tensor out = output_tensor(kOp, input, given_out, shape);
  const auto args = all_to_all_args(input, out, rows, dtype, wire);
  with_communicator(kOp, [&](Communicator& comm) { all_to_allv(comm, args); });
  return out;
}

at::Tensor all_to_all_op(const at::Tensor& input, c10::optional<at::IntArrayRef> send_counts,
                         c10::optional<at::IntArrayRef> recv_counts, c10::string_view format,
                         c10::string_view overflow, c10::string_view scaling, std::int64_t block,
                         bool pow2, bool predivide) {
  return translate([&] {
    return all_to_all_impl(input, send_counts, recv_counts,
                           {format, overflow, scaling, block, pow2, predivide}, nullptr);
  });
}

at::Tensor& all_to_all_out(const at::Tensor& input, c10::optional<at::IntArrayRef> send_counts,
                           c10::optional<at::IntArrayRef> recv_counts, c10::string_view format,
                           c10::string_view overflow, c10::string_view scaling, std::int64_t block,
                           bool pow2, bool predivide, at::Tensor& out) {
  translate([&] {
    all_to_all_impl(input, send_counts, recv_counts,
                    {format, overflow, scaling, block, pow2, predivide}, &out);
  });
  return out;
}

// --- ReduceScatter -------------------------------------------------------------------------------

ReduceScatterArgs reduce_scatter_args(const at::Tensor& input, const at::Tensor& out,
                                      const std::vector<std::int64_t>& rows, DType dtype,
                                      ReduceOp op, const CompressionOptions& wire) {
  ReduceScatterArgs a;
  a.send = input.data_ptr();
  a.recv = out.data_ptr();
  a.recv_counts = times(rows, row_elems(input));
  a.dtype = dtype;
  a.op = op;
  a.wire = wire;
  return a;
}

std::vector<std::int64_t> scatter_rows(std::string_view op, const at::Tensor& input,
                                       c10::optional<at::IntArrayRef> counts, int world) {
  auto rows = counts ? counts_of(op, "counts", *counts, world)
                     : equal_split(op, "input", input.size(0), world);
  if (sum_of(rows) != input.size(0))
    value_error(
        op, make_string("counts add up to ", sum_of(rows), " rows, but input has ", input.size(0)));
  return rows;
}

at::Tensor reduce_scatter_impl(const at::Tensor& input, c10::optional<at::IntArrayRef> counts,
                               c10::string_view op_name, const WireArgs& w,
                               const at::Tensor* given_out) {
  constexpr std::string_view kOp = "reduce_scatter";
  check_tensor(kOp, "input", input);
  check_split_input(kOp, input);
  const DType dtype = reduced_dtype(kOp, "input", input);
  const ReduceOp op = parse_reduce_op(kOp, op_name);
  const CompressionOptions wire = w.parse(kOp);
  const int world = current_size(), rank = current_rank();
  const auto rows = scatter_rows(kOp, input, counts, world);
  const auto shape = with_rows(input, rows[static_cast<std::size_t>(rank)]);
  at::Tensor out = output_tensor(kOp, input, given_out, shape);
  const auto args = reduce_scatter_args(input, out, rows, dtype, op, wire);
  with_communicator(kOp, [&](Communicator& comm) { reduce_scatter(comm, args); });
  return out;
}

at::Tensor reduce_scatter_op(const at::Tensor& input, c10::optional<at::IntArrayRef> counts,
                             c10::string_view op, c10::string_view format,
                             c10::string_view overflow, c10::string_view scaling,
                             std::int64_t block, bool pow2, bool predivide) {
  return translate([&] {
    return reduce_scatter_impl(input, counts, op,
                               {format, overflow, scaling, block, pow2, predivide}, nullptr);
  });
}

at::Tensor& reduce_scatter_out(const at::Tensor& input, c10::optional<at::IntArrayRef> counts,
                               c10::string_view op, c10::string_view format,
                               c10::string_view overflow, c10::string_view scaling,
                               std::int64_t block, bool pow2, bool predivide, at::Tensor& out) {
  translate([&] {
    reduce_scatter_impl(input, counts, op, {format, overflow, scaling, block, pow2, predivide},
                        &out);
  });
  return out;
}

// --- AllGather -----------------------------------------------------------------------------------

AllGatherArgs all_gather_args(const at::Tensor& input, const at::Tensor& out,
                              const std::vector<std::int64_t>& rows, DType dtype,
                              const CompressionOptions& wire) {
  AllGatherArgs a;
  a.send = input.data_ptr();
  a.recv = out.data_ptr();
  a.recv_counts = times(rows, row_elems(input));
  a.dtype = dtype;
  a.wire = wire;
  return a;
}

/// A 0-dimensional input gathers into a vector of P elements.
std::vector<std::int64_t> gathered_shape(const at::Tensor& input, std::int64_t rows) {
  return input.dim() == 0 ? std::vector<std::int64_t>{rows} : with_rows(input, rows);
}

at::Tensor all_gather_impl(const at::Tensor& input, c10::optional<at::IntArrayRef> counts,
                           const WireArgs& w, const at::Tensor* given_out) {
  constexpr std::string_view kOp = "all_gather";
  check_tensor(kOp, "input", input);
  const DType dtype = moved_dtype(kOp, "input", input);
  const CompressionOptions wire = w.parse(kOp);
  const int world = current_size(), rank = current_rank();
  std::vector<std::int64_t> rows(static_cast<std::size_t>(world), rows_of(input));
  if (counts) {
    rows = counts_of(kOp, "counts", *counts, world);
    if (rows[static_cast<std::size_t>(rank)] != rows_of(input))
      value_error(kOp, make_string("counts[", rank, "] is ", rows[static_cast<std::size_t>(rank)],
                                   ", but this rank's input has ", rows_of(input), " rows"));
  }
  const auto shape = gathered_shape(input, sum_of(rows));
  at::Tensor out = output_tensor(kOp, input, given_out, shape);
  const auto args = all_gather_args(input, out, rows, dtype, wire);
  with_communicator(kOp, [&](Communicator& comm) { all_gather(comm, args); });
  return out;
}

at::Tensor all_gather_op(const at::Tensor& input, c10::optional<at::IntArrayRef> counts,
                         c10::string_view format, c10::string_view overflow,
                         c10::string_view scaling, std::int64_t block, bool pow2, bool predivide) {
  return translate([&] {
    return all_gather_impl(input, counts, {format, overflow, scaling, block, pow2, predivide},
                           nullptr);
  });
}

at::Tensor& all_gather_out(const at::Tensor& input, c10::optional<at::IntArrayRef> counts,
                           c10::string_view format, c10::string_view overflow,
                           c10::string_view scaling, std::int64_t block, bool pow2, bool predivide,
                           at::Tensor& out) {
  translate([&] {
    all_gather_impl(input, counts, {format, overflow, scaling, block, pow2, predivide}, &out);
  });
  return out;
}

// --- Broadcast -----------------------------------------------------------------------------------

BroadcastArgs broadcast_args(const at::Tensor& input, const at::Tensor& out, DType dtype,
                             std::int64_t root) {
  BroadcastArgs a;
  a.send = input.data_ptr();
  a.recv = out.data_ptr();
  a.count = input.numel();
  a.dtype = dtype;
  a.root = static_cast<int>(root);
  if (a.root != root) a.root = -1;  // out of int range: let check() name it
  return a;
}

const at::Tensor& broadcast_into(const at::Tensor& input, const at::Tensor& out,
                                 std::int64_t root) {
  constexpr std::string_view kOp = "broadcast";
  check_tensor(kOp, "input", input);
  const DType dtype = moved_dtype(kOp, "input", input);
  check_out(kOp, input, out, to_vector(input.sizes()));
  const auto args = broadcast_args(input, out, dtype, root);
  with_communicator(kOp, [&](Communicator& comm) { broadcast(comm, args); });
  return out;
}

at::Tensor broadcast_op(const at::Tensor& input, std::int64_t root) {
  return translate([&] {
    check_tensor("broadcast", "input", input);
    at::Tensor out = empty_like_dtype(input, input.sizes());
    broadcast_into(input, out, root);
    return out;
  });
}

at::Tensor& broadcast_inplace(at::Tensor& self, std::int64_t root) {
  translate([&] { broadcast_into(self, self, root); });
  return self;
}

at::Tensor& broadcast_out(const at::Tensor& input, std::int64_t root, at::Tensor& out) {
  translate([&] { broadcast_into(input, out, root); });
  return out;
}

// --- The oracle over every rank's inputs ---------------------------------------------------------

void check_world_inputs(std::string_view op, at::TensorList inputs) {
  if (inputs.empty()) value_error(op, "needs the inputs of at least one rank");
  for (std::size_t r = 0; r < inputs.size(); ++r)
    check_tensor(op, make_string("inputs[", r, "]"), inputs[r]);
}

std::vector<at::Tensor> ref_all_reduce(at::TensorList inputs, c10::string_view op,
                                       c10::string_view algo, c10::string_view format,
                                       c10::string_view overflow, c10::string_view scaling,
                                       std::int64_t block, bool pow2, bool predivide) {
  return translate([&] {
    constexpr std::string_view kOp = "ref_all_reduce";
    check_world_inputs(kOp, inputs);
    const auto wire = parse_wire(kOp, format, overflow, scaling, block, pow2, predivide);
    std::vector<at::Tensor> outs;
    std::vector<AllReduceArgs> args;
    for (const auto& in : inputs) {
      outs.push_back(empty_like_dtype(in, in.sizes()));
      args.push_back(all_reduce_args(in, outs.back(), parse_reduce_op(kOp, op),
                                     parse_algo(kOp, algo), wire, reduced_dtype(kOp, "input", in)));
    }
    ref::all_reduce(args);
    return outs;
  });
}

std::vector<at::Tensor> ref_all_to_all(at::TensorList inputs,
                                       c10::optional<at::IntArrayRef> send_counts,
                                       c10::string_view format, c10::string_view overflow,
                                       c10::string_view scaling, std::int64_t block, bool pow2,
                                       bool predivide) {
  return translate([&] {
    constexpr std::string_view kOp = "ref_all_to_all";
    check_world_inputs(kOp, inputs);
    const auto wire = parse_wire(kOp, format, overflow, scaling, block, pow2, predivide);
    const int world = static_cast<int>(inputs.size());
    std::vector<AllToAllRows> rows(inputs.size());
    for (int r = 0; r < world; ++r) {
      check_split_input(kOp, inputs[r]);
      if (send_counts) {
        if (static_cast<int>(send_counts->size()) != world * world)
          value_error(kOp, make_string("send_counts has ", send_counts->size(),
                                       " entries; expected P x P = ", world * world));
        rows[r].send = to_vector(send_counts->slice(static_cast<std::size_t>(r * world),
                                                    static_cast<std::size_t>(world)));
      } else {
        rows[r].send = equal_split(kOp, make_string("inputs[", r, "]"), inputs[r].size(0), world);
      }
    }
    for (int r = 0; r < world; ++r)
      for (int q = 0; q < world; ++q) rows[r].recv.push_back(rows[q].send[r]);
    std::vector<at::Tensor> outs;
    std::vector<AllToAllvArgs> args;
    for (int r = 0; r < world; ++r) {
      outs.push_back(empty_like_dtype(inputs[r], with_rows(inputs[r], sum_of(rows[r].recv))));
      args.push_back(all_to_all_args(inputs[r], outs.back(), rows[r],
                                     moved_dtype(kOp, "input", inputs[r]), wire));
    }
    ref::all_to_allv(args);
    return outs;
  });
}

std::vector<at::Tensor> ref_reduce_scatter(at::TensorList inputs,
                                           c10::optional<at::IntArrayRef> counts,
                                           c10::string_view op, c10::string_view format,
                                           c10::string_view overflow, c10::string_view scaling,
                                           std::int64_t block, bool pow2, bool predivide) {
  return translate([&] {
    constexpr std::string_view kOp = "ref_reduce_scatter";
    check_world_inputs(kOp, inputs);
    const auto wire = parse_wire(kOp, format, overflow, scaling, block, pow2, predivide);
    const int world = static_cast<int>(inputs.size());
    std::vector<at::Tensor> outs;
    std::vector<ReduceScatterArgs> args;
    for (int r = 0; r < world; ++r) {
      check_split_input(kOp, inputs[r]);
      const auto rows = scatter_rows(kOp, inputs[r], counts, world);
      outs.push_back(empty_like_dtype(inputs[r], with_rows(inputs[r], rows[r])));
      args.push_back(reduce_scatter_args(inputs[r], outs.back(), rows,
                                         reduced_dtype(kOp, "input", inputs[r]),
                                         parse_reduce_op(kOp, op), wire));
    }
    ref::reduce_scatter(args);
    return outs;
  });
}

std::vector<at::Tensor> ref_all_gather(at::TensorList inputs, c10::string_view format,
                                       c10::string_view overflow, c10::string_view scaling,
                                       std::int64_t block, bool pow2, bool predivide) {
  return translate([&] {
    constexpr std::string_view kOp = "ref_all_gather";
    check_world_inputs(kOp, inputs);
    const auto wire = parse_wire(kOp, format, overflow, scaling, block, pow2, predivide);
    std::vector<std::int64_t> rows;
    for (const auto& in : inputs) rows.push_back(rows_of(in));
    std::vector<at::Tensor> outs;
    std::vector<AllGatherArgs> args;
    for (const auto& in : inputs) {
      outs.push_back(empty_like_dtype(in, gathered_shape(in, sum_of(rows))));
      args.push_back(all_gather_args(in, outs.back(), rows, moved_dtype(kOp, "input", in), wire));
    }
    ref::all_gather(args);
    return outs;
  });
}

std::vector<at::Tensor> ref_broadcast(at::TensorList inputs, std::int64_t root) {
  return translate([&] {
    constexpr std::string_view kOp = "ref_broadcast";
    check_world_inputs(kOp, inputs);
    std::vector<at::Tensor> outs;
    std::vector<BroadcastArgs> args;
    for (const auto& in : inputs) {
      outs.push_back(empty_like_dtype(in, in.sizes()));
      args.push_back(broadcast_args(in, outs.back(), moved_dtype(kOp, "input", in), root));
    }
    ref::broadcast(args);
    return outs;
  });
}

std::string with_wire(const std::string& head, const std::string& tail) {
  return head + ", " + kWireSchema + tail;
}

}  // namespace
}  // namespace fusedcoll::torch_ext

TORCH_LIBRARY_FRAGMENT(fusedcoll, m) {
  using namespace fusedcoll::torch_ext;
  static const std::string kAllReduce =
      with_wire("all_reduce(Tensor input, str op=\"sum\", str algo=\"direct\"", ") -> Tensor");
  static const std::string kAllReduceInPlace = with_wire(
      "all_reduce_(Tensor(a!) self, str op=\"sum\", str algo=\"direct\"", ") -> Tensor(a!)");
  static const std::string kAllReduceOut =
      with_wire("all_reduce.out(Tensor input, str op=\"sum\", str algo=\"direct\"",
                ", *, Tensor(a!) out) -> Tensor(a!)");
  m.def(kAllReduce.c_str(), &all_reduce_op);
  m.def(kAllReduceInPlace.c_str(), &all_reduce_inplace);
  m.def(kAllReduceOut.c_str(), &all_reduce_out);

  static const std::string kAllToAll = with_wire(
      "all_to_all(Tensor input, int[]? send_counts=None, int[]? recv_counts=None", ") -> Tensor");
  static const std::string kAllToAllOut =
      with_wire("all_to_all.out(Tensor input, int[]? send_counts=None, int[]? recv_counts=None",
                ", *, Tensor(a!) out) -> Tensor(a!)");
  m.def(kAllToAll.c_str(), &all_to_all_op);
  m.def(kAllToAllOut.c_str(), &all_to_all_out);

  static const std::string kReduceScatter =
      with_wire("reduce_scatter(Tensor input, int[]? counts=None, str op=\"sum\"", ") -> Tensor");
  static const std::string kReduceScatterOut =
      with_wire("reduce_scatter.out(Tensor input, int[]? counts=None, str op=\"sum\"",
                ", *, Tensor(a!) out) -> Tensor(a!)");
  m.def(kReduceScatter.c_str(), &reduce_scatter_op);
  m.def(kReduceScatterOut.c_str(), &reduce_scatter_out);

  static const std::string kAllGather =
      with_wire("all_gather(Tensor input, int[]? counts=None", ") -> Tensor");
  static const std::string kAllGatherOut = with_wire(
      "all_gather.out(Tensor input, int[]? counts=None", ", *, Tensor(a!) out) -> Tensor(a!)");
  m.def(kAllGather.c_str(), &all_gather_op);
  m.def(kAllGatherOut.c_str(), &all_gather_out);

  m.def("broadcast(Tensor input, int root=0) -> Tensor", &broadcast_op);
  m.def("broadcast_(Tensor(a!) self, int root=0) -> Tensor(a!)", &broadcast_inplace);
  m.def("broadcast.out(Tensor input, int root=0, *, Tensor(a!) out) -> Tensor(a!)", &broadcast_out);

  static const std::string kRefAllReduce = with_wire(
      "ref_all_reduce(Tensor[] inputs, str op=\"sum\", str algo=\"direct\"", ") -> Tensor[]");
  static const std::string kRefAllToAll =
      with_wire("ref_all_to_all(Tensor[] inputs, int[]? send_counts=None", ") -> Tensor[]");
  static const std::string kRefReduceScatter = with_wire(
      "ref_reduce_scatter(Tensor[] inputs, int[]? counts=None, str op=\"sum\"", ") -> Tensor[]");
  static const std::string kRefAllGather =
      with_wire("ref_all_gather(Tensor[] inputs", ") -> Tensor[]");
  m.def(kRefAllReduce.c_str(), &ref_all_reduce);
  m.def(kRefAllToAll.c_str(), &ref_all_to_all);
  m.def(kRefReduceScatter.c_str(), &ref_reduce_scatter);
  m.def(kRefAllGather.c_str(), &ref_all_gather);
  m.def("ref_broadcast(Tensor[] inputs, int root=0) -> Tensor[]", &ref_broadcast);
}
