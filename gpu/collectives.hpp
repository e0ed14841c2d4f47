#pragma once
// The GPU backend's collectives over all P virtual ranks of one GPU at once (the single-GPU
// multi-rank mode, as gpu/ops.hpp's operators): validate every rank's call and their agreement,
// upload, agree on the wire scales (compressed calls), run the plan's one persistent kernel,
// download into exactly the receive regions. Plans: gpu/collective_plan.hpp; kernels:
// gpu/collectives.cpp.

#include <span>

#include "fusedcoll/collectives.hpp"
#include "gpu/runtime.hpp"

namespace fusedcoll::gpu::coll {

void all_reduce(Context& ctx, std::span<const AllReduceArgs> all);
void reduce_scatter(Context& ctx, std::span<const ReduceScatterArgs> all);
void all_gather(Context& ctx, std::span<const AllGatherArgs> all);
void all_to_allv(Context& ctx, std::span<const AllToAllvArgs> all);
void broadcast(Context& ctx, std::span<const BroadcastArgs> all);

}  // namespace fusedcoll::gpu::coll
