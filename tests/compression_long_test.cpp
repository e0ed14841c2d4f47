// All 2^32 f32 bit patterns through every encoder (ctest label `long`, not in the default run:
// about 13 core-minutes; threads split the range). For every format and overflow mode, each
// pattern's scalar code must decode to the value of the independent reference
// (tests/common/codec_ref.hpp), the batch code (the dispatched instruction set) must equal the
// scalar code bit for bit, and for the 16-bit formats the code must equal Eigen's (IEEE overflow;
// for NaN inputs only NaN-ness is compared, Eigen does not keep payloads).
//
//   ctest --test-dir build -L long --output-on-failure

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/codec_ref.hpp"
#include "fusedcoll/compression.hpp"

namespace {

using fctest::CodecFormat;
using fusedcoll::Overflow;

constexpr std::uint64_t kChunk = 1u << 20;

/// Checks patterns [begin, begin + kChunk); returns a description of the first mismatch or "".
std::string check_chunk(const CodecFormat& f, Overflow o, std::uint64_t begin) {
  std::vector<float> in(kChunk);
  for (std::uint64_t i = 0; i < kChunk; ++i)
    in[i] = std::bit_cast<float>(static_cast<std::uint32_t>(begin + i));
  const std::size_t elem = fusedcoll::wire_size(f.wire);
  std::vector<std::byte> out(kChunk * elem);
  fusedcoll::encode(f.wire, in.data(), out.data(), static_cast<std::int64_t>(kChunk), o);
  for (std::uint64_t i = 0; i < kChunk; ++i) {
    const float x = in[i];
    const std::uint32_t scalar = fctest::lib_encode(f, x, o);
    std::uint32_t batch = 0;
    std::memcpy(&batch, &out[i * elem], elem);
    bool eigen_ok = true;
    std::uint16_t eigen = 0;
    if (o == Overflow::ieee && (f.wire == fusedcoll::WireFormat::f16 ||
                                f.wire == fusedcoll::WireFormat::bf16)) {
      eigen = f.wire == fusedcoll::WireFormat::f16
                  ? Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(x))
                  : Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(x));
      eigen_ok = std::isnan(x) ? std::isnan(fctest::lib_decode(f, eigen)) : eigen == scalar;
    }
    const bool ref_ok =
        fctest::same_value(fctest::encode_ref(f, x, o), fctest::lib_decode(f, scalar));
    if (batch == scalar && ref_ok && eigen_ok) [[likely]]
      continue;
    std::ostringstream os;  // only on failure: a stream per element would dominate the run time
    os << f.name << " " << to_string(o) << " x bits 0x" << std::hex << (begin + i) << std::dec
       << ": ";
    if (batch != scalar) os << "batch " << batch << " != scalar " << scalar;
    else if (!ref_ok) os << "code " << scalar << " is not the reference value";
    else os << "Eigen gives " << eigen << ", fusedcoll " << scalar;
    return os.str();
  }
  return {};
}

TEST(CodecsExhaustive, AllF32PatternsEveryFormatAndOverflowMode) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (const CodecFormat* f : fctest::kAllFormats)
    for (Overflow o : {Overflow::saturate, Overflow::ieee}) {
      std::atomic<std::uint64_t> next{0};
      std::mutex m;
      std::string first_failure;
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < threads; ++t)
        pool.emplace_back([&] {
          for (std::uint64_t c; (c = next.fetch_add(1)) < (std::uint64_t{1} << 32) / kChunk;) {
            const std::string why = check_chunk(*f, o, c * kChunk);
            if (!why.empty()) {
              std::lock_guard lock(m);
              if (first_failure.empty()) first_failure = why;
              next = std::uint64_t{1} << 32;  // stop early
            }
          }
        });
      for (auto& t : pool) t.join();
      EXPECT_EQ(first_failure, "") << f->name << " " << to_string(o);
    }
}

}  // namespace
