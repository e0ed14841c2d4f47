// The GPU backend's collectives and device codecs (label `gpu`; every test skips where no device
// is visible). Collectives: the grids every backend runs (tests/common/collective_cases.hpp and
// compressed_cases.hpp: every count, reducible type, op, algorithm, in place, uneven counts with
// zeros, gaps between regions, special values, every wire format and scaling), each rank's whole
// memory block compared with ref/'s bit for bit, so outputs must match exactly and nothing outside
// the receive regions may change; SPMD through World::run and all ranks at once. Codecs:
// gpu/wire_codec.hpp on the device against the CPU codecs on every code and ~10^7 patterns (the
// normal suite runs the same header on the host: tests/gpu_codec_test.cpp). Errors: mismatched
// calls and non-finite scaled data are InvalidArgument on every rank, and the World stays usable.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/codec_ref.hpp"
#include "common/collective_cases.hpp"
#include "common/compressed_cases.hpp"
#include "common/errors.hpp"
#include "fusedcoll/gpu.hpp"
#include "tests/gpu/codec_probe.hpp"

namespace {

namespace fc = fusedcoll;
using namespace fctest::collectives;

#define FC_REQUIRE_GPU()                                         \
  do {                                                           \
    if (!fc::gpu::available()) GTEST_SKIP() << "no GPU visible"; \
  } while (false)

fc::gpu::WorldOptions options(int P) {
  fc::gpu::WorldOptions o;
  o.world_size = P;
  o.timeout_s = 20;
  return o;
}

/// Every rank makes every call of `cases` in order in one World::run; then ref/; then every
/// rank's block is compared.
void run_on_gpu(fc::gpu::World& gpu, Cases& cases) {
  gpu.run([&](fc::Communicator& comm) {
    for (auto& c : cases) c->on_backend(comm);
  });
  for (auto& c : cases) {
    c->on_ref();
    for (std::size_t r = 0; r < c->got.size(); ++r) {
      const std::string diff = first_difference(*c, r, "gpu");
      if (diff.empty()) continue;
      ADD_FAILURE() << diff;
      break;
    }
  }
}

class GpuCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GpuCollectives, AllReduceMatchesRef) {
  FC_REQUIRE_GPU();
  const int P = GetParam();
  fc::gpu::World gpu(options(P));
  Cases cases;
  add_all_reduce_grid(cases, P, 3 * 16384 * P + 11);
  for (ReduceOp op : kOps)
    for (AllReduceAlgo algo : kAlgos) add_special_values_all_reduce(cases, P, 50, op, algo, 900);
  run_on_gpu(gpu, cases);
}

TEST_P(GpuCollectives, AllToAllvMatchesRef) {
  FC_REQUIRE_GPU();
  const int P = GetParam();
  fc::gpu::World gpu(options(P));
  Cases cases;
  add_all_to_allv_grid(cases, P);
  run_on_gpu(gpu, cases);
}

TEST_P(GpuCollectives, ReduceScatterMatchesRef) {
  FC_REQUIRE_GPU();
  const int P = GetParam();
  fc::gpu::World gpu(options(P));
  Cases cases;
  add_reduce_scatter_grid(cases, P);
  run_on_gpu(gpu, cases);
}

TEST_P(GpuCollectives, AllGatherMatchesRef) {
  FC_REQUIRE_GPU();
  const int P = GetParam();
  fc::gpu::World gpu(options(P));
  Cases cases;
  add_all_gather_grid(cases, P);
  run_on_gpu(gpu, cases);
}

TEST_P(GpuCollectives, BroadcastMatchesRef) {
  FC_REQUIRE_GPU();
  const int P = GetParam();
  fc::gpu::World gpu(options(P));
  Cases cases;
  add_broadcast_grid(cases, P);
  run_on_gpu(gpu, cases);
}

TEST_P(GpuCollectives, CompressedMatchesRef) {
  FC_REQUIRE_GPU();
  const int P = GetParam();
  fc::gpu::World gpu(options(P));
  Cases cases;
  add_compressed(cases, P, 1000);
  add_compressed_large(cases, P, 2000);
  run_on_gpu(gpu, cases);
}

