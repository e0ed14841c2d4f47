// Finite-difference gradient checks of every layer of the MNIST example and of the whole network,
// in double precision. Each check perturbs one input or parameter by +-eps (central difference,
// truncation error O(eps^2)) and compares with the analytic backward pass.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "mnist/layers.hpp"
#include "mnist/model.hpp"

namespace mn = fusedcoll::mnist;
using D = double;
using MatD = mn::Mat<D>;

namespace {

constexpr D kEps = 1e-6;
// With eps = 1e-6 in double, truncation (~eps^2 |f'''|) and cancellation (~1e-16 |f| / eps) are
// both far below 1e-7; a wrong backward formula is off by O(1) relative.
constexpr D kTol = 1e-6;

MatD random_matrix(std::int64_t rows, std::int64_t cols, mn::Rng& rng, D scale = 1) {
  MatD m(rows, cols);
  for (std::int64_t i = 0; i < m.size(); ++i) m.data()[i] = scale * (2 * rng.uniform() - 1);
  return m;
}

std::vector<D> random_vector(std::int64_t n, mn::Rng& rng, D scale = 1) {
  std::vector<D> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = scale * (2 * rng.uniform() - 1);
  return v;
}

/// Compares `analytic[i]` with the central difference of `loss` in `x[i]`, for the indices
/// `which` (all when empty). Returns the failures, formatted, so a test can also assert that a
/// wrong gradient is caught.
std::vector<std::string> check_gradient(const std::function<D()>& loss, D* x, const D* analytic,
                                        std::int64_t n, const std::string& what,
                                        const std::vector<std::int64_t>& which = {}) {
  std::vector<std::string> failures;
  const auto check_one = [&](std::int64_t i) {
    const D saved = x[i];
    x[i] = saved + kEps;
    const D up = loss();
    x[i] = saved - kEps;
    const D down = loss();
    x[i] = saved;
    const D numeric = (up - down) / (2 * kEps);
    const D scale = std::max({D(1), std::abs(numeric), std::abs(analytic[i])});
    if (!(std::abs(numeric - analytic[i]) <= kTol * scale))
      failures.push_back(what + "[" + std::to_string(i) + "]: analytic " +
                         std::to_string(analytic[i]) + " vs numeric " + std::to_string(numeric));
  };
  if (which.empty())
    for (std::int64_t i = 0; i < n; ++i) check_one(i);
  else
    for (const auto i : which) check_one(i);
  return failures;
}

void expect_no_failures(const std::vector<std::string>& failures) {
  EXPECT_TRUE(failures.empty()) << failures.size()
                                << " gradient mismatches, first: " << failures.front();
}

D weighted_sum(const MatD& y, const MatD& r) { return (y.array() * r.array()).sum(); }

}  // namespace

// The checker itself must catch a wrong gradient, or every test below is vacuous.
TEST(MnistGradCheck, CatchesAWrongGradient) {
  mn::Rng rng(1);
  std::vector<D> x = random_vector(5, rng);
  const auto loss = [&] { return x[0] * x[0] * x[1] + std::sin(x[2]) + x[3] * x[4]; };
  std::vector<D> g = {2 * x[0] * x[1], x[0] * x[0], std::cos(x[2]), x[4], x[3]};
  EXPECT_TRUE(check_gradient(loss, x.data(), g.data(), 5, "f").empty());
  g[2] += 1e-4;  // a small error, relative to O(1) values
  EXPECT_EQ(check_gradient(loss, x.data(), g.data(), 5, "f").size(), 1u);
}

