#pragma once
/// @file
/// ref/: the sequential, readable, bit-exact oracle. Each function takes the calls of all P ranks
/// of one world (index = rank), validates every call and their agreement, and computes every
/// rank's output in one thread. Every other backend is judged against these results with
/// `memcmp`.
///
/// Inputs are copied before any output is written, so any aliasing between ranks' buffers, or an
/// allowed in-place call, gives the defined result.

#include <span>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/gemv_allreduce.hpp"

namespace fusedcoll::ref {

/// Computes EmbeddingAllToAll for the world `ranks` (ranks.size() == P).
void embedding_alltoall(std::span<const EmbeddingAllToAllArgs> ranks);

/// Computes GemvAllReduce for the world `ranks`.
void gemv_allreduce(std::span<const GemvAllReduceArgs> ranks);

/// Computes GemmAllToAll for the world `ranks`.
void gemm_alltoall(std::span<const GemmAllToAllArgs> ranks);

/// The collectives, for the world `ranks`.
void all_reduce(std::span<const AllReduceArgs> ranks);
void all_to_allv(std::span<const AllToAllvArgs> ranks);
void reduce_scatter(std::span<const ReduceScatterArgs> ranks);
void all_gather(std::span<const AllGatherArgs> ranks);
void broadcast(std::span<const BroadcastArgs> ranks);

}  // namespace fusedcoll::ref
