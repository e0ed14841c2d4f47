#pragma once
// The oracle of the compressed collectives (ref/compressed.cpp), called by ref/'s collectives
// when `wire.format != WireFormat::none`, after the world's calls were validated.

#include <span>

#include "fusedcoll/collectives.hpp"

namespace fusedcoll::ref::compressed {

void all_reduce(std::span<const AllReduceArgs> ranks);
void reduce_scatter(std::span<const ReduceScatterArgs> ranks);
void all_gather(std::span<const AllGatherArgs> ranks);
void all_to_allv(std::span<const AllToAllvArgs> ranks);

}  // namespace fusedcoll::ref::compressed