TEST(MnistGradCheck, Conv2dInputWeightAndBias) {
  mn::Rng rng(2);
  mn::Conv2d<D> conv;
  conv.in_c = 3, conv.out_c = 4, conv.k = 3, conv.w_offset = 0, conv.b_offset = 4 * 27;
  std::vector<D> params = random_vector(conv.parameters(), rng);
  // Non-square, 2 samples, so a mixed-up index in im2col or col2im shows.
  mn::Act<D> in{random_matrix(3, 2 * 7 * 6, rng), 2, 7, 6};
  const MatD r = random_matrix(4, 2 * 5 * 4, rng);
  const auto loss = [&] { return weighted_sum(conv.forward(in, params.data()).x, r); };

  const auto out = conv.forward(in, params.data());
  ASSERT_EQ(out.h, 5);
  ASSERT_EQ(out.w, 4);
  std::vector<D> grads(params.size(), 0.0);
  const auto din = conv.backward({r, out.n, out.h, out.w}, params.data(), grads.data(), true);
  expect_no_failures(
      check_gradient(loss, params.data(), grads.data(), conv.parameters(), "conv params"));
  expect_no_failures(check_gradient(loss, in.x.data(), din.x.data(), in.x.size(), "conv input"));
}

// The gradient checks prove backward consistent with forward; this proves forward itself: a
// direct 6-deep loop of the textbook definition (cross-correlation, as PyTorch's Conv2d).
TEST(MnistGradCheck, Conv2dForwardMatchesDirectLoop) {
  mn::Rng rng(14);
  mn::Conv2d<D> conv;
  conv.in_c = 3, conv.out_c = 4, conv.k = 3, conv.w_offset = 0, conv.b_offset = 4 * 27;
  const std::vector<D> params = random_vector(conv.parameters(), rng);
  const int n = 2, h = 7, w = 6, oh = 5, ow = 4;
  mn::Act<D> in{random_matrix(3, n * h * w, rng), n, h, w};
  const auto out = conv.forward(in, params.data());
  const auto x = [&](int s, int c, int y, int xx) { return in.x(c, (s * h + y) * w + xx); };
  // Weight layout: out_c x (k*k*in_c) column-major, column (kh*k + kw)*in_c + c.
  const auto wt = [&](int o, int c, int kh, int kw) {
    return params[static_cast<std::size_t>(((kh * 3 + kw) * 3 + c) * 4 + o)];
  };
  for (int s = 0; s < n; ++s)
    for (int o = 0; o < 4; ++o)
      for (int y = 0; y < oh; ++y)
        for (int xx = 0; xx < ow; ++xx) {
          D expect = params[static_cast<std::size_t>(conv.b_offset + o)];
          for (int c = 0; c < 3; ++c)
            for (int kh = 0; kh < 3; ++kh)
              for (int kw = 0; kw < 3; ++kw) expect += wt(o, c, kh, kw) * x(s, c, y + kh, xx + kw);
          EXPECT_NEAR(out.x(o, (s * oh + y) * ow + xx), expect, 1e-12)
              << "sample " << s << " out channel " << o << " at " << y << "," << xx;
        }
}

TEST(MnistGradCheck, LinearForwardMatchesDirectLoop) {
  mn::Rng rng(15);
  mn::Linear<D> fc;
  fc.in = 5, fc.out = 3, fc.w_offset = 0, fc.b_offset = 15;
  const std::vector<D> params = random_vector(fc.parameters(), rng);
  const MatD x = random_matrix(5, 2, rng);
  const MatD y = fc.forward(x, params.data());
  for (int j = 0; j < 2; ++j)
    for (int o = 0; o < 3; ++o) {
      D expect = params[static_cast<std::size_t>(15 + o)];
      for (int i = 0; i < 5; ++i) expect += params[static_cast<std::size_t>(i * 3 + o)] * x(i, j);
      EXPECT_NEAR(y(o, j), expect, 1e-12) << o << " " << j;
    }
}

TEST(MnistGradCheck, Conv2dAccumulatesIntoGrads) {
  mn::Rng rng(3);
  mn::Conv2d<D> conv;
  conv.in_c = 1, conv.out_c = 2, conv.k = 2, conv.w_offset = 0, conv.b_offset = 8;
  std::vector<D> params = random_vector(conv.parameters(), rng);
  mn::Act<D> in{random_matrix(1, 9, rng), 1, 3, 3};
  const auto out = conv.forward(in, params.data());
  const MatD r = random_matrix(2, 4, rng);
  std::vector<D> once(params.size(), 0.0);
  conv.backward({r, 1, 2, 2}, params.data(), once.data(), false);
  std::vector<D> twice(params.size(), 0.0);
  conv.backward({r, 1, 2, 2}, params.data(), twice.data(), false);
  conv.backward({r, 1, 2, 2}, params.data(), twice.data(), false);
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_DOUBLE_EQ(twice[i], 2 * once[i]) << i;
}

