// The MNIST IDX loader: round trips (raw and gzip), every validation error, and a fuzz test of
// random truncations and byte flips that must end in a parsed file or an InvalidArgument, never a
// crash (scripts/test.sh runs it under ASan and UBSan).

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "common/mnist_fixtures.hpp"
#include "mnist/idx.hpp"
#include "mnist/layers.hpp"

namespace fs = std::filesystem;
namespace mn = fusedcoll::mnist;

namespace {

using Bytes = std::vector<std::uint8_t>;

mn::Dataset small_set(int count, std::uint64_t seed) {
  mn::Rng rng(seed);
  mn::Dataset s;
  s.rows = s.cols = 28;
  for (int i = 0; i < count * 784; ++i) s.pixels.push_back(static_cast<std::uint8_t>(rng.next()));
  for (int i = 0; i < count; ++i) s.labels.push_back(static_cast<std::uint8_t>(rng.below(10)));
  return s;
}

Bytes gzip(const Bytes& in) {
  uLongf size = compressBound(static_cast<uLong>(in.size())) + 64;
  Bytes out(size);
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

void write(const fs::path& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

using fctest::TempDir;

}  // namespace

TEST(MnistIdx, RoundTripRawAndGzip) {
  const auto set = small_set(5, 1);
  TempDir dir;
  mn::save_mnist(set, dir.path(), "train");
  const auto raw = mn::load_mnist(dir.path(), "train");
  EXPECT_EQ(raw.pixels, set.pixels);
  EXPECT_EQ(raw.labels, set.labels);
  EXPECT_EQ(raw.rows, 28);

  // Only .gz files present: the loader must find and inflate them.
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
    const Bytes b = mn::read_file_bytes(dir.path() / name);
    write(dir.path() / (std::string(name) + ".gz"), gzip(b));
    fs::remove(dir.path() / name);
  }
  const auto gz = mn::load_mnist(dir.path(), "train");
  EXPECT_EQ(gz.pixels, set.pixels);
  EXPECT_EQ(gz.labels, set.labels);
}

TEST(MnistIdx, HeaderIsBigEndian) {
  const Bytes b = mn::encode_idx({2, 3}, {1, 2, 3, 4, 5, 6});
  const Bytes expect = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
  EXPECT_EQ(b, expect);
  const auto a = mn::parse_idx(b, "x");
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{2, 3}));
  // 0x00000803 images of 60000 x 28 x 28: the exact header of the official file.
  const Bytes official = {0, 0, 8, 3, 0, 0, 0xea, 0x60, 0, 0, 0, 28, 0, 0, 0, 28};
  EXPECT_INVALID(mn::parse_idx(official, "train-images"), "payload length", "47040000");
}

TEST(MnistIdx, RejectsMalformedFiles) {
  const Bytes good = mn::encode_idx({2, 2}, {1, 2, 3, 4});
  EXPECT_NO_THROW(mn::parse_idx(good, "f"));
  EXPECT_INVALID(mn::parse_idx({}, "f"), "too short");
  EXPECT_INVALID(mn::parse_idx({0, 0, 8}, "f"), "too short");
  Bytes b = good;
  b[0] = 1;
  EXPECT_INVALID(mn::parse_idx(b, "f"), "magic");
  b = good;
  b[2] = 0x0d;  // float
  EXPECT_INVALID(mn::parse_idx(b, "f"), "unsigned byte");
  b = good;
  b[3] = 0;
  EXPECT_INVALID(mn::parse_idx(b, "f"), "0 dimensions");
  b = good;
  b[3] = 4;
  EXPECT_INVALID(mn::parse_idx(b, "f"), "4 dimensions");
  b = good;
  b[7] = 0;  // first dimension 0
  EXPECT_INVALID(mn::parse_idx(b, "f"), "dimension 0 is zero");
  b = good;
  b.pop_back();
  EXPECT_INVALID(mn::parse_idx(b, "name-of-file"), "name-of-file", "truncated");
  b = good;
  b.push_back(0);
  EXPECT_INVALID(mn::parse_idx(b, "f"), "payload length");
  b = Bytes(good.begin(), good.begin() + 10);
  EXPECT_INVALID(mn::parse_idx(b, "f"), "truncated IDX header");
  b = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_INVALID(mn::parse_idx(b, "f"), "implausibly large");
}

