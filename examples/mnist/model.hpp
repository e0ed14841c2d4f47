#pragma once
/// @file
/// Horovod's `pytorch_mnist` network (examples/pytorch_mnist.py, v0.19.4):
///   conv 1->10 (5x5) -> max-pool 2 -> ReLU -> conv 10->20 (5x5) -> Dropout2d(0.5) -> max-pool 2
///   -> ReLU -> fc 320->50 -> ReLU -> Dropout(0.5) -> fc 50->10 -> log-softmax, NLL loss.
/// All 21,840 parameters live in one flat buffer, so the gradient exchange is one AllReduce.
/// `hidden` widens the fc layer (320->hidden->10; 50 is the lab's): 5,290 + 331 x hidden
/// parameters, almost all in fc1, so the gradient grows with it while the convolutions' compute
/// per sample stays the same (`--hidden`, docs/mnist.md).

#include <cstdint>
#include <vector>

#include "mnist/layers.hpp"

namespace fusedcoll::mnist {

template <class T>
class Net {
 public:
  static constexpr int kImage = 28;
  static constexpr int kClasses = 10;

  static constexpr int kDefaultHidden = 50;
  static constexpr int kMaxHidden = 1 << 16;  ///< 21.7 M parameters, 87 MB of f32 gradient

  /// `dropout` = 0 turns both dropout layers into the identity (the gradient checks use it to
  /// isolate the other layers; they check dropout separately).
  explicit Net(double dropout = 0.5, int hidden = kDefaultHidden) {
    FC_ENFORCE(hidden >= 1 && hidden <= kMaxHidden, "--hidden must be in [1, ", kMaxHidden,
               "], got ", hidden);
    std::int64_t at = 0;
    const auto place_conv = [&](Conv2d<T>& c, int in_c, int out_c) {
      c.in_c = in_c, c.out_c = out_c, c.k = 5, c.w_offset = at;
      c.b_offset = at + std::int64_t{out_c} * 25 * in_c;
      at += c.parameters();
    };
    const auto place_fc = [&](Linear<T>& l, int in, int out) {
      l.in = in, l.out = out, l.w_offset = at, l.b_offset = at + std::int64_t{in} * out;
      at += l.parameters();
    };
    place_conv(conv1_, 1, 10);
    place_conv(conv2_, 10, 20);
    place_fc(fc1_, 320, hidden);
    place_fc(fc2_, hidden, kClasses);
    parameters_ = at;
    drop2d_.p = dropout;
    drop2d_.channel_wise = true;
    drop_.p = dropout;
  }

  std::int64_t parameters() const noexcept { return parameters_; }

  /// PyTorch's default initialisation of Conv2d and Linear (kaiming_uniform with a = sqrt(5),
  /// which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias).
  std::vector<T> initial_parameters(std::uint64_t seed) const {
    std::vector<T> p(static_cast<std::size_t>(parameters_));
    Rng rng(seed);
    const auto fill = [&](std::int64_t from, std::int64_t to, std::int64_t fan_in) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      for (std::int64_t i = from; i < to; ++i)
        p[static_cast<std::size_t>(i)] = static_cast<T>((2 * rng.uniform() - 1) * bound);
    };
    fill(conv1_.w_offset, conv2_.w_offset, conv1_.fan_in());
    fill(conv2_.w_offset, fc1_.w_offset, conv2_.fan_in());
    fill(fc1_.w_offset, fc2_.w_offset, fc1_.fan_in());
    fill(fc2_.w_offset, parameters_, fc2_.fan_in());
    return p;
  }

  /// Log-probabilities (`10 x N`) of a batch of images (`784 x N`, one normalised image per
  /// column, row-major pixels). `rng` non-null: training mode (dropout active, drawing masks from
  /// it), and the activations are kept for `backward`. Null: evaluation mode.
  Mat<T> forward(const Mat<T>& images, const T* params, Rng* rng) {
    FC_ENFORCE_EQ(images.rows(), std::int64_t{kImage} * kImage, "pixels per image");
    const int n = static_cast<int>(images.cols());
    Act<T> a{Eigen::Map<const Mat<T>>(images.data(), 1, images.size()), n, kImage, kImage};
    a = conv1_.forward(a, params);
    a = pool1_.forward(a);
    relu1_.forward(a.x);
    a = conv2_.forward(a, params);
    if (rng != nullptr) drop2d_.forward(a.x, n, std::int64_t{a.h} * a.w, *rng);
    a = pool2_.forward(a);
    relu2_.forward(a.x);
    pooled_ = {Mat<T>(), a.n, a.h, a.w};
    Mat<T> h = fc1_.forward(Eigen::Map<const Mat<T>>(a.x.data(), a.x.size() / n, n), params);
    relu3_.forward(h);
    if (rng != nullptr) drop_.forward(h, n, 1, *rng);
    training_ = rng != nullptr;
    return log_softmax(fc2_.forward(h, params));
  }

  /// Back-propagates d(loss)/d(logits) (`10 x N`) through the last training-mode `forward`,
  /// accumulating into `grads` (laid out like the parameters).
  void backward(const Mat<T>& dlogits, const T* params, T* grads) {
    FC_ENFORCE(training_, "backward needs a training-mode forward first");
    Mat<T> dh = fc2_.backward(dlogits, params, grads);
    drop_.backward(dh);
    relu3_.backward(dh);
    Mat<T> dflat = fc1_.backward(dh, params, grads);
    Act<T> d{Eigen::Map<const Mat<T>>(
                 dflat.data(), dflat.size() / (std::int64_t{pooled_.n} * pooled_.h * pooled_.w),
                 std::int64_t{pooled_.n} * pooled_.h * pooled_.w),
             pooled_.n, pooled_.h, pooled_.w};
    relu2_.backward(d.x);
    d = pool2_.backward(d);
    drop2d_.backward(d.x);
    d = conv2_.backward(d, params, grads, true);
    relu1_.backward(d.x);
    d = pool1_.backward(d);
    conv1_.backward(d, params, grads, false);
  }

  /// One training step's loss and gradient: forward, NLL against `labels`, backward. Gradients are
  /// accumulated into `grads`; the loss is the batch mean.
  T loss_and_gradient(const Mat<T>& images, const std::vector<int>& labels, const T* params,
                      T* grads, Rng& rng) {
    const Mat<T> logp = forward(images, params, &rng);
    Mat<T> dlogits;
    const T loss = nll_loss(logp, labels, &dlogits);
    backward(dlogits, params, grads);
    return loss;
  }

 private:
  std::int64_t parameters_ = 0;
  bool training_ = false;
  Conv2d<T> conv1_;
  MaxPool2<T> pool1_;
  Relu<T> relu1_;
  Conv2d<T> conv2_;
  Dropout<T> drop2d_;
  MaxPool2<T> pool2_;
  Relu<T> relu2_;
  Act<T> pooled_;
  Linear<T> fc1_;
  Relu<T> relu3_;
  Dropout<T> drop_;
  Linear<T> fc2_;
};

}  // namespace fusedcoll::mnist