TEST(MnistGradCheck, MaxPoolOddSizesDropTheLastRowAndColumn) {
  mn::Rng rng(4);
  mn::MaxPool2<D> pool;
  mn::Act<D> in{random_matrix(3, 2 * 7 * 5, rng), 2, 7, 5};
  const auto out = pool.forward(in);
  ASSERT_EQ(out.h, 3);
  ASSERT_EQ(out.w, 2);
  // Forward against a direct loop.
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < 2; ++x) {
          D m = -1e300;
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx)
              m = std::max(m, in.x(c, (n * 7 + 2 * y + dy) * 5 + 2 * x + dx));
          EXPECT_EQ(out.x(c, (n * 3 + y) * 2 + x), m);
        }
  const MatD r = random_matrix(3, out.x.cols(), rng);
  const auto din = pool.backward({r, out.n, out.h, out.w});
  mn::MaxPool2<D> probe;
  const auto loss = [&] { return weighted_sum(probe.forward(in).x, r); };
  expect_no_failures(check_gradient(loss, in.x.data(), din.x.data(), in.x.size(), "pool input"));
}

TEST(MnistGradCheck, Relu) {
  mn::Rng rng(5);
  MatD x = random_matrix(6, 7, rng);
  // Keep every input well away from the kink at 0, where the derivative does not exist.
  for (std::int64_t i = 0; i < x.size(); ++i)
    if (std::abs(x.data()[i]) < 0.05) x.data()[i] += 0.1;
  const MatD r = random_matrix(6, 7, rng);
  mn::Relu<D> relu;
  MatD y = x;
  relu.forward(y);
  EXPECT_EQ(y.minCoeff(), 0.0);
  MatD dx = r;
  relu.backward(dx);
  const auto loss = [&] {
    MatD t = x;
    mn::Relu<D> probe;
    probe.forward(t);
    return weighted_sum(t, r);
  };
  expect_no_failures(check_gradient(loss, x.data(), dx.data(), x.size(), "relu input"));
}

TEST(MnistGradCheck, DropoutAndDropout2d) {
  for (const bool channel_wise : {false, true}) {
    SCOPED_TRACE(channel_wise ? "Dropout2d" : "Dropout");
    mn::Rng rng(6);
    const int n = 3;
    const std::int64_t spatial = channel_wise ? 4 : 1;
    MatD x = random_matrix(5, n * spatial, rng);
    const MatD r = random_matrix(5, n * spatial, rng);
    // The same seed gives the same mask, so the loss is a fixed function of x.
    const auto run = [&](MatD& t, mn::Dropout<D>& d) {
      mn::Rng masks(77);
      d.p = 0.5;
      d.channel_wise = channel_wise;
      d.forward(t, n, spatial, masks);
    };
    mn::Dropout<D> drop;
    MatD y = x;
    run(y, drop);
    MatD dx = r;
    drop.backward(dx);
    const auto loss = [&] {
      MatD t = x;
      mn::Dropout<D> probe;
      run(t, probe);
      return weighted_sum(t, r);
    };
    expect_no_failures(check_gradient(loss, x.data(), dx.data(), x.size(), "dropout input"));
    // Survivors are scaled by 1/(1-p) = 2; Dropout2d zeroes whole (channel, sample) maps.
    for (std::int64_t i = 0; i < y.size(); ++i)
      EXPECT_TRUE(y.data()[i] == 0 || std::abs(y.data()[i] - 2 * x.data()[i]) < 1e-15) << i;
    if (channel_wise) {
      for (int s = 0; s < n; ++s)
        for (int c = 0; c < 5; ++c)
          for (std::int64_t j = 1; j < spatial; ++j)
            EXPECT_EQ(y(c, s * spatial + j) == 0, y(c, s * spatial) == 0) << c << " " << s;
    }
  }
}

