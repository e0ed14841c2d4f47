#pragma once
/// @file
/// The scale-out simulator (docs/simulation.md, "Scale-out"): a cluster of N nodes x G devices on
/// SimGrid S4U, built from a cost-model preset, and the DLRM training iteration and the three
/// operators, baseline (compute, then the collective) and fused (the plan's slices sent as the
/// tiles that fill them finish). Internal to fusedcoll-sim and its tests, not installed.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fusedcoll/model.hpp"

namespace fusedcoll::sim {

/// The simulated machine.
struct Cluster {
  model::Preset preset;
  int nodes = 0;
  /// Fat tree above the nodes: leaf switches of `radix` nodes; `taper` >= 1 divides the leaf
  /// switches' uplinks (1 = non-blocking).
  int radix = 8;
  double taper = 1.0;
  int ranks() const { return nodes * preset.links.gpus_per_node; }
};

/// Throws InvalidArgument for a cluster the simulator cannot build (zero nodes, bad taper...).
void check(const Cluster& c);

// --- What ranks do: a program of steps per rank, run by the simulator ------------------------

/// Bytes one rank sends another, leaving `at` seconds after the step starts.
struct Send {
  double at = 0;
  int dst = 0;
  std::int64_t bytes = 0;
};

/// One step of a rank's compute stream.
struct Step {
  enum Kind : std::uint8_t {
    compute,    ///< the stream is busy `seconds` (one or more kernels)
    exchange,   ///< `sends` leave at their times while a kernel of `seconds` runs; then the rank
                ///< waits for every byte addressed to it, then `after` seconds (unpacking)
    allreduce,  ///< starts an AllReduce of `bytes` on the rank's communication stream
    wait_comm,  ///< waits for every AllReduce started so far
  };
  Kind kind = compute;
  std::string phase;  ///< the breakdown's name for the time this step takes
  double seconds = 0;
  double after = 0;
  std::vector<Send> sends;
  std::int64_t bytes = 0;
};

/// A compute step: the stream is busy `seconds`, counted under `phase`.
inline Step compute_step(std::string phase, double seconds) {
  Step st;
  st.kind = Step::compute;
  st.phase = std::move(phase);
  st.seconds = seconds;
  return st;
}

/// An exchange step counted under `phase`; the caller adds its sends, kernel time and unpack.
inline Step exchange_step(std::string phase) {
  Step st;
  st.kind = Step::exchange;
  st.phase = std::move(phase);
  return st;
}

using Program = std::vector<Step>;

/// What a simulation measured.
struct Result {
  double iteration = 0;  ///< the last rank's end, seconds
  double compute = 0;    ///< the busiest rank's compute-stream time, seconds
  double exposed = 0;    ///< iteration - compute
  /// Per phase name: the time rank 0 spent in it (compute and waiting), in program order.
  std::vector<std::pair<std::string, double>> phases;
  std::int64_t flows = 0;  ///< simulated network transfers
  double wall = 0;         ///< CPU seconds the simulation took (one core)
};

/// Simulator settings that are not the machine.
struct Options {
  /// Transfers to one node whose send times lie within `merge_window` seconds are one flow to the
  /// node's device of the sender's local index (docs/simulation.md, "Flows").
  double merge_window = 0;
  /// SimGrid network model: "CM02" (default, calibrated: no latency or bandwidth factors) or any
  /// model name SimGrid accepts.
  std::string network_model = "CM02";
  /// SimGrid's time precision, seconds (surf/precision): completions closer than this are one
  /// event. 1 ns is SimGrid's default; 1 us keeps a 128-node iteration within seconds.
  double time_precision = 1e-6;
};

/// Runs `program(rank)` for every rank of `c` on SimGrid. One SimGrid engine per process: call it
/// through `run_isolated` to run several simulations in one process.
Result simulate(const Cluster& c, const std::function<Program(int)>& program, const Options& o);

/// Runs `fn` in a forked child and returns its result (SimGrid's engine is a process singleton).
/// A child that fails reports its exception's message, rethrown here as `Error`.
Result run_isolated(const std::function<Result()>& fn);

/// One transfer of `bytes` from rank `src` to rank `dst` on an idle cluster: SimGrid's time.
double simulate_transfer(const Cluster& c, int src, int dst, std::int64_t bytes, const Options& o);

}  // namespace fusedcoll::sim
