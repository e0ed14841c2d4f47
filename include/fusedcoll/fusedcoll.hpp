#pragma once
/// @file
/// Umbrella header: the whole public API of fusedcoll.

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/communicator.hpp"
#include "fusedcoll/compression.hpp"
#include "fusedcoll/dtype.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/gemv_allreduce.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/kernel.hpp"
#include "fusedcoll/kernel_launch.hpp"
#include "fusedcoll/ref.hpp"
#include "fusedcoll/tensor.hpp"
#include "fusedcoll/version.hpp"
