#include "formats/image_set.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

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

absl::StatusOr<ImageSet> ReadMnistSplit(const std::string& folder, const std::string& prefix) {
  auto images_path = FindFile(folder, prefix + "-images-idx3-ubyte");
  if (!images_path.ok()) return images_path.status();
  auto labels_path = FindFile(folder, prefix + "-labels-idx1-ubyte");
  if (!labels_path.ok()) return labels_path.status();
  auto images = ReadIdxFile(*images_path, 3);
  if (!images.ok()) return images.status();
  auto labels = ReadIdxFile(*labels_path, 1);
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

absl::Status AppendCifarBatch(const std::string& path, ImageSet& set) {
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        path, ": cannot open: ", std::strerror(errno),
        "; a CIFAR-10 folder holds data_batch_1.bin ... data_batch_5.bin and test_batch.bin"));
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty() || bytes.size() % kRecord != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", bytes.size(), " bytes is not a whole number of CIFAR-10 records (",
                     kRecord, " bytes each: a label and 3x32x32 pixels)"));
  }
  const int64_t records = static_cast<int64_t>(bytes.size()) / kRecord;
  set.channels = 3;
  set.height = set.width = 32;
  for (int64_t r = 0; r < records; ++r) {
    const auto* rec = reinterpret_cast<const uint8_t*>(bytes.data() + r * kRecord);
    if (rec[0] > 9) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": record ", r, " has label ",
                                                     int{rec[0]}, "; CIFAR-10 labels are 0 to 9"));
    }
    set.labels.push_back(rec[0]);
    set.pixels.insert(set.pixels.end(), rec + 1, rec + kRecord);
  }
  set.count += records;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageSplits> ReadMnistFolder(const std::string& folder) {
  ImageSplits splits;
  auto train = ReadMnistSplit(folder, "train");
  if (!train.ok()) return train.status();
  auto test = ReadMnistSplit(folder, "t10k");
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

absl::StatusOr<ImageSplits> ReadCifar10Folder(const std::string& folder) {
  ImageSplits splits;
  for (int i = 1; i <= 5; ++i) {
    auto s = AppendCifarBatch(absl::StrCat(folder, "/data_batch_", i, ".bin"), splits.train);
    if (!s.ok()) return s;
  }
  if (auto s = AppendCifarBatch(folder + "/test_batch.bin", splits.test); !s.ok()) return s;
  splits.train.num_classes = splits.test.num_classes = 10;
  return splits;
}

}  // namespace stoke::data
