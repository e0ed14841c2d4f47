#pragma once
/// @file
/// The layers of Horovod's `pytorch_mnist` network, forward and backward, on Eigen. Templated on
/// the scalar so that the finite-difference tests run them in double; training uses float.
///
/// Activations of the convolutional part are `C x (N*H*W)` matrices: row = channel, column =
/// (n*H + h)*W + w. Eigen stores them column-major, so the channels of one pixel are contiguous,
/// im2col copies whole runs of `k*C` values, and the output of a convolution is one GEMM with no
/// transpose. A `C x (N*H*W)` activation reshaped to `(H*W*C) x N` is the flattened batch that the
/// fully connected layers take (a different feature order from PyTorch's `view`, which does not
/// matter for a model trained from scratch).

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "fusedcoll/error.hpp"

namespace fusedcoll::mnist {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// A batch of `n` feature maps of `h x w` with `x.rows()` channels; layout in the file comment.
template <class T>
struct Act {
  Mat<T> x;
  int n = 0;
  int h = 0;
  int w = 0;
  int channels() const noexcept { return static_cast<int>(x.rows()); }
};

/// The seeded generator of dropout masks: splitmix64, so that masks are identical on every
/// platform and standard library (std distributions are not).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n), 0 < n < 2^32: the high 32 random bits scaled (Lemire's
  /// multiply-shift without the rejection step; the bias is below n / 2^32).
  std::uint64_t below(std::uint64_t n) noexcept { return ((next() >> 32) * n) >> 32; }

 private:
  std::uint64_t state_;
};

/// 2-D convolution, stride 1, no padding, as im2col + GEMM. Parameters live in a flat buffer:
/// the weight `out_c x (k*k*in_c)` column-major at `w_offset` (column index (kh*k + kw)*in_c + c),
/// the bias `out_c` at `b_offset`.
template <class T>
struct Conv2d {
  int in_c = 0;
  int out_c = 0;
  int k = 0;
  std::int64_t w_offset = 0;
  std::int64_t b_offset = 0;

  std::int64_t parameters() const noexcept { return std::int64_t{out_c} * k * k * in_c + out_c; }
  std::int64_t fan_in() const noexcept { return std::int64_t{in_c} * k * k; }

  Act<T> forward(const Act<T>& in, const T* params) {
    FC_ENFORCE_EQ(in.channels(), in_c, "Conv2d input channels");
    FC_ENFORCE(in.h >= k && in.w >= k, "Conv2d input ", in.h, "x", in.w, " smaller than kernel ",
               k);
    in_ = {Mat<T>(), in.n, in.h, in.w};
    const int oh = in.h - k + 1;
    const int ow = in.w - k + 1;
    const std::int64_t patch = std::int64_t{k} * k * in_c;
    const std::int64_t run = std::int64_t{k} * in_c;
    cols_.resize(patch, std::int64_t{in.n} * oh * ow);
    for (int n = 0; n < in.n; ++n)
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x) {
          T* dst = cols_.data() + ((std::int64_t{n} * oh + y) * ow + x) * patch;
          for (int kh = 0; kh < k; ++kh) {
            const T* src = in.x.data() + ((std::int64_t{n} * in.h + y + kh) * in.w + x) * in_c;
            std::copy(src, src + run, dst + kh * run);
          }
        }
    Act<T> out{Mat<T>(out_c, cols_.cols()), in.n, oh, ow};
    out.x.noalias() = weight(params) * cols_;
    out.x.colwise() += bias(params);
    return out;
  }

  /// Accumulates the parameter gradients into `grads` (same layout as `params`); returns the
  /// input gradient when `need_input_grad`, else an empty activation.
  Act<T> backward(const Act<T>& dout, const T* params, T* grads, bool need_input_grad) {
    Eigen::Map<Mat<T>> dw(grads + w_offset, out_c, cols_.rows());
    Eigen::Map<Vec<T>> db(grads + b_offset, out_c);
    dw.noalias() += dout.x * cols_.transpose();
    db += dout.x.rowwise().sum();
    Act<T> din{Mat<T>(), in_.n, in_.h, in_.w};
    if (!need_input_grad) return din;
    const Mat<T> dcols = weight(params).transpose() * dout.x;
    din.x.setZero(in_c, std::int64_t{in_.n} * in_.h * in_.w);
    const int oh = dout.h;
    const int ow = dout.w;
    const std::int64_t patch = dcols.rows();
    const std::int64_t run = std::int64_t{k} * in_c;
    for (int n = 0; n < in_.n; ++n)
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x) {
          const T* src = dcols.data() + ((std::int64_t{n} * oh + y) * ow + x) * patch;
          for (int kh = 0; kh < k; ++kh) {
            T* dst = din.x.data() + ((std::int64_t{n} * in_.h + y + kh) * in_.w + x) * in_c;
            for (std::int64_t i = 0; i < run; ++i) dst[i] += src[kh * run + i];
          }
        }
    return din;
  }

  Eigen::Map<const Mat<T>> weight(const T* params) const {
    return {params + w_offset, out_c, std::int64_t{k} * k * in_c};
  }
  Eigen::Map<const Vec<T>> bias(const T* params) const { return {params + b_offset, out_c}; }

 private:
  Act<T> in_;  // geometry only
  Mat<T> cols_;
};

