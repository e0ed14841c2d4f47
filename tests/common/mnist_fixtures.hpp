#pragma once
// Fixtures of the MNIST example's tests: generated digit-like data sets and a scratch directory.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "mnist/idx.hpp"
#include "mnist/layers.hpp"

namespace fctest {

namespace mn = fusedcoll::mnist;

/// Digit-like synthetic images: class c is a thick stroke pattern of its own (a horizontal bar at
/// a class-specific height for c < 5, a vertical bar at a class-specific column for c >= 5),
/// jittered by +-2 pixels and overlaid with uniform noise, so the classes are separable but not
/// trivially (a pixel-exact template does not exist).
inline mn::Dataset synthetic(int count, std::uint64_t seed) {
  mn::Rng rng(seed);
  mn::Dataset s;
  s.rows = s.cols = 28;
  s.pixels.assign(static_cast<std::size_t>(count) * 784, 0);
  for (int i = 0; i < count; ++i) {
    const int c = static_cast<int>(rng.below(10));
    s.labels.push_back(static_cast<std::uint8_t>(c));
    std::uint8_t* img = s.pixels.data() + static_cast<std::size_t>(i) * 784;
    for (int p = 0; p < 784; ++p) img[p] = static_cast<std::uint8_t>(rng.below(60));
    const int jitter = static_cast<int>(rng.below(5)) - 2;
    const int at = 4 + 4 * (c % 5) + jitter;
    for (int a = 4; a < 24; ++a)
      for (int t = at; t < at + 3; ++t) {
        const int y = c < 5 ? t : a;
        const int x = c < 5 ? a : t;
        img[y * 28 + x] = 255;
      }
  }
  return s;
}

/// A fresh directory named after the running test and process, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("fc_mnist_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};


}  // namespace fctest
