#pragma once
// The GPU backend's operators, each over all P virtual ranks of one GPU at once (the
// single-GPU multi-rank mode): validate every rank's call and their agreement, upload, run the
// kernels of `mode` as ONE launch per kernel whose grid holds every rank's blocks
// (blockIdx.y = rank), download. The kernels live in the op's .cpp file; the arithmetic helpers
// every kernel shares are below.

#include <cstdint>
#include <span>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/detail/validate.hpp"
#include "gpu/runtime.hpp"

namespace fusedcoll::gpu::ops {

void embedding_alltoall(Context& ctx, std::span<const EmbeddingAllToAllArgs> all, Mode mode);
void gemv_allreduce(Context& ctx, std::span<const GemvAllReduceArgs> all, Mode mode);
void gemm_alltoall(Context& ctx, std::span<const GemmAllToAllArgs> all, Mode mode);

/// Validates every rank's call and every pair's agreement, as ref/ does, before anything moves.
template <class Args>
void check_world(std::span<const Args> all, int world_size) {
  FC_ENFORCE_EQ(static_cast<int>(all.size()), world_size, "one call per rank of the world");
  for (int r = 0; r < world_size; ++r) check(all[r], r, world_size);
  detail::check_all_agree(world_size, [&](int r) -> const Args& { return all[r]; });
}

/// Process mode's fields of the All-to-All operators' kernel parameters (EmbParams, GemmParams;
/// docs/gpu.md, "Process mode"), which derive from it.
struct ProcessFields {
  int me;    // this process's rank; -1 in the single mode, where a block's rank is blockIdx.y
  int heap;  // the symmetric heap's id (a put record's buffer)
  std::uint64_t out_off, recv_off;  // byte offsets of out and recv in every rank's heap
  int unpack_self;  // process mode's unfused exchange: this rank's own rows come from `stage`
};

/// The fields of a call on `ctx` whose recv sits at `recv_off` (carve_heap; out at 0), read after
/// the heap was reserved for the call.
inline ProcessFields process_fields(const Context& ctx, std::uint64_t recv_off) {
  return ProcessFields{ctx.me(), ctx.heap_id(), 0, recv_off, 0};
}

#if defined(FC_GPU_HIP) || defined(FC_GPU_CUDA)
/// The rank a block works for: this process's in process mode, else blockIdx.y.
__device__ inline int rank_of(const ProcessFields& p) {
  return p.me >= 0 ? p.me : static_cast<int>(blockIdx.y);
}
#endif

/// Process mode's unfused exchange of the All-to-All operators (docs/gpu.md, "Process mode"):
/// `p` for their scale_out kernel run over no tiles, with its own work-queue counters, so that it
/// only puts every slice of the stage to its destination and copies each into place, this rank's
/// own from the stage.
template <class Params>
Params push_exchange(const Params& p, Arena& arena, int P) {
  Params push = p;
  push.tile_begin = arena.upload(std::vector<std::int64_t>(static_cast<std::size_t>(P) + 1, 0));
  push.claims = arena.alloc_zeroed<unsigned long long>(P);
  push.unpack_self = 1;
  return push;
}

#if defined(FC_GPU_HIP) || defined(FC_GPU_CUDA)
/// The tile kernels' NaN rule (docs/semantics.md, "NaN results"): any NaN is stored as 0x7FC00000.
__device__ inline float canonical_nan(float x) { return x != x ? __int_as_float(0x7FC00000) : x; }

/// One step of a cross-rank f32 sum in ref/'s reduce_into: the first NaN wins, quietened.
__device__ inline float reduce_sum(float acc, float v) {
  if (acc != acc) return __int_as_float(__float_as_int(acc) | 0x00400000);
  if (v != v) return __int_as_float(__float_as_int(v) | 0x00400000);
  return port::add(acc, v);
}
#endif

}  // namespace fusedcoll::gpu::ops
