#include "tests/support/data_files.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <iterator>

namespace stoke::testing {
namespace {

void AppendBigEndian(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((value >> shift) & 0xff));
  }
}

std::string Bytes(const std::vector<uint8_t>& data) {
  return std::string(data.begin(), data.end());
}

void WriteSplit(const std::string& folder, const std::string& images_name,
                const std::string& labels_name, const data::ImageSet& set, bool gzip) {
  EXPECT_EQ(set.channels, 1) << "MNIST images have one channel";
  const std::string suffix = gzip ? ".gz" : "";
  const auto count = static_cast<uint32_t>(set.count);
  WriteBytes(folder + "/" + images_name + suffix,
             IdxBytes({count, static_cast<uint32_t>(set.height), static_cast<uint32_t>(set.width)},
                      set.pixels),
             gzip);
  WriteBytes(folder + "/" + labels_name + suffix, IdxBytes({count}, set.labels), gzip);
}

}  // namespace

void WriteBytes(const std::string& path, const std::string& bytes, bool gzip) {
  if (gzip) {
    gzFile file = gzopen(path.c_str(), "wb");
    if (file == nullptr) {
      ADD_FAILURE() << path << ": cannot open for writing";
      return;
    }
    const int written =
        bytes.empty() ? 0 : gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
    if (written != static_cast<int>(bytes.size())) ADD_FAILURE() << path << ": gzwrite failed";
    if (gzclose(file) != Z_OK) ADD_FAILURE() << path << ": gzclose failed";
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) ADD_FAILURE() << path << ": cannot write";
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << path << ": cannot read";
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string IdxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                     uint32_t magic) {
  std::string out;
  AppendBigEndian(out, magic != 0 ? magic : 0x00000800u | static_cast<uint32_t>(dims.size()));
  for (uint32_t d : dims) AppendBigEndian(out, d);
  return out + Bytes(data);
}

void WriteMnistFolder(const std::string& folder, const data::ImageSet& train,
                      const data::ImageSet& test, bool gzip) {
  WriteSplit(folder, kMnistTrainImages, kMnistTrainLabels, train, gzip);
  WriteSplit(folder, kMnistTestImages, kMnistTestLabels, test, gzip);
}

data::ImageSet PatternImages(int64_t count, int64_t height, int64_t width, int64_t num_classes,
                             int salt) {
  data::ImageSet set;
  set.count = count;
  set.channels = 1;
  set.height = height;
  set.width = width;
  set.num_classes = num_classes;
  const int64_t plane = height * width;
  set.pixels.resize(static_cast<size_t>(count * plane));
  set.labels.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t k = 0; k < plane; ++k) {
      set.pixels[static_cast<size_t>(i * plane + k)] =
          static_cast<uint8_t>((i + k * 7 + salt) % 256);
    }
    set.labels[static_cast<size_t>(i)] = static_cast<uint8_t>(i % num_classes);
  }
  return set;
}

std::string CifarRecords(const std::vector<uint8_t>& labels, int salt) {
  std::string out;
  out.reserve(labels.size() * kCifarRecordBytes);
  for (size_t r = 0; r < labels.size(); ++r) {
    out.push_back(static_cast<char>(labels[r]));
    for (int64_t k = 0; k < kCifarRecordBytes - 1; ++k) {
      out.push_back(static_cast<char>((static_cast<int64_t>(r) * 13 + k + salt) % 256));
    }
  }
  return out;
}

void WriteCifarFolder(const std::string& folder, int per_batch, int test_records) {
  int label = 0;
  auto labels = [&label](int n) {
    std::vector<uint8_t> out;
    for (int i = 0; i < n; ++i, label = (label + 1) % 10)
      out.push_back(static_cast<uint8_t>(label));
    return out;
  };
  for (int b = 1; b <= 5; ++b) {
    WriteBytes(folder + "/data_batch_" + std::to_string(b) + ".bin",
               CifarRecords(labels(per_batch), b));
  }
  WriteBytes(folder + "/test_batch.bin", CifarRecords(labels(test_records), 100));
}

void WriteTokens(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::string bytes;
  bytes.reserve(tokens.size() * 2);
  for (uint16_t t : tokens) {
    bytes.push_back(static_cast<char>(t & 0xff));
    bytes.push_back(static_cast<char>(t >> 8));
  }
  WriteBytes(path, bytes);
}

std::vector<uint16_t> CountingTokens(int64_t count, uint16_t first, int64_t modulo) {
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<uint16_t>((first + i) % modulo);
  }
  return tokens;
}

}  // namespace stoke::testing
