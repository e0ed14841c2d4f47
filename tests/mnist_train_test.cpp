// The data-parallel trainer of the MNIST example on the emulator: the gradient exchange, the
// byte accounting, the compression flag, determinism, and an end-to-end run on a small generated
// IDX data set (label `mnist`; the real-data run is the documented command in docs/mnist.md).

#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "common/mnist_fixtures.hpp"
#include "mnist/idx.hpp"
#include "mnist/layers.hpp"
#include "mnist/trainer.hpp"
#include "fusedcoll/emu.hpp"

namespace fs = std::filesystem;
namespace fc = fusedcoll;
namespace mn = fusedcoll::mnist;

namespace {

using fctest::synthetic;
using fctest::TempDir;

}  // namespace

TEST(MnistShard, RanksCoverTheEpochOnce) {
  for (const int p : {1, 2, 3, 4, 7}) {
    for (const std::int64_t n : {7, 28, 1000}) {
      if (n < p) continue;
      std::vector<int> seen(static_cast<std::size_t>(n), 0);
      for (int r = 0; r < p; ++r) {
        const auto s = mn::epoch_shard(n, r, p, 42, 0);
        ASSERT_EQ(static_cast<std::int64_t>(s.size()), (n + p - 1) / p) << "P " << p << " n " << n;
        for (const auto i : s) {
          ASSERT_TRUE(i >= 0 && i < n) << i;
          ++seen[static_cast<std::size_t>(i)];
        }
      }
      // Every index once, plus the wrap-around padding (the first indices of the permutation).
      std::int64_t extra = 0;
      for (const int c : seen) {
        EXPECT_GE(c, 1);
        extra += c - 1;
      }
      EXPECT_EQ(extra, (n + p - 1) / p * p - n) << "P " << p << " n " << n;
    }
  }
  EXPECT_EQ(mn::epoch_shard(1000, 1, 4, 42, 3), mn::epoch_shard(1000, 1, 4, 42, 3));
  EXPECT_NE(mn::epoch_shard(1000, 1, 4, 42, 3), mn::epoch_shard(1000, 1, 4, 42, 4));  // reshuffled
  EXPECT_NE(mn::epoch_shard(1000, 1, 4, 42, 3), mn::epoch_shard(1000, 1, 4, 43, 3));
}

TEST(MnistExchange, AveragesOverRanks) {
  for (const int p : {1, 2, 3, 4}) {
    for (const auto algo : {fc::AllReduceAlgo::direct, fc::AllReduceAlgo::ring}) {
      fc::emu::World world({.world_size = p, .device = {.compute_units = 1}});
      std::vector<std::vector<float>> got(static_cast<std::size_t>(p));
      world.run([&](fc::Communicator& comm) {
        // Values encode (rank, index); a count not divisible by P exercises uneven chunks.
        std::vector<float> g(21841);
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = static_cast<float>(comm.rank() * 4 + (i % 7));
        mn::exchange_gradients(comm, g, {.compression = mn::GradCompression::none, .algo = algo});
        got[static_cast<std::size_t>(comm.rank())] = g;
      });
      for (int r = 0; r < p; ++r)
        for (std::size_t i = 0; i < got[0].size(); ++i) {
          // mean of 4r + (i % 7) over r = 2 (P - 1) + (i % 7): exact in f32 for these small values
          const float expect = static_cast<float>(2 * (p - 1) + static_cast<int>(i % 7));
          ASSERT_EQ(got[static_cast<std::size_t>(r)][i], expect)
              << "P " << p << " rank " << r << " index " << i;
        }
    }
  }
}

TEST(MnistExchange, BytesPerStep) {
  using mn::exchange_bytes_per_step;
  const mn::ExchangeOptions direct{};
  const mn::ExchangeOptions ring{.algo = fc::AllReduceAlgo::ring};
  EXPECT_EQ(exchange_bytes_per_step(21840, 1, direct), 0);
  EXPECT_EQ(exchange_bytes_per_step(21840, 2, direct), 2 * 10920 * 4);
  EXPECT_EQ(exchange_bytes_per_step(21840, 4, direct), (16380 + 3 * 5460) * 4);
  EXPECT_EQ(exchange_bytes_per_step(21840, 4, ring), (16380 + 16380) * 4);
  // Chunks 3, 3, 2, 2: direct sends 7 + 3*3 elements from rank 0, ring 7 + (10 - 3).
  EXPECT_EQ(exchange_bytes_per_step(10, 4, direct), 16 * 4);
  EXPECT_EQ(exchange_bytes_per_step(10, 4, ring), 14 * 4);
  EXPECT_EQ(exchange_bytes_per_step(10, 4, {.compression = mn::GradCompression::fp16}), 16 * 2);
  // Chain: rank 0 sends each element's running value once, whatever P (> 1).
  const mn::ExchangeOptions chain{.algo = fc::AllReduceAlgo::chain};
  EXPECT_EQ(exchange_bytes_per_step(10, 1, chain), 0);
  EXPECT_EQ(exchange_bytes_per_step(10, 4, chain), 10 * 4);
  EXPECT_EQ(exchange_bytes_per_step(21840, 2, chain), 21840 * 4);
  EXPECT_EQ(exchange_bytes_per_step(21840, 4,
                                    {.compression = mn::GradCompression::fp8_e4m3,
                                     .algo = fc::AllReduceAlgo::chain}),
            21840);
}

