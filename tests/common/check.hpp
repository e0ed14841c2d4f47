#pragma once
/// @file
/// Comparison helpers for the tests. On failure they name the op, the rank, the flat index, the
/// expected and actual values and the tolerance (Highway style), report how many elements failed,
/// and stop listing after a few so that one broken kernel does not drown the log.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "fusedcoll/inputs.hpp"

namespace fctest {

/// How many failing elements a helper lists before it only counts.
inline constexpr int kMaxListed = 8;

/// Concatenates streamable values (test names, traces). Used instead of `"P" + std::to_string(p)`,
/// which trips a GCC 12 -Wrestrict false positive.
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}

/// Unit roundoff of binary32 (2^-24). Error bounds below are written as multiples of it.
inline constexpr double kF32Unit = 0x1p-24;

inline std::string hex_bits(float v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << std::bit_cast<std::uint32_t>(v);
  return os.str();
}

/// Every `actual[i]` lies within `tol[i]` of `expected[i]` (a NaN never does). With `tol[i] == 0`
/// this is exact equality. The sizes must agree.
inline ::testing::AssertionResult all_close(std::string_view op, int rank,
                                            std::span<const float> actual,
                                            std::span<const double> expected,
                                            std::span<const double> tol) {
  if (actual.size() != expected.size() || tol.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << op << " rank " << rank << ": size mismatch: actual " << actual.size()
           << " expected " << expected.size() << " tol " << tol.size();
  }
  std::ostringstream os;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i];
    const double err = std::abs(a - expected[i]);
    if (!(err <= tol[i])) {  // written so that a NaN fails
      if (bad < kMaxListed) {
        os << "\n  " << op << " rank " << rank << " index " << i << ": expected "
           << std::setprecision(17) << expected[i] << " actual " << std::setprecision(9)
           << actual[i] << " (" << hex_bits(actual[i]) << ") |err| " << std::setprecision(3)
           << err << " > tol " << tol[i];
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements out of tolerance" << os.str();
}

/// Same with one tolerance for every element.
inline ::testing::AssertionResult all_close(std::string_view op, int rank,
                                            std::span<const float> actual,
                                            std::span<const double> expected, double tol) {
  const std::vector<double> t(expected.size(), tol);
  return all_close(op, rank, actual, expected, std::span<const double>(t));
}

/// The two float arrays are identical bit for bit (so +0 != -0 and equal NaN payloads match).
inline ::testing::AssertionResult same_bits(std::string_view op, int rank,
                                            std::span<const float> actual,
                                            std::span<const float> expected) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << op << " rank " << rank << ": size mismatch: actual "
                                         << actual.size() << " expected " << expected.size();
  }
  if (actual.empty() ||
      std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)) == 0) {
    return ::testing::AssertionSuccess();
  }
  std::ostringstream os;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(actual[i]) != std::bit_cast<std::uint32_t>(expected[i])) {
      if (bad < kMaxListed) {
        os << "\n  " << op << " rank " << rank << " index " << i << ": expected "
           << std::setprecision(9) << expected[i] << " (" << hex_bits(expected[i]) << ") actual "
           << actual[i] << " (" << hex_bits(actual[i]) << ")";
      }
      ++bad;
    }
  }
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements differ bitwise" << os.str();
}

/// Raw byte equality for any dtype; reports the first differing byte offset.
inline ::testing::AssertionResult same_bytes(std::string_view op, int rank, const void* actual,
                                             const void* expected, std::size_t bytes) {
  if (bytes == 0 || std::memcmp(actual, expected, bytes) == 0) {
    return ::testing::AssertionSuccess();
  }
  const auto* a = static_cast<const unsigned char*>(actual);
  const auto* e = static_cast<const unsigned char*>(expected);
  std::size_t first = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < bytes; ++i) {
    if (a[i] != e[i]) {
      if (bad == 0) first = i;
      ++bad;
    }
  }
  return ::testing::AssertionFailure()
         << op << " rank " << rank << ": " << bad << " of " << bytes
         << " bytes differ; first at byte " << first << ": expected 0x" << std::hex
         << int{e[first]} << " actual 0x" << int{a[first]};
}

/// True when every 4-byte word of `data` is `kPoisonBits` (an output nobody wrote).
inline bool all_poison(std::span<const float> data) {
  for (float v : data) {
    if (std::bit_cast<std::uint32_t>(v) != fusedcoll::kPoisonBits) return false;
  }
  return true;
}

/// Fills `v` with `kPoisonBits` words.
inline void fill_poison(std::vector<float>& v) {
  fusedcoll::poison(v.data(), v.size() * sizeof(float));
}

}  // namespace fctest
