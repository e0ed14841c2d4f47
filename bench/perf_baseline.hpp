#pragma once
// The baseline of `fusedcoll-perf --backend gpu` (perf_gpu.cpp) as a plan of whole-block copies
// and folds over the ranks' buffers: perf_gpu.cpp runs it on the device (copy engines, a fold
// kernel), and run_on_host runs the same plan on the CPU, so that its layout and reduction order
// are checked against ref/ on every machine (tests/perf_baseline_test.cpp), GPU or not.

#include <cstdint>
#include <vector>

#include "gpu/collective_exec.hpp"
#include "perf_common.hpp"

namespace perf {

/// recv[dst_rank][dst_off ..] = send[src_rank][src_off ..], `count` floats.
struct BaselineCopy {
  int dst_rank = 0;
  std::int64_t dst_off = 0;
  int src_rank = 0;
  std::int64_t src_off = 0;
  std::int64_t count = 0;
};

/// For i < n: recv[d][i] = send[0][src_off + i] op ... op send[P - 1][src_off + i] (rank order,
/// ref/'s arithmetic: AllReduce `direct`'s order), for every rank d in [dst_first, dst_first +
/// dst_count).
struct BaselineFold {
  std::int64_t src_off = 0;
  std::int64_t n = 0;
  int dst_first = 0;
  int dst_count = 0;
};

struct Baseline {
  std::vector<BaselineCopy> copies;
  std::vector<BaselineFold> folds;
};

/// The baseline of `o.op` over the layout of `c` (P ranks).
inline Baseline baseline_plan(const Options& o, const CollectiveCase& c, int P) {
  Baseline b;
  if (o.op == "allreduce") {
    b.folds.push_back({0, c.count, 0, P});
  } else if (o.op == "reducescatter") {
    std::int64_t off = 0;
    for (int q = 0; q < P; ++q) {
      b.folds.push_back({off, c.pieces[q], q, 1});
      off += c.pieces[q];
    }
  } else if (o.op == "alltoall") {
    for (int p = 0; p < P; ++p)
      for (int q = 0; q < P; ++q)
        b.copies.push_back({q, p * c.per_peer, p, q * c.per_peer, c.per_peer});
  } else if (o.op == "allgather") {
    std::int64_t off = 0;
    for (int p = 0; p < P; ++p) {
      for (int q = 0; q < P; ++q) b.copies.push_back({q, off, p, 0, c.pieces[p]});
      off += c.pieces[p];
    }
  } else {  // broadcast: the root's recv too, as fusedcoll's
    for (int q = 0; q < P; ++q) b.copies.push_back({q, 0, o.root, 0, c.count});
  }
  return b;
}

/// One element of a fold, as the device computes it.
FC_HD inline float fold_element(const float* const* send, std::int64_t at, int P, int op) {
  namespace ex = fusedcoll::gpu::coll::exec;
  float acc = send[0][at];
  for (int p = 1; p < P; ++p) acc = ex::combine<float>(op, acc, send[p][at]);
  if (op == ex::kAvg) acc = ex::average<float>(acc, P);
  return acc;
}

/// The plan on the host buffers of `c`, element by element as the device runs it.
inline void run_on_host(const Baseline& b, const Options& o, CollectiveCase& c) {
  const int P = static_cast<int>(c.send.size());
  std::vector<const float*> send;
  for (const auto& v : c.send) send.push_back(v.data());
  for (const BaselineCopy& k : b.copies)
    for (std::int64_t i = 0; i < k.count; ++i)
      c.recv[k.dst_rank][k.dst_off + i] = c.send[k.src_rank][k.src_off + i];
  for (const BaselineFold& f : b.folds)
    for (std::int64_t i = 0; i < f.n; ++i) {
      const float v = fold_element(send.data(), f.src_off + i, P, static_cast<int>(o.redop));
      for (int d = f.dst_first; d < f.dst_first + f.dst_count; ++d) c.recv[d][i] = v;
    }
}

}  // namespace perf
