// The programs' strict number parsing (fusedcoll/detail/cli.hpp): the whole text or an error
// naming the flag, never a prefix ("2x" as 2), an empty text as 0, or a wrapped overflow.

#include "fusedcoll/detail/cli.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace cli = fusedcoll::detail::cli;
using fusedcoll::InvalidArgument;

namespace {

std::string message_of(void (*f)()) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Cli, IntegerWholeTextInRange) {
  EXPECT_EQ(cli::parse_int("--ranks", "4", 1, 64), 4);
  EXPECT_EQ(cli::parse_int("--ranks", "+4", 1, 64), 4);
  EXPECT_EQ(cli::parse_int("--ranks", "64", 1, 64), 64);
  EXPECT_EQ(cli::parse_integer("--seed", "-3", -5, 5), -3);
  EXPECT_EQ(cli::parse_integer("--seed", "9223372036854775807", 0, INT64_MAX), INT64_MAX);
}

TEST(Cli, IntegerRejectsPrefixEmptyRangeAndOverflow) {
  for (const char* bad : {"2x", "", " 2", "2 ", "two", "0", "65", "-1", "2.0", "0x10", "+", "+-3",
                          "99999999999999999999"})
    EXPECT_THROW(cli::parse_int("--ranks", bad, 1, 64), InvalidArgument) << "'" << bad << "'";
  EXPECT_EQ(message_of([] { cli::parse_int("--ranks", "2x", 1, 64); }),
            "--ranks '2x' is not an integer in [1, 64]");
}

TEST(Cli, Number) {
  EXPECT_DOUBLE_EQ(cli::parse_number("--lr", "0.01", 0, 1), 0.01);
  EXPECT_DOUBLE_EQ(cli::parse_number("--lr", "1e-3", 0, 1), 1e-3);
  for (const char* bad : {"", "0.01x", "nan", "inf", "-0.5", "1e999", "2"})
    EXPECT_THROW(cli::parse_number("--lr", bad, 0, 1), InvalidArgument) << "'" << bad << "'";
}

TEST(Cli, Bytes) {
  EXPECT_EQ(cli::parse_bytes("-b", "1024"), 1024);
  EXPECT_EQ(cli::parse_bytes("-b", "64K"), 64 << 10);
  EXPECT_EQ(cli::parse_bytes("-b", "1.5M"), 3 << 19);
  EXPECT_EQ(cli::parse_bytes("-b", "2g"), std::int64_t{2} << 30);
  for (const char* bad : {"", "K", "1X", "1KK", "-1K", "1e30G", "nanM", "1 K"})
    EXPECT_THROW(cli::parse_bytes("-b", bad), InvalidArgument) << "'" << bad << "'";
  EXPECT_EQ(message_of([] { cli::parse_bytes("-b", "1X"); }),
            "-b '1X' is not a byte count (a number with an optional K, M or G suffix, at most "
            "2^62)");
}