/// Max pooling, 2x2 window, stride 2; odd trailing rows and columns are dropped, as in PyTorch.
/// Ties go to the first element in row-major window order (PyTorch does the same).
template <class T>
struct MaxPool2 {
  Act<T> forward(const Act<T>& in) {
    const int oh = in.h / 2;
    const int ow = in.w / 2;
    const int c = in.channels();
    in_ = {Mat<T>(), in.n, in.h, in.w};
    Act<T> out{Mat<T>(c, std::int64_t{in.n} * oh * ow), in.n, oh, ow};
    argmax_.resize(static_cast<std::size_t>(out.x.size()));
    for (int n = 0; n < in.n; ++n)
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x) {
          const std::int64_t o = (std::int64_t{n} * oh + y) * ow + x;
          for (int ch = 0; ch < c; ++ch) {
            std::int64_t best = -1;
            T best_v = -std::numeric_limits<T>::infinity();
            for (int dy = 0; dy < 2; ++dy)
              for (int dx = 0; dx < 2; ++dx) {
                const std::int64_t i =
                    ((std::int64_t{n} * in.h + 2 * y + dy) * in.w + 2 * x + dx) * c + ch;
                const T v = in.x.data()[i];
                // `!(v <= best_v)` rather than `v > best_v`: a NaN wins, so it propagates.
                if (best < 0 || !(v <= best_v)) {
                  best = i;
                  best_v = v;
                }
              }
            out.x.data()[o * c + ch] = best_v;
            argmax_[static_cast<std::size_t>(o * c + ch)] = best;
          }
        }
    return out;
  }

  Act<T> backward(const Act<T>& dout) const {
    Act<T> din{Mat<T>::Zero(dout.channels(), std::int64_t{in_.n} * in_.h * in_.w), in_.n, in_.h,
               in_.w};
    for (std::int64_t i = 0; i < dout.x.size(); ++i)
      din.x.data()[argmax_[static_cast<std::size_t>(i)]] += dout.x.data()[i];
    return din;
  }

 private:
  Act<T> in_;
  std::vector<std::int64_t> argmax_;
};

/// max(x, 0), in place.
template <class T>
struct Relu {
  template <class M>
  void forward(M& x) {
    x = x.cwiseMax(T(0));
    mask_ = (x.array() > T(0)).template cast<T>();
  }
  template <class M>
  void backward(M& dx) const {
    dx.array() *= mask_.array();
  }

 private:
  Mat<T> mask_;
};

/// Inverted dropout: in training, each group of features is zeroed with probability `p` and the
/// survivors scaled by 1/(1-p), so evaluation is the identity. `channel_wise` drops whole feature
/// maps per sample (PyTorch's Dropout2d); otherwise every element independently (Dropout).
template <class T>
struct Dropout {
  double p = 0.5;
  bool channel_wise = false;

