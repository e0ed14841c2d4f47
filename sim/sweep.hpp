#pragma once
/// @file
/// "Where fusion pays" (docs/simulation.md, "Where fusion pays"): `fusedcoll-sim sweep` maps the
/// reduction fusion gives the DLRM iteration (MLPerf DLRM-DCNv2), tensor-parallel decode
/// (GemvAllReduce) and an MoE layer (GemmAllToAll) over two axes at a time around a default
/// point: nodes, inter-node bandwidth, samples (tokens) per device, embedding dim and pooling,
/// devices per node. Internal to fusedcoll-sim and its tests.

#include <cstdint>
#include <string>
#include <vector>

#include "fusedcoll/model.hpp"
#include "sim/sim.hpp"

namespace fusedcoll::sim {

/// One configuration of one map.
struct SweepPoint {
  std::string workload;  ///< dlrm, gemv or moe
  std::string map;       ///< the map's name, "<y>-<x>"
  std::string x_name, y_name;
  double x = 0, y = 0;
  int nodes = 128;
  int gpus_per_node = 8;
  double nic_gbit = 100;  ///< each device's NIC share across nodes, Gbit/s
  /// dlrm: samples per device; gemv: the batch's rows (tokens decoded at once); moe: tokens each
  /// device routes.
  std::int64_t samples = 64;
  /// dlrm: the embedding dim (and the bottom MLP's output); gemv: the output width n (hidden);
  /// moe: the experts' output width n (hidden).
  std::int64_t dim = 128;
  /// dlrm: MLPerf's multi-hot sizes times this (at least 1 each); 0: one-hot.
  double pooling = 1;
};

/// What one point measured, seconds.
struct SweepResult {
  double base = 0, fused = 0;
  /// The baseline's kernel that fusion overlaps (the DLRM: the busiest rank's embedding forward;
  /// the operators: rank 0's GEMV or expert GEMM, the ranks being alike) and the exchange after
  /// it, its unpack included: fusion can hide at most min(kernel, exchange) of the baseline by
  /// overlap.
  double kernel = 0, exchange = 0;
  double cpu = 0;  ///< simulation CPU seconds, both variants
};

/// How finely the maps are cut: quick (2 x 2 each, every default point on 8 nodes: a test),
/// coarse (3 x 3, the default), fine (up to 7 x 7).
enum class Grid : std::uint8_t { quick, coarse, fine };

/// The maps' points. `workloads`: a comma-separated list of dlrm, gemv, moe, or "all". Throws
/// InvalidArgument for an unknown workload.
std::vector<SweepPoint> sweep_points(const std::string& workloads, Grid grid);

/// Throws InvalidArgument if the point cannot be simulated (its cluster, its sharding or its
/// problem), without simulating it: the sweep checks every point before the first runs.
void check_point(const SweepPoint& p, const model::Preset& preset);

/// Simulates one point, baseline and fused (the DLRM's forward embedding + All-to-All fused;
/// the operators' scale_out mode), on `preset` with the point's devices per node and NIC
/// bandwidth. Each variant runs in a forked simulation (run_isolated); the fused one merges
/// sends to one node within max(o.merge_window, the baseline's exchange / 500).
SweepResult run_point(const SweepPoint& p, const model::Preset& preset, const Options& o);

/// The CSV header and one row.
std::string sweep_csv_header();
std::string sweep_csv_row(const SweepPoint& p, const SweepResult& r, const std::string& preset);

}  // namespace fusedcoll::sim
