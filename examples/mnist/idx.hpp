#pragma once
/// @file
/// Reading and writing MNIST IDX files (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS"):
/// a big-endian header `00 00 08 <ndims>`, one big-endian u32 per dimension, then the unsigned
/// bytes in row-major order. Files may be gzip-compressed (`.gz` or not: the gzip magic decides).

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fusedcoll::mnist {

/// A labelled set of square greyscale images, one byte per pixel (0 = background).
struct Dataset {
  int rows = 0;
  int cols = 0;
  std::vector<std::uint8_t> pixels;  ///< size() * rows * cols, image-major
  std::vector<std::uint8_t> labels;  ///< one class in [0, 10) per image

  std::int64_t size() const noexcept { return static_cast<std::int64_t>(labels.size()); }
  std::int64_t image_bytes() const noexcept { return std::int64_t{rows} * cols; }
};

/// The decoded contents of one IDX file of unsigned bytes.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

/// Decodes an IDX byte array (already decompressed). `what` names the source in messages.
/// Throws `InvalidArgument` for a wrong magic, a type other than unsigned byte, zero or more than
/// 3 dimensions, or a payload whose length differs from the product of the dimensions.
IdxArray parse_idx(const std::vector<std::uint8_t>& bytes, const std::string& what);

/// `bytes` inflated when they start with the gzip magic, else unchanged. Throws `InvalidArgument`
/// when the gzip stream is corrupt or truncated.
std::vector<std::uint8_t> maybe_gunzip(std::vector<std::uint8_t> bytes, const std::string& what);

/// Reads a whole file, inflating it when it starts with the gzip magic. Throws `InvalidArgument`
/// when it cannot be opened or the gzip stream is corrupt or truncated.
std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path);

/// Joins an image file (3 dims: count, rows, cols) and a label file (1 dim: count) into a
/// dataset; throws `InvalidArgument` when the counts differ or a label is not in [0, 10).
Dataset make_dataset(const IdxArray& images, const IdxArray& labels, const std::string& what);

/// Loads `<dir>/<prefix>-images-idx3-ubyte` and `<dir>/<prefix>-labels-idx1-ubyte`, each raw or
/// with a `.gz` suffix (the raw file wins when both exist). `prefix` is "train" or "t10k".
Dataset load_mnist(const std::filesystem::path& dir, const std::string& prefix);

/// Encodes an unsigned-byte IDX array (the inverse of `parse_idx`).
std::vector<std::uint8_t> encode_idx(const std::vector<std::int64_t>& dims,
                                     const std::vector<std::uint8_t>& data);

/// Writes `<dir>/<prefix>-images-idx3-ubyte` and `<dir>/<prefix>-labels-idx1-ubyte`, raw.
void save_mnist(const Dataset& set, const std::filesystem::path& dir, const std::string& prefix);

}  // namespace fusedcoll::mnist