TEST(MnistGradCheck, DropoutRateAndScale) {
  mn::Rng rng(8);
  mn::Dropout<D> drop;
  drop.p = 0.5;
  MatD x = MatD::Ones(100, 200);
  drop.forward(x, 200, 1, rng);
  const double kept = (x.array() != 0).cast<double>().mean();
  EXPECT_NEAR(kept, 0.5, 0.02);      // 20,000 draws: the standard deviation is 0.0035
  EXPECT_NEAR(x.mean(), 1.0, 0.04);  // inverted dropout keeps the expectation
}

TEST(MnistGradCheck, Linear) {
  mn::Rng rng(9);
  mn::Linear<D> fc;
  fc.in = 7, fc.out = 4, fc.w_offset = 0, fc.b_offset = 28;
  std::vector<D> params = random_vector(fc.parameters(), rng);
  MatD x = random_matrix(7, 3, rng);
  const MatD r = random_matrix(4, 3, rng);
  fc.forward(x, params.data());
  std::vector<D> grads(params.size(), 0.0);
  const MatD dx = fc.backward(r, params.data(), grads.data());
  mn::Linear<D> probe = fc;
  const auto loss = [&] { return weighted_sum(probe.forward(x, params.data()), r); };
  expect_no_failures(
      check_gradient(loss, params.data(), grads.data(), fc.parameters(), "fc params"));
  expect_no_failures(check_gradient(loss, x.data(), dx.data(), x.size(), "fc input"));
}

TEST(MnistGradCheck, LogSoftmaxNll) {
  mn::Rng rng(10);
  MatD z = random_matrix(10, 4, rng, 5);
  z(3, 1) = 800;  // exp(800) overflows: the log-sum-exp must be shifted
  const std::vector<int> labels = {0, 3, 9, 9};
  MatD dz;
  const D loss0 = mn::nll_loss(mn::log_softmax(z), labels, &dz);
  EXPECT_TRUE(std::isfinite(loss0));
  const MatD p = mn::log_softmax(z).array().exp();
  for (std::int64_t j = 0; j < 4; ++j) EXPECT_NEAR(p.col(j).sum(), 1.0, 1e-12) << j;
  const auto loss = [&] { return mn::nll_loss(mn::log_softmax(z), labels, nullptr); };
  expect_no_failures(check_gradient(loss, z.data(), dz.data(), z.size(), "logits"));
}

// The whole network in training mode (dropout on, masks replayed from a fixed seed), against
// finite differences on a sample of every parameter tensor: 21,840 x 2 forward passes would be
// slow, and a sample of each tensor catches a wrong formula, a wrong offset or a wrong layout.
TEST(MnistGradCheck, WholeNetworkWithDropout) {
  mn::Net<D> net(0.5);
  ASSERT_EQ(net.parameters(), 21840);  // Horovod's pytorch_mnist net
  std::vector<D> params = net.initial_parameters(11);
  mn::Rng rng(12);
  const int n = 3;
  const MatD images = random_matrix(784, n, rng, 2);
  const std::vector<int> labels = {7, 0, 4};
  std::vector<D> grads(params.size(), 0.0);
  {
    mn::Rng masks(99);
    net.loss_and_gradient(images, labels, params.data(), grads.data(), masks);
  }
  const auto loss = [&] {
    mn::Net<D> probe(0.5);
    mn::Rng masks(99);
    return mn::nll_loss(probe.forward(images, params.data(), &masks), labels, nullptr);
  };
  // Tensor boundaries: conv1 W, b, conv2 W, b, fc1 W, b, fc2 W, b.
  const std::vector<std::int64_t> bounds = {0, 250, 260, 5260, 5280, 21280, 21330, 21830, 21840};
  std::vector<std::int64_t> which;
  mn::Rng pick(13);
  for (std::size_t t = 0; t + 1 < bounds.size(); ++t) {
    const std::int64_t len = bounds[t + 1] - bounds[t];
    which.push_back(bounds[t]);
    which.push_back(bounds[t + 1] - 1);
    for (int i = 0; i < 12; ++i)
      which.push_back(bounds[t] +
                      static_cast<std::int64_t>(pick.below(static_cast<std::uint64_t>(len))));
  }
  int nonzero = 0;
  for (const auto i : which) nonzero += grads[static_cast<std::size_t>(i)] != 0;
  EXPECT_GT(nonzero, static_cast<int>(which.size()) / 2)
      << "most sampled gradients should be non-zero";
  expect_no_failures(
      check_gradient(loss, params.data(), grads.data(), net.parameters(), "net params", which));
}

