#pragma once
// The tutorial's kernel (docs/kernels.md, "Tutorial"): ReduceScatter fused with its epilogue,
// y_r = relu(x_0[chunk r] + x_1[chunk r] + ... + x_{P-1}[chunk r] + bias_r), and three broken
// versions of it that the tutorial catches with the emulator's aids. The regions marked with
// doc:NAME comments appear verbatim in docs/kernels.md (ctest checks that they do).

#include <cstdint>
#include <vector>

#include "fusedcoll/kernel.hpp"
#include "fusedcoll/kernel_launch.hpp"

namespace tutorial {

namespace fc = fusedcoll;

// [doc:params]
struct Params {
  fc::Symmetric<float> x;      // [P * chunk]: this rank's partial of every chunk
  fc::Symmetric<float> bias;   // [chunk]: this rank's bias
  fc::Symmetric<float> inbox;  // [P * chunk]: slot s holds rank s's partial of my chunk
  fc::Symmetric<float> y;      // [chunk]: my result
  fc::Signals arrived;         // arrived[0]: how many partials are in my inbox
  std::uint64_t target;        // the value arrived[0] reaches in this launch
  std::int64_t chunk;
};
// [/doc:params]

// [doc:steps]
/// Step 1, on every workgroup: my partial of chunk q goes to rank q's inbox slot [me], and one
/// signal tells q it is there. Workgroup w sends to ranks me+1+w, me+1+w+grid, ... (mod P).
template <class Wg>
FC_DEVICE void send(Wg& wg, const Params& p) {
  const int P = wg.world_size(), me = wg.rank();
  for (int j = wg.wg(); j < P; j += wg.num_wgs()) {
    const int q = (me + 1 + j) % P;
    wg.put_signal_nbi(q, p.inbox, me * p.chunk, wg.local(p.x) + q * p.chunk, p.chunk, p.arrived[0],
                      fc::SignalOp::add, 1);
  }
}

/// Step 2, once all P partials are in: fold them in rank order, add the bias, apply relu.
template <class Wg>
FC_DEVICE void reduce(Wg& wg, const Params& p, const float* in) {
  const int P = wg.world_size();
  const float* bias = wg.local(p.bias);
  float* y = wg.local(p.y);
  wg.compute("reduce_relu", fc::cost::reduce(P * p.chunk), [&] {
    for (std::int64_t i = wg.thread_rank(); i < p.chunk; i += wg.num_threads()) {
      float acc = in[i];
      for (int s = 1; s < P; ++s) acc = acc + in[s * p.chunk + i];
      acc = acc + bias[i];
      y[i] = acc > 0.0f ? acc : 0.0f;
    }
  });
}
// [/doc:steps]

// [doc:kernel]
struct ReduceScatterRelu {
  static constexpr const char* name = "reduce_scatter_relu";
  using Params = tutorial::Params;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    send(wg, p);
    if (wg.wg() != 0) FC_RETURN;  // workgroup 0 reduces
    FC_WAIT_UNTIL(wg, p.arrived[0], fc::Cmp::ge, p.target);
    reduce(wg, p, wg.read(p.inbox, 0, wg.world_size() * p.chunk));
    FC_RETURN;
  }
};
// [/doc:kernel]

// [doc:host]
/// One rank's call: `x` is its [P * chunk] partial, `bias` its [chunk]; returns its y.
template <class Kernel = ReduceScatterRelu>
std::vector<float> reduce_scatter_relu(fc::Communicator& comm, const std::vector<float>& x,
                                       const std::vector<float>& bias, int grid = 2) {
  const int P = comm.size();
  const auto chunk = static_cast<std::int64_t>(bias.size());
  Params p;
  p.x = fc::symmetric<float>(comm, "tutorial.x", P * chunk);
  p.bias = fc::symmetric<float>(comm, "tutorial.bias", chunk);
  p.inbox = fc::symmetric<float>(comm, "tutorial.inbox", P * chunk);
  p.y = fc::symmetric<float>(comm, "tutorial.y", chunk);
  p.arrived = fc::signals(comm, "tutorial.arrived", 1);
  p.target = fc::expect(comm, p.arrived[0], P);  // P partials arrive per launch
  p.chunk = chunk;
  fc::upload(comm, p.x, 0, x.data(), P * chunk);
  fc::upload(comm, p.bias, 0, bias.data(), chunk);
  fc::launch<Kernel>(comm, grid, p);
  std::vector<float> y(static_cast<std::size_t>(chunk));
  fc::download(comm, p.y, 0, y.data(), chunk);
  return y;
}
// [/doc:host]