TEST_P(GpuCollectives, CompressedChainMatchesRef) {
  FC_REQUIRE_GPU();
  const int P = GetParam();
  fc::gpu::World gpu(options(P));
  Cases cases;
  add_compressed_chain(cases, P, 3000);
  run_on_gpu(gpu, cases);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GpuCollectives, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& p) { return std::to_string(p.param) + "ranks"; });

// The all-ranks-at-once form, as ref:: takes it, and a kernel time.
TEST(GpuCollectivesApi, AllRanksAtOnce) {
  FC_REQUIRE_GPU();
  const int P = 4;
  const std::int64_t n = 100003;
  std::vector<std::vector<float>> send(P, std::vector<float>(n)), got(P, std::vector<float>(n)),
      want(P, std::vector<float>(n));
  for (int r = 0; r < P; ++r)
    fc::fill_values(send[r].data(), n, DType::f32, 7, 1, r, ValueMode::random);
  for (AllReduceAlgo algo : kAlgos) {
    std::vector<fc::AllReduceArgs> a(P), b(P);
    for (int r = 0; r < P; ++r) {
      a[r] = {send[r].data(), got[r].data(), n, DType::f32, ReduceOp::sum, algo};
      b[r] = {send[r].data(), want[r].data(), n, DType::f32, ReduceOp::sum, algo};
    }
    fc::gpu::World gpu(options(P));
    gpu.all_reduce(a);
    fc::ref::all_reduce(b);
    EXPECT_GT(gpu.last_kernel_ms(), 0.0);
    for (int r = 0; r < P; ++r)
      EXPECT_EQ(std::memcmp(got[r].data(), want[r].data(), n * 4), 0)
          << to_string(algo) << " rank " << r;
  }
}

// A mismatch is InvalidArgument on every rank before anything moves, and scaled data holding an
// infinity is InvalidArgument too (no scale represents it); the World is usable afterwards (no
// slot was left expecting a signal that never came).
TEST(GpuCollectivesApi, ErrorsLeaveTheWorldUsable) {
  FC_REQUIRE_GPU();
  const int P = 3;
  fc::gpu::World gpu(options(P));
  std::vector<std::vector<float>> send(P, std::vector<float>(64, 1.0f)),
      recv(P, std::vector<float>(64));
  EXPECT_THROW(gpu.run([&](fc::Communicator& comm) {
    const int r = comm.rank();
    fc::all_reduce(comm, {send[r].data(), recv[r].data(), r == 1 ? 63 : 64, DType::f32});
  }),
               fc::InvalidArgument);
  send[2][5] = INFINITY;
  EXPECT_THROW(gpu.run([&](fc::Communicator& comm) {
    const int r = comm.rank();
    fc::AllReduceArgs a{send[r].data(), recv[r].data(), 64, DType::f32};
    a.wire.format = fc::WireFormat::fp8_e4m3;
    fc::all_reduce(comm, a);
  }),
               fc::InvalidArgument);
  send[2][5] = 1.0f;
  gpu.run([&](fc::Communicator& comm) {
    const int r = comm.rank();
    fc::AllReduceArgs a{send[r].data(), recv[r].data(), 64, DType::f32};
    a.wire.format = fc::WireFormat::fp8_e4m3;
    fc::all_reduce(comm, a);
  });
  // Against ref/, not 3.0: the scale leaves room for the sum of P ranks (448 / 3), where 1.0 is
  // not an E4M3 code, so ref/'s answer is 416 / (448 / 3) = 2.7857...
  std::vector<std::vector<float>> want(P, std::vector<float>(64));
  std::vector<fc::AllReduceArgs> args;
  for (int r = 0; r < P; ++r) {
    args.push_back({send[r].data(), want[r].data(), 64, DType::f32});
    args.back().wire.format = fc::WireFormat::fp8_e4m3;
  }
  fc::ref::all_reduce(args);
  for (int r = 0; r < P; ++r)
    EXPECT_EQ(std::memcmp(recv[r].data(), want[r].data(), 64 * 4), 0) << "rank " << r;
}

