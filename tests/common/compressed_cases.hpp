#pragma once
// The compressed-wire collective cases every backend's suite runs (emu, MPI): every wire format,
// per-tensor and per-block scaling, pow2 scales, predivided avg, in place, uneven counts with
// zeros. Built on collective_cases.hpp; inputs are random f32 of mixed magnitudes.

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "collective_cases.hpp"

namespace fctest::collectives {

/// The wire options every compressed collective is run with.
inline std::vector<CompressionOptions> wires() {
  using fusedcoll::Scaling;
  using fusedcoll::WireFormat;
  return {
      {.format = WireFormat::f16},
      {.format = WireFormat::bf16, .overflow = fusedcoll::Overflow::ieee},
      {.format = WireFormat::fp8_e4m3},
      {.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block, .block = 100},
      {.format = WireFormat::fp8_e5m2, .scaling = Scaling::per_block, .block = 256,
       .pow2_scale = true},
      {.format = WireFormat::fp8_e5m2, .scaling = Scaling::none},
  };
}

/// The compressed AllReduce grid of one wire option for the algorithms `algos`: empty, one,
/// odd and larger counts, sum / avg / max, predivided avg, in place at count 7.
inline void add_compressed_all_reduce(Cases& cases, int P, std::uint64_t& seed,
                                      const CompressionOptions& w0,
                                      std::initializer_list<AllReduceAlgo> algos) {
  for (std::int64_t count : {0, 1, 7, 1000})
    for (AllReduceAlgo algo : algos)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
        for (bool predivide : {false, true}) {
          if (predivide && op != ReduceOp::avg) continue;
          CompressionOptions w = w0;
          w.predivide = predivide;
          add_all_reduce(cases, P, count, DType::f32, op, algo, count == 7, ++seed, w);
        }
}

/// Every compressed collective of a world of `P` ranks, with every wire option (AllReduce
/// `direct` and `ring`; `chain` is add_compressed_chain's, so that a backend runs it once it has
/// it).
inline void add_compressed(Cases& cases, int P, std::uint64_t seed) {
  for (const CompressionOptions& w0 : wires()) {
    add_compressed_all_reduce(cases, P, seed, w0, {AllReduceAlgo::direct, AllReduceAlgo::ring});
    for (int kind : {0, 1, 2}) {
      ++seed;
      add_reduce_scatter(cases, uneven(P, kind, 300, seed), DType::f32, ReduceOp::sum, kind == 2,
                         seed, w0);
      add_reduce_scatter(cases, uneven(P, kind, 300, seed), DType::f32, ReduceOp::avg, false, seed,
                         w0);
      add_all_gather(cases, uneven(P, kind, 300, seed), DType::f32, kind == 1, seed, w0);
    }
    add_all_to_allv(cases, P, DType::f32, 1, ++seed, w0);
    add_all_to_allv(cases, P, DType::f32, 30, ++seed, w0);
  }
}

/// Larger calls: several fold pieces / tiles per chunk, uneven counts, a window that must grow.
inline void add_compressed_large(Cases& cases, int P, std::uint64_t seed) {
  using fusedcoll::Scaling;
  using fusedcoll::WireFormat;
  const std::int64_t count = 2 * 16384 * P + 5;
  const CompressionOptions w{.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block,
                             .block = 1000, .pow2_scale = true};
  for (AllReduceAlgo algo : {AllReduceAlgo::direct, AllReduceAlgo::ring}) {
    add_all_reduce(cases, P, count, DType::f32, ReduceOp::sum, algo, algo == AllReduceAlgo::ring,
                   ++seed, w);
    add_all_reduce(cases, P, count, DType::f32, ReduceOp::avg, algo, false, ++seed,
                   {.format = WireFormat::f16});
  }
  seed += 1;
  add_reduce_scatter(cases, uneven(P, 2, 40000, seed), DType::f32, ReduceOp::sum, true, seed, w);
  seed += 1;
  add_all_gather(cases, uneven(P, 2, 40000, seed), DType::f32, false, seed,
                 {.format = WireFormat::bf16});
  add_all_to_allv(cases, P, DType::f32, 1000, ++seed, w);
}

/// AllReduce `chain` with a compressed wire: the grid of add_compressed with every wire option,
/// and calls of several tiles (pipeline pieces) per rank with uneven counts, sum in place with
/// per-block fp8 scales and avg in f16.
inline void add_compressed_chain(Cases& cases, int P, std::uint64_t seed) {
  using fusedcoll::Scaling;
  using fusedcoll::WireFormat;
  for (const CompressionOptions& w0 : wires())
    add_compressed_all_reduce(cases, P, seed, w0, {AllReduceAlgo::chain});
  const std::int64_t count = 2 * 16384 * P + 5;
  add_all_reduce(cases, P, count, DType::f32, ReduceOp::sum, AllReduceAlgo::chain, true, ++seed,
                 {.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block, .block = 1000,
                  .pow2_scale = true});
  add_all_reduce(cases, P, count, DType::f32, ReduceOp::avg, AllReduceAlgo::chain, false, ++seed,
                 {.format = WireFormat::f16});
}

}  // namespace fctest::collectives
