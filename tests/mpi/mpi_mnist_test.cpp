// The MNIST example's per-rank training loop on the MPI backend, uncompressed and with FP8
// gradients: one epoch on generated digits with every rank in its own process must learn, and
// must end with parameters bit-identical to the same training on the emulator (same seed and
// worker count): the per-rank code sees only a Communicator, and both backends reproduce ref/'s
// AllReduce bits, compressed or not.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/mnist_fixtures.hpp"
#include "mnist/trainer.hpp"
#include "fusedcoll/emu.hpp"
#include "tests/mpi/mpi_world.hpp"

namespace {

namespace mn = fusedcoll::mnist;

/// One epoch on generated digits on MPI, then the same on the emulator: both must learn and end
/// with bit-identical parameters.
void expect_learns_like_the_emulator(const mn::ExchangeOptions& exchange) {
  const mn::Dataset train = fctest::synthetic(2048, 1);  // 16 steps of 64 per worker
  const mn::Dataset test = fctest::synthetic(200, 2);
  mn::TrainOptions o;
  o.epochs = 1;
  o.lr = 0.05;
  o.test_batch_size = 100;
  o.progress = false;
  o.exchange = exchange;
  auto& comm = fctest::world();
  const mn::TrainResult on_mpi = mn::train_rank(comm, train, test, o, nullptr);
  ASSERT_EQ(on_mpi.epochs.size(), 1u);
  EXPECT_LT(on_mpi.epochs[0].test_loss, 0.5 * std::log(10.0)) << "rank " << comm.rank();

  o.workers = comm.size();
  const mn::TrainResult on_emu = mn::train(train, test, o, nullptr);
  ASSERT_EQ(on_mpi.final_parameters.size(), on_emu.final_parameters.size());
  EXPECT_EQ(std::memcmp(on_mpi.final_parameters.data(), on_emu.final_parameters.data(),
                        on_mpi.final_parameters.size() * sizeof(float)),
            0)
      << "rank " << comm.rank() << ": MPI and emulator training diverged";
  EXPECT_EQ(on_mpi.epochs[0].test_accuracy, on_emu.epochs[0].test_accuracy);
}

TEST(MpiMnist, OneEpochLearnsAndMatchesTheEmulatorBitForBit) {
  expect_learns_like_the_emulator({});
}

// The lab's compressed gradients on MPI: FP8 with the agreed per-tensor scale and error feedback.
TEST(MpiMnist, Fp8GradientsWithErrorFeedbackMatchTheEmulatorBitForBit) {
  expect_learns_like_the_emulator({.compression = mn::GradCompression::fp8_e4m3,
                                   .algo = fusedcoll::AllReduceAlgo::ring,
                                   .error_feedback = true});
}

}  // namespace
