// Kernels of the timeout test (tests/gpu/signal_probe.hpp).

#include "tests/gpu/signal_probe.hpp"

#include "gpu/runtime.hpp"

namespace fusedcoll::gpu::testing {
namespace {

__global__ void probe(SyncView s, int from, std::uint64_t target, int send_signal) {
  const int me = static_cast<int>(blockIdx.y);
  if (me == 1) {
    if (send_signal != 0) block_signal(s, 0, from + 1, 1);
    return;
  }
  (void)block_wait(s, me, from + 1, target);
}

}  // namespace

struct SignalProbe::Impl {
  explicit Impl(double timeout_s) : ctx(2, 0, timeout_s) {}
  Context ctx;
};

SignalProbe::SignalProbe(double timeout_s) : impl_(std::make_unique<Impl>(timeout_s)) {}
SignalProbe::~SignalProbe() = default;

void SignalProbe::run(bool send_signal) {
  Context& ctx = impl_->ctx;
  const char* op = send_signal ? "probe" : "broken probe";
  ctx.begin_call(op);
  const int from = ctx.slots("test.from", 2);
  const std::uint64_t target = ctx.expect(0, from + 1, 1);
  probe<<<dim3(1, 2), kThreads, 0, ctx.stream()>>>(ctx.view(), from, target, send_signal ? 1 : 0);
  ctx.finish(op);
}

}  // namespace fusedcoll::gpu::testing
