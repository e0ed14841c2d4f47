// Process mode's entry exchange on the CPU (gpu/agreement_codec.hpp): a call's global fields as
// bytes and back, for every operator and collective, so that the GPU's ranks compare exactly what
// the single-GPU mode compares in memory; a field that differs after the round trip must still be
// caught by check_consistent, and a malformed record must be an error, not a silent default.

#include <gtest/gtest.h>

#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/gemv_allreduce.hpp"
#include "gpu/agreement_codec.hpp"

namespace {

namespace fc = fusedcoll;
using fusedcoll::gpu::decode_agreed;
using fusedcoll::gpu::encode_agreed;

TEST(GpuAgreementCodec, EmbeddingRoundTripAndMismatch) {
  fc::EmbeddingAllToAllArgs a;
  a.dim = 37;
  a.pooling = fc::PoolingMode::mean;
  a.owner = {2, 0, 1, 2, 2};
  a.batch_sizes = {5, 0, 9};
  const auto b = decode_agreed<fc::EmbeddingAllToAllArgs>(encode_agreed(a));
  EXPECT_EQ(b.dim, 37);
  EXPECT_EQ(b.pooling, fc::PoolingMode::mean);
  EXPECT_EQ(b.owner, a.owner);
  EXPECT_EQ(b.batch_sizes, a.batch_sizes);
  EXPECT_NO_THROW(fc::check_consistent(a, 0, b, 1));
  auto c = b;
  c.owner[3] = 1;
  EXPECT_THROW(fc::check_consistent(a, 0, c, 1), fc::InvalidArgument);
}

TEST(GpuAgreementCodec, WireOptionsTravelFieldByField) {
  fc::AllReduceArgs a;
  a.count = 1001;
  a.dtype = fc::DType::f32;
  a.op = fc::ReduceOp::max;
  a.algo = fc::AllReduceAlgo::ring;
  a.wire.format = fc::WireFormat::fp8_e4m3;
  a.wire.scaling = fc::Scaling::per_block;
  a.wire.block = 64;
  a.wire.pow2_scale = true;
  a.wire.predivide = true;
  const auto b = decode_agreed<fc::AllReduceArgs>(encode_agreed(a));
  EXPECT_EQ(b.count, 1001);
  EXPECT_EQ(b.op, fc::ReduceOp::max);
  EXPECT_EQ(b.algo, fc::AllReduceAlgo::ring);
  EXPECT_EQ(b.wire.format, fc::WireFormat::fp8_e4m3);
  EXPECT_EQ(b.wire.scaling, fc::Scaling::per_block);
  EXPECT_EQ(b.wire.block, 64);
  EXPECT_TRUE(b.wire.pow2_scale);
  EXPECT_TRUE(b.wire.predivide);
  EXPECT_NO_THROW(fc::check_consistent(a, 0, b, 1));
}

TEST(GpuAgreementCodec, ExchangedCountsTravelToo) {
  std::vector<float> x(12), y(12);
  const fc::AllToAllvArgs a = fc::make_alltoall(x.data(), y.data(), 3, fc::DType::f32, 4);
  const auto b = decode_agreed<fc::AllToAllvArgs>(encode_agreed(a));
  EXPECT_EQ(b.send_counts, a.send_counts);
  EXPECT_EQ(b.recv_counts, a.recv_counts);
  EXPECT_NO_THROW(fc::check_consistent(a, 0, b, 1));
}

TEST(GpuAgreementCodec, GemmAndGemvRoundTrip) {
  fc::GemmAllToAllArgs g;
  g.k = 8;
  g.n = 5;
  g.host = {0, 1, 1};
  g.counts = {1, 2, 3, 4, 5, 6};
  const auto g2 = decode_agreed<fc::GemmAllToAllArgs>(encode_agreed(g));
  EXPECT_EQ(g2.host, g.host);
  EXPECT_EQ(g2.counts, g.counts);
  EXPECT_EQ(encode_agreed(g2), encode_agreed(g));
  fc::GemvAllReduceArgs v;
  const auto v2 = decode_agreed<fc::GemvAllReduceArgs>(encode_agreed(v));
  EXPECT_EQ(encode_agreed(v2), encode_agreed(v));
}

TEST(GpuAgreementCodec, MalformedRecordsAreErrors) {
  fc::EmbeddingAllToAllArgs a;
  a.dim = 4;
  a.owner = {0, 1};
  a.batch_sizes = {2, 2};
  const std::string bytes = encode_agreed(a);
  EXPECT_THROW(decode_agreed<fc::EmbeddingAllToAllArgs>(bytes.substr(0, bytes.size() - 3)),
               fc::InternalError);
  EXPECT_THROW(decode_agreed<fc::EmbeddingAllToAllArgs>(bytes + "extra"), fc::InternalError);
  std::string huge = bytes;
  const std::int64_t n = std::int64_t{1} << 40;  // the owner list's length, absurd
  std::memcpy(huge.data() + 16, &n, sizeof n);
  EXPECT_THROW(decode_agreed<fc::EmbeddingAllToAllArgs>(huge), fc::InternalError);
}

}  // namespace
