#pragma once
// Shared by the MPI test binaries: every rank runs the same tests in the same order, each test
// making the same collective calls on every rank.

#include "fusedcoll/mpi.hpp"

namespace fctest {

/// The communicator over MPI_COMM_WORLD that every test uses (created in mpi_main.cpp).
fusedcoll::Communicator& world();

}  // namespace fctest