TEST(MnistIdx, RejectsInconsistentPairs) {
  const auto images = mn::parse_idx(mn::encode_idx({3, 28, 28}, Bytes(3 * 784, 0)), "i");
  const auto labels = mn::parse_idx(mn::encode_idx({3}, {1, 2, 3}), "l");
  EXPECT_NO_THROW(mn::make_dataset(images, labels, "s"));
  EXPECT_INVALID(mn::make_dataset(images, mn::parse_idx(mn::encode_idx({2}, {1, 2}), "l"), "s"),
                 "counts differ", 3, 2);
  EXPECT_INVALID(mn::make_dataset(images, mn::parse_idx(mn::encode_idx({3}, {1, 10, 3}), "l"), "s"),
                 "label 1 is not a digit");
  EXPECT_INVALID(mn::make_dataset(labels, labels, "s"), "3 dimensions");
  EXPECT_INVALID(mn::make_dataset(images, images, "s"), "1 dimension");
  EXPECT_INVALID(mn::make_dataset(mn::parse_idx(mn::encode_idx({1, 32, 32}, Bytes(1024, 0)), "i"),
                                  mn::parse_idx(mn::encode_idx({1}, {0}), "l"), "s"),
                 "32x32");
}

TEST(MnistIdx, MissingAndCorruptFiles) {
  TempDir dir;
  EXPECT_INVALID(mn::load_mnist(dir.path(), "train"), "missing MNIST file", "get-mnist");
  EXPECT_INVALID(mn::read_file_bytes(dir.path() / "nope"), "cannot open");
  const Bytes idx = mn::encode_idx({4, 28, 28}, Bytes(4 * 784, 7));
  Bytes gz = gzip(idx);
  write(dir.path() / "t.gz",
        Bytes(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2)));
  EXPECT_INVALID(mn::read_file_bytes(dir.path() / "t.gz"), "truncated gzip stream");
  gz[12] ^= 0xff;
  gz[13] ^= 0xff;
  write(dir.path() / "c.gz", gz);
  EXPECT_INVALID(mn::read_file_bytes(dir.path() / "c.gz"), "gzip");
}

// Random truncations and byte flips, raw and gzip: every outcome is either a successful parse
// (a flip in the pixels, say) or an InvalidArgument. Anything else - another exception type, a
// crash, an ASan report - fails.
TEST(MnistIdx, FuzzTruncationsAndFlips) {
  const auto set = small_set(3, 2);
  const Bytes images = mn::encode_idx({set.size(), 28, 28}, set.pixels);
  const Bytes labels = mn::encode_idx({set.size()}, set.labels);
  const Bytes images_gz = gzip(images);
  const Bytes labels_gz = gzip(labels);
  mn::Rng rng(3);
  int parsed = 0;
  int rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const bool use_images = iter % 2 == 0;
    const bool compressed = iter % 3 == 0;
    Bytes b = compressed ? (use_images ? images_gz : labels_gz) : (use_images ? images : labels);
    const int kind = static_cast<int>(rng.below(3));
    if (kind == 0 || kind == 2) b.resize(static_cast<std::size_t>(rng.below(b.size() + 1)));
    if (kind >= 1 && !b.empty()) {
      const int flips = 1 + static_cast<int>(rng.below(4));
      // Bias the flips toward the headers, where they matter most.
      for (int f = 0; f < flips; ++f) {
        const std::size_t at =
            rng.below(2) ? rng.below(std::min<std::size_t>(b.size(), 20)) : rng.below(b.size());
        b[at] ^= static_cast<std::uint8_t>(1 + rng.below(255));
      }
    }
    // In memory: the file path is covered above, and thousands of file writes are slow.
    try {
      const auto a = mn::parse_idx(mn::maybe_gunzip(b, "fuzz"), "fuzz");
      const auto other = use_images ? mn::parse_idx(labels, "l") : mn::parse_idx(images, "i");
      mn::make_dataset(use_images ? a : other, use_images ? other : a, "fuzz");
      ++parsed;
    } catch (const fusedcoll::InvalidArgument&) {
      ++rejected;
    }
  }
  // Both outcomes must occur, or the mutations are not exercising the checks.
  EXPECT_GT(parsed, 50);
  EXPECT_GT(rejected, 1000);
}
