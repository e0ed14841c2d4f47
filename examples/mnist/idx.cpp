#include "mnist/idx.hpp"

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "fusedcoll/error.hpp"

namespace fusedcoll::mnist {
namespace {

using detail::make_string;

constexpr std::uint8_t kUnsignedByte = 0x08;
// The largest MNIST-like file we accept once inflated; a gzip bomb or a corrupt length must not
// turn into an out-of-memory kill.
constexpr std::size_t kMaxBytes = std::size_t{1} << 30;

std::uint32_t read_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

void append_be32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& in, const std::string& what) {
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  // 15 + 16: a gzip wrapper (not zlib, not raw deflate) with the largest window.
  FC_ENFORCE(inflateInit2(&zs, 15 + 16) == Z_OK, what, ": zlib inflateInit2 failed");
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> chunk(std::size_t{1} << 16);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = chunk.data();
    zs.avail_out = static_cast<uInt>(chunk.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    const std::size_t produced = chunk.size() - zs.avail_out;
    if (rc != Z_OK && rc != Z_STREAM_END) {
      // Z_BUF_ERROR with input exhausted is a truncated stream, anything else corrupt data.
      const std::string reason =
          (rc == Z_BUF_ERROR && zs.avail_in == 0)
              ? std::string("truncated gzip stream")
              : make_string("corrupt gzip stream (", zs.msg ? zs.msg : "zlib error ", rc, ")");
      inflateEnd(&zs);
      throw InvalidArgument(make_string(what, ": ", reason));
    }
    if (out.size() + produced > kMaxBytes) {
      inflateEnd(&zs);
      throw InvalidArgument(make_string(what, ": inflates to more than ", kMaxBytes, " bytes"));
    }
    out.insert(out.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(produced));
  }
  inflateEnd(&zs);
  return out;
}

}  // namespace

IdxArray parse_idx(const std::vector<std::uint8_t>& bytes, const std::string& what) {
  FC_ENFORCE_GE(bytes.size(), std::size_t{4}, what, ": too short for an IDX header");
  FC_ENFORCE(bytes[0] == 0 && bytes[1] == 0, what,
             ": bad IDX magic (first two bytes must be 0, got ", int{bytes[0]}, " ", int{bytes[1]},
             ")");
  FC_ENFORCE_EQ(int{bytes[2]}, int{kUnsignedByte}, what, ": IDX element type is not unsigned byte");
  const int ndims = bytes[3];
  FC_ENFORCE(ndims >= 1 && ndims <= 3, what, ": IDX has ", ndims, " dimensions (expected 1 to 3)");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  FC_ENFORCE_GE(bytes.size(), header, what, ": truncated IDX header");
  IdxArray out;
  std::uint64_t expected = 1;
  for (int d = 0; d < ndims; ++d) {
    const std::uint32_t n = read_be32(bytes.data() + 4 + 4 * d);
    FC_ENFORCE_GT(n, 0u, what, ": IDX dimension ", d, " is zero");
    expected *= n;
    FC_ENFORCE_LE(expected, std::uint64_t{kMaxBytes}, what,
                  ": IDX dimensions are implausibly large");
    out.dims.push_back(n);
  }
  FC_ENFORCE_EQ(bytes.size() - header, expected, what,
                ": IDX payload length does not match its dimensions (truncated or padded file)");
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  FC_ENFORCE(in.good(), "cannot open ", path.string());
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  FC_ENFORCE(!in.bad(), "error reading ", path.string());
  return maybe_gunzip(std::move(bytes), path.string());
}

std::vector<std::uint8_t> maybe_gunzip(std::vector<std::uint8_t> bytes, const std::string& what) {
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return gunzip(bytes, what);
  return bytes;
}

Dataset make_dataset(const IdxArray& images, const IdxArray& labels, const std::string& what) {
  FC_ENFORCE_EQ(images.dims.size(), std::size_t{3}, what,
                ": the image file must have 3 dimensions");
  FC_ENFORCE_EQ(labels.dims.size(), std::size_t{1}, what, ": the label file must have 1 dimension");
  FC_ENFORCE_EQ(images.dims[0], labels.dims[0], what, ": image and label counts differ");
  // The network's geometry (two 5x5 convolutions, two 2x2 pools, 320 features) fixes 28x28.
  FC_ENFORCE(images.dims[1] == 28 && images.dims[2] == 28, what, ": images are ", images.dims[1],
             "x", images.dims[2], ", the model needs 28x28");
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    FC_ENFORCE_LT(int{labels.data[i]}, 10, what, ": label ", i, " is not a digit");
  Dataset set;
  set.rows = static_cast<int>(images.dims[1]);
  set.cols = static_cast<int>(images.dims[2]);
  set.pixels = images.data;
  set.labels = labels.data;
  return set;
}

namespace {
std::filesystem::path pick(const std::filesystem::path& dir, const std::string& name) {
  const auto raw = dir / name;
  if (std::filesystem::exists(raw)) return raw;
  const auto gz = dir / (name + ".gz");
  if (std::filesystem::exists(gz)) return gz;
  throw InvalidArgument(make_string("missing MNIST file ", raw.string(),
                                    " (or .gz); run scripts/get-mnist "
                                    "or pass --data-dir with the IDX files"));
}
}  // namespace

Dataset load_mnist(const std::filesystem::path& dir, const std::string& prefix) {
  const auto image_path = pick(dir, prefix + "-images-idx3-ubyte");
  const auto label_path = pick(dir, prefix + "-labels-idx1-ubyte");
  return make_dataset(parse_idx(read_file_bytes(image_path), image_path.string()),
                      parse_idx(read_file_bytes(label_path), label_path.string()),
                      (dir / prefix).string());
}

std::vector<std::uint8_t> encode_idx(const std::vector<std::int64_t>& dims,
                                     const std::vector<std::uint8_t>& data) {
  FC_ENFORCE(!dims.empty() && dims.size() <= 3, "IDX needs 1 to 3 dimensions, got ", dims.size());
  std::vector<std::uint8_t> out{0, 0, kUnsignedByte, static_cast<std::uint8_t>(dims.size())};
  std::int64_t n = 1;
  for (const auto d : dims) {
    FC_ENFORCE(d > 0 && d <= 0xffffffffLL, "IDX dimension out of range: ", d);
    append_be32(out, static_cast<std::uint32_t>(d));
    n *= d;
  }
  FC_ENFORCE_EQ(static_cast<std::int64_t>(data.size()), n, "IDX data length vs dimensions");
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void save_mnist(const Dataset& set, const std::filesystem::path& dir, const std::string& prefix) {
  std::filesystem::create_directories(dir);
  const auto write = [](const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    FC_ENFORCE(out.good(), "cannot write ", path.string());
  };
  write(dir / (prefix + "-images-idx3-ubyte"),
        encode_idx({set.size(), set.rows, set.cols}, set.pixels));
  write(dir / (prefix + "-labels-idx1-ubyte"), encode_idx({set.size()}, set.labels));
}

}  // namespace fusedcoll::mnist
