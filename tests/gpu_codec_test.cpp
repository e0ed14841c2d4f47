// The GPU backend's wire codecs (gpu/wire_codec.hpp, `__host__ __device__`), built here by the
// host compiler, against the CPU codecs (core/codec.cpp) bit for bit: every 8- and 16-bit code
// decoded, about 10^7 f32 patterns encoded per format and overflow mode (every exponent with
// rounding-relevant mantissas, every halfway point between codes and its neighbours, the overflow
// thresholds, zeros, infinities, NaN payloads, subnormals, random bits), and the scaled forms
// against encode_scaled / decode_scaled. The `gpu` suite runs the same comparison on a device
// (tests/gpu/gpu_collectives_test.cpp); this one runs on every machine.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/codec_ref.hpp"
#include "fusedcoll/compression.hpp"
#include "gpu/wire_codec.hpp"

namespace {

namespace codec = fusedcoll::gpu::codec;
using fctest::CodecFormat;
using fusedcoll::Overflow;

std::string hex(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

int device_format(const CodecFormat& f) { return static_cast<int>(f.wire); }

class GpuCodec : public ::testing::TestWithParam<const CodecFormat*> {};

TEST_P(GpuCodec, EveryCodeDecodesToTheCpuBits) {
  const CodecFormat& f = *GetParam();
  for (std::uint32_t c = 0; c < (1u << f.bits); ++c) {
    const std::uint32_t want = std::bit_cast<std::uint32_t>(fctest::lib_decode(f, c));
    const std::uint32_t got = std::bit_cast<std::uint32_t>(codec::decode(device_format(f), c));
    ASSERT_EQ(got, want) << f.name << " code " << hex(c);
  }
}

TEST_P(GpuCodec, EncodeEqualsTheCpuOnTenMillionPatterns) {
  const CodecFormat& f = *GetParam();
  const auto& p = fctest::patterns();
  ASSERT_GE(p.size(), 10'000'000u);
  for (Overflow o : {Overflow::saturate, Overflow::ieee}) {
    std::int64_t wrong = 0;
    for (std::uint32_t u : p) {
      const float x = std::bit_cast<float>(u);
      const std::uint32_t want = fctest::lib_encode(f, x, o);
      const std::uint32_t got = codec::encode(device_format(f), x, o == Overflow::saturate);
      if (got != want && wrong++ < 5)
        ADD_FAILURE() << f.name << " " << to_string(o) << " x=" << hex(u) << " (" << x << "): gpu "
                      << hex(got) << ", cpu " << hex(want);
    }
    EXPECT_EQ(wrong, 0) << f.name << " " << to_string(o);
  }
}

// The batch CPU codecs (what ref/ and the emulator encode with) and the GPU's scaled codec
// agree: product rounded before encoding, IEEE division after decoding, for power-of-two and
// other scales, including ones that push values into overflow and into the subnormals.
TEST_P(GpuCodec, ScaledFormsEqualTheCpuBatchCodecs) {
  const CodecFormat& f = *GetParam();
  const auto& all = fctest::patterns();
  const std::vector<std::uint32_t> p(all.begin(), all.begin() + 1'000'000);
  std::vector<float> x(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) x[i] = std::bit_cast<float>(p[i]);
  const std::size_t wb = fusedcoll::wire_size(f.wire);
  for (float scale : {0.25f, 3.0f, 0x1p-20f, 1.0e6f, 0.7f}) {
    for (Overflow o : {Overflow::saturate, Overflow::ieee}) {
      std::vector<unsigned char> codes(x.size() * wb);
      fusedcoll::encode_scaled(f.wire, x.data(), codes.data(), static_cast<std::int64_t>(x.size()),
                               scale, o);
      std::vector<float> back(x.size());
      fusedcoll::decode_scaled(f.wire, codes.data(), back.data(),
                               static_cast<std::int64_t>(x.size()), scale);
      const float scales[] = {scale};
      codec::Wire w{device_format(f), o == Overflow::saturate, 0, scales};
      std::int64_t wrong = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::uint32_t want = w.load(codes.data(), static_cast<std::int64_t>(i));
        const std::uint32_t got = w.encode_at(x[i], 0);
        const std::uint32_t want_back = std::bit_cast<std::uint32_t>(back[i]);
        const std::uint32_t got_back = std::bit_cast<std::uint32_t>(w.decode_at(want, 0));
        if ((got != want || got_back != want_back) && wrong++ < 5)
          ADD_FAILURE() << f.name << " scale " << scale << " " << to_string(o) << " x=" << hex(p[i])
                        << ": gpu code " << hex(got) << " / cpu " << hex(want) << ", gpu decoded "
                        << hex(got_back) << " / cpu " << hex(want_back);
      }
      EXPECT_EQ(wrong, 0) << f.name << " scale " << scale;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GpuCodec,
                         ::testing::Values(&fctest::kF16, &fctest::kBF16, &fctest::kE4M3,
                                           &fctest::kE5M2),
                         [](const auto& p) { return std::string(p.param->name); });

// The per-block scale lookup: element i uses block i / block, and an unscaled wire none.
TEST(GpuCodecWire, ScaleIndexing) {
  const float scales[] = {1.0f, 2.0f, 4.0f};
  const codec::Wire per_block{codec::kE4m3, true, 10, scales};
  EXPECT_EQ(per_block.scale_at(0), 1.0f);
  EXPECT_EQ(per_block.scale_at(9), 1.0f);
  EXPECT_EQ(per_block.scale_at(10), 2.0f);
  EXPECT_EQ(per_block.scale_at(29), 4.0f);
  const codec::Wire per_tensor{codec::kE4m3, true, 0, scales + 2};
  EXPECT_EQ(per_tensor.scale_at(12345), 4.0f);
  const codec::Wire unscaled{codec::kF16, true, 0, nullptr};
  EXPECT_EQ(unscaled.round_trip(1.0f / 3.0f, 7),
            fusedcoll::f16_to_f32(fusedcoll::f32_to_f16(1.0f / 3.0f)));
}

}  // namespace
