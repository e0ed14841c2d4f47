// Fault injection for the MPI backend, run by CTest under mpiexec (tests/mpi/CMakeLists.txt checks
// the output). Every program goes through fusedcoll::mpi::run, the opt-in handler that prints the
// failing rank's message and aborts the whole job.
//
//   mpi_faults throw     rank 1 throws before a collective call: the job ends with its message.
//   mpi_faults missing   rank 1 never makes the call: the others' waits expire after
//                        FUSEDCOLL_TIMEOUT and end the job with a TimeoutError.
//   mpi_faults mismatch  rank 1 disagrees on N: every rank rejects the call before any data moves
//                        and says so; the job then ends normally.
//   mpi_faults loop DIR  every rank runs 1 MiB AllReduces for up to 60 s, for a fault injected
//                        from outside (scripts/netns-cluster --at: a host's link drops, a rank is
//                        killed); a rank whose call fails writes its message to DIR/rank.R too
//                        (a host cut off cannot forward its output to mpiexec), then aborts.
//   mpi_faults stall     white-box: rank 0 waits on a signal slot that rank 1 never signals; the
//                        TimeoutError names the rank, the slot and the expected and current value.

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fusedcoll/env.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/mpi.hpp"
#include "mpi/runtime.hpp"

namespace fc = fusedcoll;

namespace {

void all_reduce_once(fc::Communicator& comm) {
  std::vector<float> send(1000, 1.0f), recv(1000);
  fc::all_reduce(comm, {send.data(), recv.data(), 1000, fc::DType::f32, fc::ReduceOp::sum,
                        fc::AllReduceAlgo::direct});
}

void mismatch(fc::Communicator& comm) {
  fc::GemvProblem pb;
  pb.world_size = comm.size();
  pb.m = 2;
  pb.n = 64;
  pb.k_splits.assign(static_cast<std::size_t>(comm.size()), 8);
  pb.seed = 1;
  fc::GemvRankData mine(pb, comm.rank());
  auto args = mine.args();
  if (comm.rank() == 1) {
    args.n = 65;
    mine.y.assign(2 * 65, 0.0f);
    mine.w.resize(65 * 8);
    args.y = fc::TensorView(mine.y.data(), fc::DType::f32, {2, 65});
    args.w = fc::ConstTensorView(mine.w.data(), fc::DType::f32, {65, 8});
  }
  const std::vector<float> before = mine.y;
  int rejected = 0;
  try {
    fc::gemv_allreduce(comm, args, fc::Mode::scale_out);
  } catch (const fc::InvalidArgument& e) {
    rejected = std::memcmp(before.data(), mine.y.data(), before.size() * sizeof(float)) == 0;
    std::printf("rank %d rejected the call%s: %s\n", comm.rank(),
                rejected ? " with its output untouched" : " BUT WROTE ITS OUTPUT", e.what());
    std::fflush(stdout);
  }
  int total = 0;
  MPI_Allreduce(&rejected, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (comm.rank() == 0) std::printf("rejected on %d of %d ranks\n", total, comm.size());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  return fc::mpi::run(argc, argv, [&](fc::Communicator& comm) {
    if (what == "throw") {
      if (comm.rank() == 1) throw std::runtime_error("injected failure on rank 1");
      all_reduce_once(comm);
    } else if (what == "missing") {
      if (comm.rank() == 1) {
        // Stays alive, inside MPI, without ever making the call the others wait in.
        std::this_thread::sleep_for(std::chrono::seconds(20));
        return;
      }
      all_reduce_once(comm);
    } else if (what == "loop") {
      const std::string dir = argc > 2 ? argv[2] : ".";
      std::vector<float> send(1 << 18, 1.0f), recv(1 << 18);
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      try {
        while (std::chrono::steady_clock::now() < end)
          fc::all_reduce(comm, {send.data(), recv.data(), 1 << 18, fc::DType::f32,
                                fc::ReduceOp::sum, fc::AllReduceAlgo::direct});
      } catch (const std::exception& e) {
        std::ofstream(dir + "/rank." + std::to_string(comm.rank()))
            << "rank " << comm.rank() << ": " << e.what() << "\n";
        // The first rank to rethrow aborts the job, which kills its peers on the same host. All
        // ranks stalled within milliseconds of each other, so waiting one FUSEDCOLL_TIMEOUT
        // (plus a margin) lets every one of them report its own timeout before that happens.
        std::this_thread::sleep_for(std::chrono::duration<double>(fc::env().timeout_s + 1.0));
        throw;
      }
    } else if (what == "mismatch") {
      mismatch(comm);
    } else if (what == "stall") {
      fc::mpi::Runtime rt(MPI_COMM_WORLD, {});
      const int slot = rt.slots("test.never", comm.size());
      rt.set_activity("in the stall test");
      // Rank 1 signals slot[1] once on rank 0; rank 0 waits for two signals.
      if (comm.rank() == 1) rt.signal(0, slot + 1);
      if (comm.rank() == 0) rt.wait(slot + 1, rt.expect(slot + 1, 2), "test.never[1]");
      // The others stay inside MPI, where a peer of a stalled rank would be, until the abort.
      MPI_Barrier(MPI_COMM_WORLD);
    } else {
      throw std::invalid_argument("usage: mpi_faults throw|missing|mismatch|stall|loop DIR");
    }
  });
}
