// Labelled images in host memory, and the two on-disk formats Stoke reads them from:
// MNIST's idx folders (plain or gzipped) and CIFAR-10's binary batches. Torch-free, so
// the coordinator validates a job's files at submission with the worker's own readers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/read_options.h"

namespace stoke::data {

struct ImageSet {
  int64_t count = 0;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  std::vector<uint8_t> pixels;  // [count, channels, height, width]
  std::vector<uint8_t> labels;  // [count]
  int64_t num_classes = 0;      // 1 + the largest label

  int64_t sample_bytes() const { return channels * height * width; }
};

struct ImageSplits {
  ImageSet train;
  ImageSet test;
};

// A folder with train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
// and t10k-labels-idx1-ubyte, each optionally ending in .gz.
absl::StatusOr<ImageSplits> ReadMnistFolder(const std::string& folder,
                                            const ReadOptions& options = {});

// A folder with data_batch_1.bin ... data_batch_5.bin and test_batch.bin: records of one
// label byte and 3x32x32 pixel bytes.
absl::StatusOr<ImageSplits> ReadCifar10Folder(const std::string& folder,
                                              const ReadOptions& options = {});

// The same checks as the readers above, without loading the images: headers, sizes and
// labels only, read a piece at a time, so that memory stays small whatever the files
// hold (a sparse 4 GiB batch, a gzip bomb). The splits come back with their shapes,
// counts and classes; `pixels` and `labels` stay empty. For the coordinator's checks,
// which pass their data roots in `options` so that each file is opened as the worker
// opens it (read_options.h).
absl::StatusOr<ImageSplits> InspectMnistFolder(const std::string& folder,
                                               const ReadOptions& options = {});
absl::StatusOr<ImageSplits> InspectCifar10Folder(const std::string& folder,
                                                 const ReadOptions& options = {});

}  // namespace stoke::data