  /// `x` is `C x (N*H*W)` (channel-wise) or `features x N`; `spatial` = H*W (1 for Dropout).
  void forward(Mat<T>& x, int n, std::int64_t spatial, Rng& rng) {
    FC_ENFORCE(p >= 0 && p < 1, "dropout probability ", p, " is not in [0, 1)");
    const T keep_scale = T(1) / T(1 - p);
    mask_.resize(x.rows(), x.cols());
    if (channel_wise) {
      for (int s = 0; s < n; ++s)
        for (std::int64_t c = 0; c < x.rows(); ++c) {
          const T m = rng.uniform() < p ? T(0) : keep_scale;
          for (std::int64_t j = 0; j < spatial; ++j) mask_(c, s * spatial + j) = m;
        }
    } else {
      for (std::int64_t i = 0; i < mask_.size(); ++i)
        mask_.data()[i] = rng.uniform() < p ? T(0) : keep_scale;
    }
    x.array() *= mask_.array();
  }
  void backward(Mat<T>& dx) const { dx.array() *= mask_.array(); }

 private:
  Mat<T> mask_;
};

/// y = W x + b on a `in x N` batch. Weight `out x in` column-major at `w_offset`, bias at
/// `b_offset`.
template <class T>
struct Linear {
  int in = 0;
  int out = 0;
  std::int64_t w_offset = 0;
  std::int64_t b_offset = 0;

  std::int64_t parameters() const noexcept { return std::int64_t{in} * out + out; }
  std::int64_t fan_in() const noexcept { return in; }

  template <class M>
  Mat<T> forward(const M& x, const T* params) {
    FC_ENFORCE_EQ(x.rows(), std::int64_t{in}, "Linear input features");
    in_ = x;
    Mat<T> y(out, x.cols());
    y.noalias() = weight(params) * x;
    y.colwise() += bias(params);
    return y;
  }
  Mat<T> backward(const Mat<T>& dy, const T* params, T* grads) const {
    Eigen::Map<Mat<T>> dw(grads + w_offset, out, in);
    Eigen::Map<Vec<T>> db(grads + b_offset, out);
    dw.noalias() += dy * in_.transpose();
    db += dy.rowwise().sum();
    return weight(params).transpose() * dy;
  }
  Eigen::Map<const Mat<T>> weight(const T* params) const { return {params + w_offset, out, in}; }
  Eigen::Map<const Vec<T>> bias(const T* params) const { return {params + b_offset, out}; }

 private:
  Mat<T> in_;
};

/// log_softmax over the classes (rows) of a `classes x N` batch, computed stably.
template <class T>
Mat<T> log_softmax(const Mat<T>& z) {
  Mat<T> out(z.rows(), z.cols());
  for (std::int64_t j = 0; j < z.cols(); ++j) {
    const T m = z.col(j).maxCoeff();
    const T lse = m + std::log((z.col(j).array() - m).exp().sum());
    out.col(j) = z.col(j).array() - lse;
  }
  return out;
}

/// Mean negative log-likelihood of `labels` under `logp` (`classes x N` log-probabilities), and
/// its gradient with respect to the logits that produced `logp` through `log_softmax`:
/// (softmax - onehot) / N.
template <class T>
T nll_loss(const Mat<T>& logp, const std::vector<int>& labels,
           std::type_identity_t<Mat<T>>* dlogits) {
  const auto n = logp.cols();
  FC_ENFORCE_EQ(static_cast<std::int64_t>(labels.size()), static_cast<std::int64_t>(n),
                "labels per batch");
  T loss = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    FC_ENFORCE(labels[j] >= 0 && labels[j] < logp.rows(), "label ", labels[j], " out of range");
    loss -= logp(labels[j], j);
  }
  loss /= T(n);
  if (dlogits != nullptr) {
    *dlogits = logp.array().exp() / T(n);
    for (std::int64_t j = 0; j < n; ++j) (*dlogits)(labels[j], j) -= T(1) / T(n);
  }
  return loss;
}

}  // namespace fusedcoll::mnist