TEST(MnistExchange, CompressionFlag) {
  EXPECT_EQ(mn::parse_compression("none"), mn::GradCompression::none);
  for (const auto c : {mn::GradCompression::fp16, mn::GradCompression::bf16,
                       mn::GradCompression::fp8_e4m3, mn::GradCompression::fp8_e5m2}) {
    EXPECT_EQ(mn::parse_compression(mn::to_string(c)), c);
    EXPECT_NO_THROW(mn::check_exchange({.compression = c}));
  }
  EXPECT_INVALID(mn::parse_compression("fp8"), "'fp8'", "fp8-e4m3");
  EXPECT_NO_THROW(mn::check_exchange({}));
}

// Compressed exchanges average what the wire delivers: values exact in f16 and (after the
// agreed power-of-two-free scale) close in FP8; every rank gets the same bits.
TEST(MnistExchange, CompressedAveragesAgreeAcrossRanksAndStayClose) {
  for (const auto c : {mn::GradCompression::fp16, mn::GradCompression::bf16,
                       mn::GradCompression::fp8_e4m3, mn::GradCompression::fp8_e5m2}) {
    const int p = 3;
    fc::emu::World world({.world_size = p, .device = {.compute_units = 1}});
    std::vector<std::vector<float>> got(p);
    world.run([&](fc::Communicator& comm) {
      std::vector<float> g(1000);
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = static_cast<float>(comm.rank() * 4 + static_cast<int>(i % 7));
      mn::exchange_gradients(comm, g, {.compression = c});
      got[comm.rank()] = g;
    });
    // Relative error: three roundings (each contribution, then the reduced chunk) of 2^-11
    // (f16), 2^-8 (bf16), 2^-4 (E4M3) or 2^-3 (E5M2) each, with margin.
    const double rel = c == mn::GradCompression::fp16   ? 2e-3
                       : c == mn::GradCompression::bf16 ? 2e-2
                       : c == mn::GradCompression::fp8_e4m3 ? 0.2
                                                            : 0.4;
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(std::memcmp(got[r].data(), got[0].data(), got[0].size() * 4), 0) << mn::to_string(c);
      for (std::size_t i = 0; i < got[r].size(); ++i) {
        const double expect = 2.0 * (p - 1) + static_cast<double>(i % 7);
        ASSERT_NEAR(got[r][i], expect, rel * expect)
            << mn::to_string(c) << " rank " << r << " index " << i;
      }
    }
  }
}

