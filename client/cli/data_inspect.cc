// `stoke data inspect PATH...`: what Stoke would read from each path, with the readers the
// worker trains from and the coordinator checks submissions with (formats/), before any
// job is submitted: the kind of data, samples, shapes, dtypes, classes, or the problem.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "formats/array_file.h"
#include "formats/array_set.h"
#include "formats/image_files.h"
#include "formats/image_set.h"
#include "formats/shard_files.h"
#include "formats/token_file.h"

namespace stoke::client {
namespace {

std::string Dims(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// Headers of this many images, spread over the list, are read.
constexpr size_t kCheckedImages = 64;

// Classes, images per split, and the sizes of a sample of them; the first that cannot be
// read is the problem.
absl::StatusOr<std::string> DescribeImages(const std::string& what, const data::ImageList& list) {
  auto sides = data::CheckImageHeaders(list.files, kCheckedImages);
  if (!sides.ok()) return sides.status();
  return absl::StrCat(
      what, ": ", list.files.size(), " images in ", list.classes.size(), " classes (",
      absl::StrJoin(list.classes.begin(),
                    list.classes.begin() + std::min<size_t>(list.classes.size(), 5), ", "),
      list.classes.size() > 5 ? ", ..." : "", "); sides of ", sides->images, " of them from ",
      sides->min_side, " to ", sides->max_side, " pixels");
}

// Shards named by a file or a brace pattern: samples, classes, and what the inputs are
// (image sides, an array's dtype and shape, texts).
absl::StatusOr<std::string> DescribeShards(const std::string& pattern) {
  data::ShardSplitNames names;
  names.urls = pattern;
  auto split = data::ListShardSplit(names);
  if (!split.ok()) return split.status();
  std::string inputs;
  if (split->input == data::ShardInput::kImage) {
    auto sides = data::CheckImageHeaders(split->train, kCheckedImages);
    if (!sides.ok()) return sides.status();
    inputs = absl::StrCat("images; sides of ", sides->images, " from ", sides->min_side, " to ",
                          sides->max_side, " pixels");
  } else if (split->input == data::ShardInput::kArray) {
    auto header = data::ReadShardArrayHeader(split->train[0]);
    if (!header.ok()) return header.status();
    inputs = absl::StrCat(".npy arrays; the first ", data::DtypeName(header->dtype), " ",
                          Dims(header->shape));
  } else {
    inputs = ".txt texts, fed as byte ids";
  }
  return absl::StrCat("data.shards: ", split->shards.size(), " tar shard(s), ",
                      split->train.size() + split->val.size(), " samples in ", split->num_classes,
                      " classes (labels 0 to ", split->num_classes - 1, "); inputs: ", inputs);
}

absl::StatusOr<std::string> DescribeFolder(const std::string& path) {
  if (auto images = data::ListImageFolder(path); images.ok()) {
    return DescribeImages("data.images folder", *images);
  }
  auto mnist = data::InspectMnistFolder(path);
  auto cifar = mnist.ok() ? mnist : data::InspectCifar10Folder(path);
  if (!cifar.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no data folder Stoke reads: as data.mnist: ", mnist.status().message(),
                     "; as data.cifar10: ", cifar.status().message()));
  }
  const data::ImageSplits& s = *cifar;
  return absl::StrCat(mnist.ok() ? "data.mnist" : "data.cifar10", " folder: ", s.train.count,
                      " training and ", s.test.count, " test images, uint8 ",
                      Dims({s.train.channels, s.train.height, s.train.width}), ", ",
                      s.train.num_classes, " classes");
}

absl::StatusOr<std::string> DescribeArrayFile(const std::string& name) {
  auto opened = data::ArrayFile::Open(name);
  if (!opened.ok()) return opened.status();
  const data::ArrayFile& array = **opened;
  std::string text =
      absl::StrCat("array ", data::DescribeArray(array), ": ", array.rows(), " samples");
  const std::vector<int64_t> row = array.row_shape();
  if (array.dtype() == data::ArrayDtype::kUInt8 && (row.size() == 2 || row.size() == 3)) {
    return absl::StrCat(text, " of ", Dims(row), ", images as inputs");
  }
  if (!row.empty()) absl::StrAppend(&text, " of ", Dims(row));
  if (data::IsInteger(array.dtype())) {
    int64_t min = 0, max = 0;
    if (auto s = array.IntegerRange(0, array.rows(), &min, &max); !s.ok()) return s;
    if (min >= 0 && max >= 1) {
      absl::StrAppend(&text, "; as targets, class indices ", min, "-", max, " (", max + 1,
                      " classes)");
    } else {
      absl::StrAppend(&text, "; values ", min, " to ", max, " (no class indices)");
    }
  } else {
    absl::StrAppend(&text, "; as targets, regression");
  }
  return text;
}

absl::StatusOr<std::string> DescribeTokens(const std::string& path) {
  auto opened = data::TokenFile::Open(path);
  if (!opened.ok()) return opened.status();
  // One pass: raising a bound until no id is at or over it rescans the file for each new
  // largest id (65535 times, for ids that climb near its end).
  const data::TokenFile& tokens = **opened;
  const uint16_t largest =
      tokens.size() > 0 ? *std::max_element(tokens.tokens(), tokens.tokens() + tokens.size()) : 0;
  return absl::StrCat("data.tokens file: ", (*opened)->size(), " uint16 token ids, the largest ",
                      largest, " (data.tokens.vocab_size at least ", int64_t{largest} + 1, ")");
}

}  // namespace

int DataInspectCommand(const std::vector<std::string>& paths) {
  int exit_code = kExitOk;
  for (const std::string& path : paths) {
    const auto [file, tensor] = data::SplitArrayName(path);
    struct stat st;
    std::vector<absl::StatusOr<std::string>> lines;
    std::vector<std::string> names = {path};
    if (file.size() > 4 && file.rfind(".tar") == file.size() - 4) {  // a shard or a pattern
      lines.push_back(DescribeShards(path));
    } else if (stat(file.c_str(), &st) != 0) {
      lines.push_back(absl::NotFoundError(absl::StrCat("cannot read: no such file or folder")));
    } else if (S_ISDIR(st.st_mode)) {
      lines.push_back(DescribeFolder(path));
    } else if (file.size() >= 4 && (file.rfind(".npy") == file.size() - 4 ||
                                    file.rfind(".safetensors") == file.size() - 12)) {
      if (tensor.empty()) {
        auto listed = data::ListArrays(file);
        if (listed.ok()) names = *listed;
      }
      for (const std::string& name : names) lines.push_back(DescribeArrayFile(name));
    } else if (file.size() > 4 &&
               (file.rfind(".csv") == file.size() - 4 || file.rfind(".jsonl") == file.size() - 6)) {
      auto manifest = data::ReadImageManifest(path);
      lines.push_back(manifest.ok() ? DescribeImages("data.images manifest", *manifest)
                                    : absl::StatusOr<std::string>(manifest.status()));
    } else {
      lines.push_back(DescribeTokens(path));
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].ok()) {
        std::printf("%s: %s\n", names[i].c_str(), lines[i]->c_str());
      } else {
        // Readers' messages name the file already.
        const std::string message(lines[i].status().message());
        std::printf("%s: problem: %s\n", names[i].c_str(), message.c_str());
        exit_code = kExitUsage;
      }
    }
  }
  return exit_code;
}

}  // namespace stoke::client
