// Strict parsing of command-line numbers for fusedcoll's programs (demo, benchmarks, mnist,
// simulator). std::atoi and a bare strtol read "2x" as 2 and "" as 0, and overflow silently;
// a benchmark that quietly runs another configuration than asked reports the wrong figure, so
// every program parses its numbers here and fails on anything but the whole text.
#pragma once

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fusedcoll/error.hpp"

namespace fusedcoll::detail::cli {

/// The integer that is the whole of `text`, within [lo, hi]; InvalidArgument naming `flag`
/// otherwise (empty, trailing characters, a sign where none fits, out of range, overflow).
inline long long parse_integer(std::string_view flag, std::string_view text, long long lo,
                               long long hi) {
  long long v = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  // from_chars refuses a leading '+', which users type; "+-3" stays refused.
  const bool plus = !text.empty() && *first == '+';
  if (plus) ++first;
  const auto [end, ec] = std::from_chars(first, last, v);
  if (text.empty() || (plus && first != last && *first == '-') || ec != std::errc() ||
      end != last || v < lo || v > hi)
    throw InvalidArgument(
        make_string(flag, " '", text, "' is not an integer in [", lo, ", ", hi, "]"));
  return v;
}

/// parse_integer for an int-sized option.
inline int parse_int(std::string_view flag, std::string_view text, int lo, int hi) {
  return static_cast<int>(parse_integer(flag, text, lo, hi));
}

/// The finite number that is the whole of `text`, within [lo, hi].
inline double parse_number(std::string_view flag, std::string_view text, double lo, double hi) {
  const std::string s(text);  // strtod needs a terminated string
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v) ||
      !(v >= lo && v <= hi))
    throw InvalidArgument(
        make_string(flag, " '", text, "' is not a number in [", lo, ", ", hi, "]"));
  return v;
}

/// A byte count: a non-negative number with an optional K, M or G (powers of 1024) suffix,
/// "1.5M" included; at most 2^62 bytes so that sums of a few stay in range.
inline std::int64_t parse_bytes(std::string_view flag, std::string_view text) {
  double mul = 1;
  std::string_view digits = text;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
      case 'k':
        mul = 1024.0;
        break;
      case 'M':
      case 'm':
        mul = 1024.0 * 1024;
        break;
      case 'G':
      case 'g':
        mul = 1024.0 * 1024 * 1024;
        break;
      default:
        break;
    }
    if (mul != 1) digits.remove_suffix(1);
  }
  constexpr double kMax = 4611686018427387904.0;  // 2^62
  double v = 0;
  try {
    v = parse_number(flag, digits, 0, kMax) * mul;
  } catch (const InvalidArgument&) {
    v = -1;
  }
  if (!(v >= 0 && v <= kMax))
    throw InvalidArgument(make_string(flag, " '", text,
                                      "' is not a byte count (a number with an optional K, M or "
                                      "G suffix, at most 2^62)"));
  return static_cast<std::int64_t>(v);
}

}  // namespace fusedcoll::detail::cli