// `--hidden` widens fc1/fc2 only: 5,290 + 331 x H parameters, with fc1 and fc2 at offsets that
// follow H. A gradient check of a width other than 50 catches an offset or a layout that assumed
// the lab's width.
TEST(MnistGradCheck, WiderHiddenLayer) {
  EXPECT_EQ(mn::Net<D>(0.5, 1).parameters(), 5290 + 331);
  EXPECT_EQ(mn::Net<D>(0.5, 4096).parameters(), 1361066);
  const int hidden = 7;
  mn::Net<D> net(0.5, hidden);
  ASSERT_EQ(net.parameters(), 5290 + 331 * hidden);
  std::vector<D> params = net.initial_parameters(31);
  mn::Rng rng(32);
  const MatD images = random_matrix(784, 2, rng, 2);
  const std::vector<int> labels = {3, 8};
  std::vector<D> grads(params.size(), 0.0);
  {
    mn::Rng masks(98);
    net.loss_and_gradient(images, labels, params.data(), grads.data(), masks);
  }
  const auto loss = [&] {
    mn::Net<D> probe(0.5, hidden);
    mn::Rng masks(98);
    return mn::nll_loss(probe.forward(images, params.data(), &masks), labels, nullptr);
  };
  // Tensor boundaries: conv2 b, fc1 W, b, fc2 W, b (fc1 and fc2 are where the width moves the
  // offsets); the first, last and 16 random entries of each.
  const std::vector<std::int64_t> bounds = {5260, 5280, 5280 + 320 * hidden, 5280 + 321 * hidden,
                                            5280 + 331 * hidden, 5290 + 331 * hidden};
  std::vector<std::int64_t> which;
  mn::Rng pick(33);
  for (std::size_t t = 0; t + 1 < bounds.size(); ++t) {
    which.push_back(bounds[t]);
    which.push_back(bounds[t + 1] - 1);
    for (int i = 0; i < 16; ++i)
      which.push_back(bounds[t] + static_cast<std::int64_t>(pick.below(
                                      static_cast<std::uint64_t>(bounds[t + 1] - bounds[t]))));
  }
  expect_no_failures(
      check_gradient(loss, params.data(), grads.data(), net.parameters(), "net params", which));
}

TEST(MnistModel, RejectsAHiddenWidthOutOfRange) {
  for (const int h : {0, -1, mn::Net<float>::kMaxHidden + 1}) {
    try {
      mn::Net<float> net(0.5, h);
      ADD_FAILURE() << "hidden " << h << " was accepted";
    } catch (const fusedcoll::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--hidden must be in [1, 65536]"), std::string::npos)
          << e.what();
    }
  }
}

TEST(MnistModel, EvaluationModeIsDeterministicAndTrainingModeUsesTheMasks) {
  mn::Net<D> net(0.5);
  const std::vector<D> params = net.initial_parameters(21);
  mn::Rng rng(22);
  const MatD images = random_matrix(784, 4, rng);
  const MatD a = net.forward(images, params.data(), nullptr);
  const MatD b = net.forward(images, params.data(), nullptr);
  EXPECT_EQ(a, b);
  mn::Rng m1(5), m2(5), m3(6);
  const MatD t1 = net.forward(images, params.data(), &m1);
  const MatD t2 = net.forward(images, params.data(), &m2);
  const MatD t3 = net.forward(images, params.data(), &m3);
  EXPECT_EQ(t1, t2);
  EXPECT_NE(t1, t3);
  EXPECT_NE(t1, a);
}
