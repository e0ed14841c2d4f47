// A fusedcoll program for fusedcoll-run's own test (ctest launcher_run_np2): every rank checks
// that the knobs fusedcoll-run was given reached it (as fusedcoll read them) and that an AllReduce
// over the job gives the exact sum; rank 0 then prints one line. Any difference throws, and
// mpi::run ends the job with the rank's message.
//
//   fusedcoll-run -np P --timeout T --transport X launcher_probe P T X

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/mpi.hpp"

namespace fc = fusedcoll;

namespace {

const char* transport_name(fc::Env::MpiTransport t) {
  switch (t) {
    case fc::Env::MpiTransport::rma:
      return "rma";
    case fc::Env::MpiTransport::p2p:
      return "p2p";
    case fc::Env::MpiTransport::automatic:
      break;
  }
  return "auto";
}

}  // namespace

int main(int argc, char** argv) {
  return fc::mpi::run(argc, argv, [&](fc::Communicator& comm) {
    if (argc != 4) throw std::invalid_argument("usage: launcher_probe RANKS TIMEOUT TRANSPORT");
    const int ranks = std::stoi(argv[1]);
    const double timeout = std::stod(argv[2]);
    const std::string transport = argv[3];
    const fc::Env& env = fc::env();
    if (comm.size() != ranks || env.timeout_s != timeout ||
        transport != transport_name(env.mpi_transport)) {
      throw std::runtime_error("rank " + std::to_string(comm.rank()) + " sees " +
                               std::to_string(comm.size()) + " ranks, FUSEDCOLL_TIMEOUT " +
                               std::to_string(env.timeout_s) + ", FUSEDCOLL_MPI_TRANSPORT " +
                               transport_name(env.mpi_transport) + "; expected " + argv[1] + ", " +
                               argv[2] + ", " + transport);
    }
    const std::int64_t count = 1000;
    std::vector<float> send(count, static_cast<float>(comm.rank() + 1)), recv(count);
    fc::all_reduce(comm, {send.data(), recv.data(), count, fc::DType::f32, fc::ReduceOp::sum,
                          fc::AllReduceAlgo::direct});
    const float sum = static_cast<float>(ranks * (ranks + 1) / 2);
    for (std::int64_t i = 0; i < count; ++i) {
      if (recv[i] != sum) {
        throw std::runtime_error("rank " + std::to_string(comm.rank()) + ": AllReduce element " +
                                 std::to_string(i) + " is " + std::to_string(recv[i]) +
                                 ", expected " + std::to_string(sum));
      }
    }
    if (comm.rank() == 0) {
      std::printf(
          "launcher_probe: %d ranks, FUSEDCOLL_TIMEOUT %g, FUSEDCOLL_MPI_TRANSPORT %s, "
          "AllReduce exact\n",
          ranks, timeout, transport.c_str());
    }
  });
}
