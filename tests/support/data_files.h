// Small data files in the formats Stoke reads, written into a test's temp dir: MNIST's
// idx files (plain or gzip-compressed), CIFAR-10 binary batches and uint16 token files.
// Failures to write are reported as test failures (ADD_FAILURE), naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/image_set.h"

namespace stoke::testing {

// Writes `bytes` to `path`, gzip-compressed (zlib's gzwrite) when `gzip`.
void WriteBytes(const std::string& path, const std::string& bytes, bool gzip = false);
std::string ReadBytes(const std::string& path);

// An idx file of unsigned bytes: the magic number 0x000008nn (n = dims.size()), each
// dimension as a big-endian 32-bit count, then `data`. `magic` overrides the magic number.
std::string IdxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                     uint32_t magic = 0);

// The file names of an MNIST-format folder.
inline constexpr const char* kMnistTrainImages = "train-images-idx3-ubyte";
inline constexpr const char* kMnistTrainLabels = "train-labels-idx1-ubyte";
inline constexpr const char* kMnistTestImages = "t10k-images-idx3-ubyte";
inline constexpr const char* kMnistTestLabels = "t10k-labels-idx1-ubyte";

// Writes the four idx files of an MNIST-format folder (which must exist); with `gzip` each
// name ends in .gz. The sets must have one channel.
void WriteMnistFolder(const std::string& folder, const data::ImageSet& train,
                      const data::ImageSet& test, bool gzip = false);

// Grayscale images whose pixel k of image i is (i + 7 * k + salt) % 256 and whose label is
// i % num_classes: up to 256 images, pixel 0 tells which one it is, and no image (at most
// 36 pixels wide) is its own mirror image.
data::ImageSet PatternImages(int64_t count, int64_t height, int64_t width, int64_t num_classes,
                             int salt = 0);

// One CIFAR-10 record per label: the label byte and 3x32x32 pixel bytes (pixel k of
// record r is (r * 13 + k + salt) % 256).
std::string CifarRecords(const std::vector<uint8_t>& labels, int salt = 0);
inline constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;

// A CIFAR-10 folder: data_batch_1.bin ... data_batch_5.bin with `per_batch` records each
// (labels cycling through 0 to 9) and test_batch.bin with `test_records`.
void WriteCifarFolder(const std::string& folder, int per_batch, int test_records);

// A token file: the ids as little-endian uint16.
void WriteTokens(const std::string& path, const std::vector<uint16_t>& tokens);
// Ids first, first + 1, ... (mod 65536), `count` of them.
std::vector<uint16_t> CountingTokens(int64_t count, uint16_t first = 0, int64_t modulo = 65536);

}  // namespace stoke::testing
