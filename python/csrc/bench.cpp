// The C++ side of the binding-overhead benchmark (python/bench/allreduce_overhead.py): the same
// AllReduce the operator `all_reduce.out` makes, called `calls` times straight from C++ on the
// same communicator and buffers, so that the Python loop over the operator and this loop differ
// only by what the binding adds (dispatch, argument checks and parsing, the session lookup).

#include <torch/library.h>

#include <chrono>
#include <cstdint>

#include "fusedcoll/collectives.hpp"
#include "python/csrc/extension.hpp"

namespace fusedcoll::torch_ext {
namespace {

double bench_all_reduce_cpp(const at::Tensor& input, at::Tensor& out, std::int64_t calls) {
  constexpr std::string_view kOp = "_bench_all_reduce_cpp";
  return translate([&] {
    check_tensor(kOp, "input", input);
    check_tensor(kOp, "out", out);
    require_f32(kOp, "input", input);
    require_f32(kOp, "out", out);
    if (out.numel() != input.numel()) value_error(kOp, "out must have input's element count");
    if (calls < 1) value_error(kOp, "calls must be >= 1");
    AllReduceArgs args;
    args.send = input.data_ptr();
    args.recv = out.data_ptr();
    args.count = input.numel();
    args.dtype = DType::f32;
    double seconds = 0;
    with_communicator(kOp, [&](Communicator& comm) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < calls; ++i) all_reduce(comm, args);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    return seconds;
  });
}

}  // namespace
}  // namespace fusedcoll::torch_ext

TORCH_LIBRARY_FRAGMENT(fusedcoll, m) {
  m.def("_bench_all_reduce_cpp(Tensor input, Tensor(a!) out, int calls) -> float",
        &fusedcoll::torch_ext::bench_all_reduce_cpp);
}