// Error feedback: with a constant gradient, what the FP8 wire delivers is biased by the same
// rounding every step; feeding each rank's loss back dithers its contribution so the running mean
// moves toward the true mean (measured: worst relative error 16.7% -> 5.8% for E5M2; what remains
// is the rounding of the reduced value, which error feedback on contributions does not see).
TEST(MnistExchange, ErrorFeedbackRemovesTheRoundingBias) {
  const int p = 2, steps = 64;
  const mn::ExchangeOptions plain{.compression = mn::GradCompression::fp8_e5m2};
  mn::ExchangeOptions fed = plain;
  fed.error_feedback = true;
  double err_plain = 0, err_fed = 0;
  for (const bool with : {false, true}) {
    fc::emu::World world({.world_size = p, .device = {.compute_units = 1}});
    std::vector<double> sum(100, 0.0);
    std::vector<float> truth(100);
    world.run([&](fc::Communicator& comm) {
      fc::ErrorFeedback state;
      for (int s = 0; s < steps; ++s) {
        std::vector<float> g(100);
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = 0.01f * static_cast<float>(i + 1) + 0.003f * static_cast<float>(comm.rank());
        if (comm.rank() == 0 && s == 0)
          for (std::size_t i = 0; i < g.size(); ++i) truth[i] = 0.01f * static_cast<float>(i + 1) + 0.0015f;
        mn::exchange_gradients(comm, g, with ? fed : plain, &state);
        if (comm.rank() == 0)
          for (std::size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
      }
    });
    double worst = 0;
    for (std::size_t i = 0; i < sum.size(); ++i)
      worst = std::max(worst, std::abs(sum[i] / steps - truth[i]) / truth[i]);
    (with ? err_fed : err_plain) = worst;
  }
  EXPECT_GT(err_plain, 0.01) << "E5M2 rounding should bias the plain exchange";
  EXPECT_LT(err_fed, 0.5 * err_plain) << "plain " << err_plain << ", with feedback " << err_fed;
}

TEST(MnistExchange, ErrorFeedbackNeedsACompressedFormat) {
  EXPECT_INVALID(mn::check_exchange({.error_feedback = true}), "--error-feedback");
}

TEST(MnistTrain, TwoWorkersOneEpochLossFalls) {
  TempDir dir;
  mn::save_mnist(synthetic(2048, 1), dir.path(), "train");
  mn::save_mnist(synthetic(256, 2), dir.path(), "t10k");
  const auto train = mn::load_mnist(dir.path(), "train");
  const auto test = mn::load_mnist(dir.path(), "t10k");

  mn::TrainOptions o;
  o.workers = 2;
  o.epochs = 1;
  o.lr = 0.05;
  o.test_batch_size = 100;
  o.exchange.compression = mn::GradCompression::fp8_e4m3;  // the lab's 8-bit AllReduce
  std::ostringstream log;
  const auto r = mn::train(train, test, o, &log);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.steps_per_epoch, 16);  // 1024 samples per worker, batch 64
  EXPECT_EQ(r.bytes_per_step, 87360 / 4);
  EXPECT_EQ(r.parameters, 21840);
  const auto& e = r.epochs[0];
  EXPECT_TRUE(std::isfinite(e.train_loss));
  EXPECT_LT(e.test_loss, 0.5 * std::log(10.0)) << log.str();
  EXPECT_GT(e.test_accuracy, 0.6) << log.str();
  EXPECT_LT(e.test_loss, e.train_loss)
      << "dropout is off at test time, so test loss should be lower";
  EXPECT_NE(log.str().find("epoch 1/1 ["), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("samples/s"), std::string::npos) << log.str();
}

TEST(MnistTrain, DeterministicForSeedAndWorkers) {
  const auto train = synthetic(160, 3);
  const auto test = synthetic(40, 4);
  mn::TrainOptions o;
  o.epochs = 2;
  o.batch_size = 32;
  o.progress = false;
  for (const int p : {1, 3}) {
    o.workers = p;
    o.seed = 42;
    const auto a = mn::train(train, test, o, nullptr);
    const auto b = mn::train(train, test, o, nullptr);
    EXPECT_EQ(a.final_parameters, b.final_parameters) << "P " << p;
    EXPECT_EQ(a.epochs.back().test_loss, b.epochs.back().test_loss) << "P " << p;
    o.seed = 43;
    const auto c = mn::train(train, test, o, nullptr);
    EXPECT_NE(a.final_parameters, c.final_parameters) << "P " << p;
  }
}

// `TrainOptions::hidden` reaches the network (parameters, bytes per step) and the epoch's time is
// split into compute and gradient exchange.
TEST(MnistTrain, HiddenWidthSetsTheGradientAndTheStepIsTimed) {
  const auto train = synthetic(128, 7);
  const auto test = synthetic(32, 8);
  mn::TrainOptions o;
  o.workers = 2;
  o.epochs = 1;
  o.batch_size = 16;
  o.hidden = 200;
  o.progress = false;
  const auto r = mn::train(train, test, o, nullptr);
  EXPECT_EQ(r.parameters, 5290 + 331 * 200);
  EXPECT_EQ(r.bytes_per_step, r.parameters * 4);  // 2 (P-1)/P of the f32 buffer, P = 2
  ASSERT_EQ(r.epochs.size(), 1u);
  const auto& e = r.epochs[0];
  EXPECT_GT(e.compute_seconds, 0);
  EXPECT_GT(e.exchange_seconds, 0);
  EXPECT_LE(e.compute_seconds + e.exchange_seconds, e.train_seconds);
  o.hidden = 0;
  EXPECT_INVALID(mn::train(train, test, o, nullptr), "--hidden");
}

TEST(MnistTrain, RejectsBadOptions) {
  const auto train = synthetic(8, 5);
  const auto test = synthetic(4, 6);
  mn::TrainOptions o;
  o.progress = false;
  o.workers = 0;
  EXPECT_INVALID(mn::train(train, test, o, nullptr), "--workers");
  o.workers = 1;
  o.lr = -1;
  EXPECT_INVALID(mn::train(train, test, o, nullptr), "--lr");
  o.lr = 0.01;
  o.workers = 9;
  EXPECT_INVALID(mn::train(train, test, o, nullptr), "smaller than the worker count");
}
