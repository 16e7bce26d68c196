#include "formats/image_set.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "formats/idx_file.h"

namespace stoke::data {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<std::string> FindFile(const std::string& folder, const std::string& name) {
  for (const std::string& candidate : {folder + "/" + name, folder + "/" + name + ".gz"}) {
    if (IsFile(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat(folder, ": no ", name, " (or ", name,
                   ".gz) in it; an MNIST-format folder holds "
                   "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
                   "t10k-labels-idx1-ubyte"));
}

absl::Status CheckLabels(ImageSet& set, const std::string& where) {
  if (set.labels.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no samples"));
  set.num_classes = 1 + *std::max_element(set.labels.begin(), set.labels.end());
  return absl::OkStatus();
}

absl::StatusOr<ImageSet> ReadMnistSplit(const std::string& folder, const std::string& prefix,
                                        const ReadOptions& options) {
  auto images_path = FindFile(folder, prefix + "-images-idx3-ubyte");
  if (!images_path.ok()) return images_path.status();
  auto labels_path = FindFile(folder, prefix + "-labels-idx1-ubyte");
  if (!labels_path.ok()) return labels_path.status();
  auto images = ReadIdxFile(*images_path, 3, options);
  if (!images.ok()) return images.status();
  auto labels = ReadIdxFile(*labels_path, 1, options);
  if (!labels.ok()) return labels.status();
  if (images->dims[0] != labels->dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(*images_path, " holds ", images->dims[0],
                                                   " images but ", *labels_path, " holds ",
                                                   labels->dims[0], " labels"));
  }
  ImageSet set;
  set.count = images->dims[0];
  set.channels = 1;
  set.height = images->dims[1];
  set.width = images->dims[2];
  set.pixels = std::move(images->bytes);
  set.labels = std::move(labels->bytes);
  if (auto s = CheckLabels(set, *labels_path); !s.ok()) return s;
  return set;
}

absl::StatusOr<ImageSet> InspectMnistSplit(const std::string& folder, const std::string& prefix,
                                           const ReadOptions& options) {
  auto images_path = FindFile(folder, prefix + "-images-idx3-ubyte");
  if (!images_path.ok()) return images_path.status();
  auto labels_path = FindFile(folder, prefix + "-labels-idx1-ubyte");
  if (!labels_path.ok()) return labels_path.status();
  auto images = InspectIdxFile(*images_path, 3, /*scan_max=*/false, options);
  if (!images.ok()) return images.status();
  auto labels = InspectIdxFile(*labels_path, 1, /*scan_max=*/true, options);
  if (!labels.ok()) return labels.status();
  if (images->dims[0] != labels->dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(*images_path, " holds ", images->dims[0],
                                                   " images but ", *labels_path, " holds ",
                                                   labels->dims[0], " labels"));
  }
  ImageSet set;
  set.count = images->dims[0];
  set.channels = 1;
  set.height = images->dims[1];
  set.width = images->dims[2];
  set.num_classes = 1 + labels->max_value;
  return set;
}

// Goes through a batch file's records a piece at a time, checking each label; with
// `keep`, appends them to `set` (the worker), else only counts them (the coordinator).
absl::Status ReadCifarBatch(const std::string& path, ImageSet& set, bool keep,
                            const ReadOptions& options) {
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  long long size = 0;
  auto opened = OpenDataFile(path, options, &size);
  if (!opened.ok()) {
    return absl::Status(
        opened.status().code(),
        absl::StrCat(
            opened.status().message(),
            "; a CIFAR-10 folder holds data_batch_1.bin ... data_batch_5.bin and test_batch.bin"));
  }
  const int fd = *opened;
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
    close(*f);
    delete f;
  });
  if (size <= 0 || size % kRecord != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes is not a whole number of CIFAR-10 records (",
                     kRecord, " bytes each: a label and 3x32x32 pixels)"));
  }
  const int64_t records = size / kRecord;
  constexpr int64_t kPieceRecords = 1024;
  std::vector<uint8_t> piece(static_cast<size_t>(kPieceRecords * kRecord));
  for (int64_t r = 0; r < records;) {
    if (options.cancelled()) return ReadCancelled(path);
    const int64_t n = std::min(kPieceRecords, records - r);
    const size_t want = static_cast<size_t>(n * kRecord);
    size_t got = 0;
    while (got < want) {
      const ssize_t k = read(fd, piece.data() + got, want - got);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": cannot read record ", r, ": ", k < 0 ? std::strerror(errno) : "file shrank"));
      }
      got += static_cast<size_t>(k);
    }
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* rec = piece.data() + i * kRecord;
      if (rec[0] > 9) {
        // The label itself is not quoted: a message must never carry a file's bytes.
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": record ", r + i, " has a label above 9; CIFAR-10 labels are 0 to 9"));
      }
      if (keep) {
        set.labels.push_back(rec[0]);
        set.pixels.insert(set.pixels.end(), rec + 1, rec + kRecord);
      }
    }
    r += n;
  }
  set.channels = 3;
  set.height = set.width = 32;
  set.count += records;
  return absl::OkStatus();
}

absl::StatusOr<ImageSplits> CifarFolder(const std::string& folder, bool keep,
                                        const ReadOptions& options) {
  ImageSplits splits;
  for (int i = 1; i <= 5; ++i) {
    auto s = ReadCifarBatch(absl::StrCat(folder, "/data_batch_", i, ".bin"), splits.train, keep,
                            options);
    if (!s.ok()) return s;
  }
  if (auto s = ReadCifarBatch(folder + "/test_batch.bin", splits.test, keep, options); !s.ok()) {
    return s;
  }
  splits.train.num_classes = splits.test.num_classes = 10;
  return splits;
}

absl::StatusOr<ImageSplits> MnistFolder(const std::string& folder,
                                        absl::StatusOr<ImageSet> (*split)(const std::string&,
                                                                          const std::string&,
                                                                          const ReadOptions&),
                                        const ReadOptions& options) {
  ImageSplits splits;
  auto train = split(folder, "train", options);
  if (!train.ok()) return train.status();
  auto test = split(folder, "t10k", options);
  if (!test.ok()) return test.status();
  if (train->height != test->height || train->width != test->width) {
    return absl::InvalidArgumentError(absl::StrCat(folder, ": training images are ", train->height,
                                                   "x", train->width, " but test images ",
                                                   test->height, "x", test->width));
  }
  splits.train = *std::move(train);
  splits.test = *std::move(test);
  splits.test.num_classes = splits.train.num_classes =
      std::max(splits.train.num_classes, splits.test.num_classes);
  return splits;
}

}  // namespace

absl::StatusOr<ImageSplits> ReadMnistFolder(const std::string& folder, const ReadOptions& options) {
  return MnistFolder(folder, ReadMnistSplit, options);
}

absl::StatusOr<ImageSplits> InspectMnistFolder(const std::string& folder,
                                               const ReadOptions& options) {
  return MnistFolder(folder, InspectMnistSplit, options);
}

absl::StatusOr<ImageSplits> ReadCifar10Folder(const std::string& folder,
                                              const ReadOptions& options) {
  return CifarFolder(folder, /*keep=*/true, options);
}

absl::StatusOr<ImageSplits> InspectCifar10Folder(const std::string& folder,
                                                 const ReadOptions& options) {
  return CifarFolder(folder, /*keep=*/false, options);
}

}  // namespace stoke::data