// A size no memory can have is InvalidArgument naming the field, from the host-side checks,
// before anything is uploaded (tests/errors_test.cpp has every case on the shared checks).
TEST(GpuCollectivesApi, ImpossibleSizesAreInvalidArguments) {
  FC_REQUIRE_GPU();
  const int P = 2;
  const std::int64_t huge = std::int64_t{1} << 62;  // 2^62 f32 = 2^64 bytes
  fc::gpu::World gpu(options(P));
  std::vector<float> s(8), r(8);
  EXPECT_INVALID(gpu.run([&](fc::Communicator& comm) {
    fc::all_reduce(comm, {s.data(), r.data(), huge, DType::f32});
  }),
                 "AllReduce count", huge);
  EXPECT_INVALID(gpu.run([&](fc::Communicator& comm) {
    fc::all_to_allv(comm, {s.data(), r.data(), {2, 2}, {0, huge}, {2, 2}, {0, 2}, DType::f32});
  }),
                 "send_displs[1]", huge);
}

// --- The device codecs --------------------------------------------------------------------------

class GpuDeviceCodec : public ::testing::TestWithParam<const fctest::CodecFormat*> {};

TEST_P(GpuDeviceCodec, EveryCodeDecodesToTheCpuBits) {
  FC_REQUIRE_GPU();
  const fctest::CodecFormat& f = *GetParam();
  const std::vector<std::uint32_t> got =
      fc::gpu::testing::device_decode_all(static_cast<int>(f.wire));
  ASSERT_EQ(got.size(), std::size_t{1} << f.bits);
  for (std::uint32_t c = 0; c < got.size(); ++c)
    ASSERT_EQ(got[c], std::bit_cast<std::uint32_t>(fctest::lib_decode(f, c)))
        << f.name << " code " << c;
}

TEST_P(GpuDeviceCodec, EncodeEqualsTheCpuOnTenMillionPatterns) {
  FC_REQUIRE_GPU();
  const fctest::CodecFormat& f = *GetParam();
  const auto& p = fctest::patterns();
  std::vector<float> x(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) x[i] = std::bit_cast<float>(p[i]);
  for (fc::Overflow o : {fc::Overflow::saturate, fc::Overflow::ieee}) {
    std::vector<std::uint32_t> codes, back;
    fc::gpu::testing::device_codec(static_cast<int>(f.wire), o == fc::Overflow::saturate, 0, x,
                                   codes, back);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint32_t want = fctest::lib_encode(f, x[i], o);
      const std::uint32_t want_back = std::bit_cast<std::uint32_t>(fctest::lib_decode(f, want));
      if ((codes[i] != want || back[i] != want_back) && wrong++ < 5)
        ADD_FAILURE() << f.name << " " << to_string(o) << " x=0x" << std::hex << p[i] << ": gpu 0x"
                      << codes[i] << " cpu 0x" << want;
    }
    EXPECT_EQ(wrong, 0) << f.name << " " << to_string(o);
  }
}

TEST_P(GpuDeviceCodec, ScaledEqualsTheCpuBatchCodecs) {
  FC_REQUIRE_GPU();
  const fctest::CodecFormat& f = *GetParam();
  const auto& all = fctest::patterns();
  std::vector<float> x(1'000'000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::bit_cast<float>(all[i]);
  const std::size_t wb = fc::wire_size(f.wire);
  for (float scale : {0.25f, 3.0f, 0x1p-20f, 1.0e6f, 0.7f}) {
    std::vector<unsigned char> cpu(x.size() * wb);
    fc::encode_scaled(f.wire, x.data(), cpu.data(), static_cast<std::int64_t>(x.size()), scale);
    std::vector<float> cpu_back(x.size());
    fc::decode_scaled(f.wire, cpu.data(), cpu_back.data(), static_cast<std::int64_t>(x.size()),
                      scale);
    std::vector<std::uint32_t> codes, back;
    fc::gpu::testing::device_codec(static_cast<int>(f.wire), true, scale, x, codes, back);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint32_t want =
          wb == 2 ? reinterpret_cast<const std::uint16_t*>(cpu.data())[i] : cpu[i];
      if ((codes[i] != want || back[i] != std::bit_cast<std::uint32_t>(cpu_back[i])) && wrong++ < 5)
        ADD_FAILURE() << f.name << " scale " << scale << " x=0x" << std::hex << all[i];
    }
    EXPECT_EQ(wrong, 0) << f.name << " scale " << scale;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GpuDeviceCodec,
                         ::testing::Values(&fctest::kF16, &fctest::kBF16, &fctest::kE4M3,
                                           &fctest::kE5M2),
                         [](const auto& p) { return std::string(p.param->name); });

}  // namespace
