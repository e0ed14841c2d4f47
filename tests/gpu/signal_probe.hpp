#pragma once
// A two-rank kernel over the GPU runtime's signal/wait primitives, for the timeout test. Plain
// C++ interface: the test itself is compiled by the host compiler (clang 15 in hipcc crashes on
// GoogleTest's headers in device mode), the kernels in signal_probe.cpp by hipcc / nvcc.

#include <memory>

namespace fusedcoll::gpu::testing {

class SignalProbe {
 public:
  /// A Context of 2 ranks on device 0 whose waits time out after `timeout_s`.
  explicit SignalProbe(double timeout_s);
  ~SignalProbe();
  /// Rank 0's block 0 waits for rank 1's signal on slot 'test.from'[1]; with `send_signal` false
  /// rank 1 never sends it (the bug under test) and this throws the Context's TimeoutError.
  void run(bool send_signal);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The same in process mode (tests/gpu/process_probe.cpp): this process's rank of MPI_COMM_WORLD
/// on its own Context, peers through IPC or the proxy as FUSEDCOLL_GPU_PROXY says.
class ProcessSignalProbe {
 public:
  explicit ProcessSignalProbe(double timeout_s);
  ~ProcessSignalProbe();
  int rank() const;
  /// Rank 0's block 0 waits for one more signal from rank 1 on 'test.from'[1]; rank 1 sends it
  /// only if `send_signal`. Rank 0 then throws the Context's TimeoutError.
  void run(bool send_signal);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusedcoll::gpu::testing
