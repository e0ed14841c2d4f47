#pragma once
/// @file
/// Helpers for the argument-checking tests: the call must throw exactly `fusedcoll::InvalidArgument`
/// (not some other `Error`, not a `std::exception`, not a crash), and its message must name the
/// offending value.

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "fusedcoll/error.hpp"

namespace fctest {

/// True when `text` contains the integer `value` as a whole number: not glued to other digits,
/// a positive value not preceded by '-', and not in the "file:LINE:" position that every
/// `FC_ENFORCE` message starts with (so a check cannot pass merely because the line number of
/// the check happens to contain the digits).
inline bool contains_number(std::string_view text, std::int64_t value) {
  const std::string needle = std::to_string(value);
  for (std::size_t pos = text.find(needle); pos != std::string_view::npos;
       pos = text.find(needle, pos + 1)) {
    const std::size_t end = pos + needle.size();
    const bool digit_before = pos > 0 && std::isdigit(static_cast<unsigned char>(text[pos - 1]));
    const bool digit_after = end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]));
    const bool minus_before = value >= 0 && pos > 0 && text[pos - 1] == '-';
    const bool line_number =
        pos > 0 && text[pos - 1] == ':' && end < text.size() && text[end] == ':';
    if (!digit_before && !digit_after && !minus_before && !line_number) return true;
  }
  return false;
}

/// What a message must mention: a whole number or a substring.
struct Mention {
  Mention(std::int64_t v) : is_number(true), number(v) {}          // NOLINT
  Mention(int v) : is_number(true), number(v) {}                   // NOLINT
  Mention(const char* s) : is_number(false), text(s) {}            // NOLINT
  Mention(std::string s) : is_number(false), text(std::move(s)) {} // NOLINT
  bool is_number;
  std::int64_t number = 0;
  std::string text;
};

/// Runs `f`; it must throw `fusedcoll::InvalidArgument` whose `what()` mentions every item of
/// `mentions`, and whose `code()` is `invalid_argument`.
template <class F>
::testing::AssertionResult throws_invalid(F&& f, std::initializer_list<Mention> mentions) {
  try {
    std::forward<F>(f)();
  } catch (const fusedcoll::InvalidArgument& e) {
    if (e.code() != fusedcoll::ErrorCode::invalid_argument) {
      return ::testing::AssertionFailure()
             << "InvalidArgument with code " << fusedcoll::to_string(e.code());
    }
    const std::string_view what = e.what();
    for (const Mention& m : mentions) {
      const bool found = m.is_number ? contains_number(what, m.number)
                                     : what.find(m.text) != std::string_view::npos;
      if (!found) {
        return ::testing::AssertionFailure()
               << "InvalidArgument thrown, but its message does not mention "
               << (m.is_number ? std::to_string(m.number) : "'" + m.text + "'") << ": \""
               << what << "\"";
      }
    }
    return ::testing::AssertionSuccess() << what;
  } catch (const fusedcoll::Error& e) {
    return ::testing::AssertionFailure()
           << "expected InvalidArgument, got fusedcoll::Error with code "
           << fusedcoll::to_string(e.code()) << ": " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure()
           << "expected InvalidArgument, got " << typeid(e).name() << ": " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "expected InvalidArgument, got a non-std exception";
  }
  return ::testing::AssertionFailure() << "expected InvalidArgument, nothing was thrown";
}

/// Runs `fn` expecting an exception of type E whose message contains every needle (the multi-rank
/// suites: hang reports, protocol errors, mismatches found on every rank).
template <class E, class F>
void expect_error(F&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception, nothing was thrown";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& n : needles)
      EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in:\n" << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace fctest

/// `EXPECT_INVALID(statement, mention...)`: the statement throws InvalidArgument mentioning each.
#define EXPECT_INVALID(stmt, ...) \
  EXPECT_TRUE(::fctest::throws_invalid([&] { stmt; }, {__VA_ARGS__}))