// [doc:oracle]
/// The inputs: rank r's partial x_r and bias_r, small integers and halves so that any bug shows.
inline std::vector<float> x_of(int r, int P, std::int64_t chunk) {
  std::vector<float> x(static_cast<std::size_t>(P * chunk));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((r * 7 + i * 3) % 11) - 5;
  return x;
}
inline std::vector<float> bias_of(int r, std::int64_t chunk) {
  std::vector<float> b(static_cast<std::size_t>(chunk));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.5f * static_cast<float>((r + i) % 3);
  return b;
}

/// Rank r's y by the definition: plain loops.
inline std::vector<float> oracle(int r, int P, std::int64_t chunk) {
  std::vector<float> y(static_cast<std::size_t>(chunk));
  const std::vector<float> bias = bias_of(r, chunk);
  for (std::int64_t i = 0; i < chunk; ++i) {
    float acc = x_of(0, P, chunk)[r * chunk + i];
    for (int s = 1; s < P; ++s) acc = acc + x_of(s, P, chunk)[r * chunk + i];
    acc = acc + bias[i];
    y[i] = acc > 0.0f ? acc : 0.0f;
  }
  return y;
}
// [/doc:oracle]

// The broken versions. Each differs from ReduceScatterRelu in one place.

// [doc:missing_signal]
struct MissingSignal {  // puts, but never signals
  static constexpr const char* name = "missing_signal";
  using Params = tutorial::Params;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const int P = wg.world_size(), me = wg.rank();
    for (int j = wg.wg(); j < P; j += wg.num_wgs()) {
      const int q = (me + 1 + j) % P;
      wg.put_nbi(q, p.inbox, me * p.chunk, wg.local(p.x) + q * p.chunk, p.chunk);  // no signal
    }
    if (wg.wg() != 0) FC_RETURN;
    FC_WAIT_UNTIL(wg, p.arrived[0], fc::Cmp::ge, p.target);
    reduce(wg, p, wg.read(p.inbox, 0, P * p.chunk));
    FC_RETURN;
  }
};
// [/doc:missing_signal]

// [doc:read_before_wait]
struct ReadBeforeWait {  // takes its inbox before the partials are known to be there
  static constexpr const char* name = "read_before_wait";
  using Params = tutorial::Params;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    send(wg, p);
    if (wg.wg() != 0) FC_RETURN;
    const float* in = wg.read(p.inbox, 0, wg.world_size() * p.chunk);  // too early
    FC_WAIT_UNTIL(wg, p.arrived[0], fc::Cmp::ge, p.target);
    reduce(wg, p, in);
    FC_RETURN;
  }
};
// [/doc:read_before_wait]

// [doc:wrong_offset]
struct WrongOffset {  // sends every rank its own chunk instead of the destination's
  static constexpr const char* name = "wrong_offset";
  using Params = tutorial::Params;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const int P = wg.world_size(), me = wg.rank();
    for (int j = wg.wg(); j < P; j += wg.num_wgs()) {
      const int q = (me + 1 + j) % P;
      wg.put_signal_nbi(q, p.inbox, me * p.chunk, wg.local(p.x) + me * p.chunk, p.chunk,
                        p.arrived[0], fc::SignalOp::add, 1);  // me * chunk: should be q
    }
    if (wg.wg() != 0) FC_RETURN;
    FC_WAIT_UNTIL(wg, p.arrived[0], fc::Cmp::ge, p.target);
    reduce(wg, p, wg.read(p.inbox, 0, P * p.chunk));
    FC_RETURN;
  }
};
// [/doc:wrong_offset]

}  // namespace tutorial
