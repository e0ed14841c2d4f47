// The process-mode timeout probe's kernel (tests/gpu/signal_probe.hpp).

#include <mpi.h>

#include "fusedcoll/env.hpp"
#include "gpu/process.hpp"
#include "tests/gpu/signal_probe.hpp"

namespace fusedcoll::gpu::testing {
namespace {

__global__ void process_probe(SyncView s, int me, int from, std::uint64_t target, int send) {
  if (me == 1) {
    if (send != 0) block_signal(s, 0, from + 1, 1, me);
    return;
  }
  if (me == 0) (void)block_wait(s, me, from + 1, target);
}

ProcessPtr make(double timeout_s) {
  ProcessSetup setup;
  setup.comm = MPI_COMM_WORLD;
  setup.timeout_s = timeout_s;
  setup.proxy = env().gpu_proxy;
  return ProcessPtr(new Process(setup));
}

}  // namespace

struct ProcessSignalProbe::Impl {
  explicit Impl(ProcessPtr p, double timeout_s)
      : size(p->size()), device(p->device()), ctx(size, device, timeout_s, std::move(p)) {}
  int size, device;
  Context ctx;
};

ProcessSignalProbe::ProcessSignalProbe(double timeout_s) {
  ProcessPtr p = make(timeout_s);
  impl_ = std::make_unique<Impl>(std::move(p), timeout_s);
}
ProcessSignalProbe::~ProcessSignalProbe() = default;

int ProcessSignalProbe::rank() const { return impl_->ctx.me(); }

void ProcessSignalProbe::run(bool send_signal) {
  Context& ctx = impl_->ctx;
  const char* op = send_signal ? "probe" : "broken probe";
  ctx.process()->exchange("", "to start the probe");  // no rank runs ahead into the next call
  ctx.begin_call(op);
  const int from = ctx.slots("test.from", 2);
  const std::uint64_t target = ctx.expect(0, from + 1, 1);
  process_probe<<<1, kThreads, 0, ctx.stream()>>>(ctx.view(), ctx.me(), from, target,
                                                  send_signal ? 1 : 0);
  ctx.finish(op);
}

}  // namespace fusedcoll::gpu::testing
