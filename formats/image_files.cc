#include "formats/image_files.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "files/posix_files.h"
#include "formats/image_decode.h"
#include "formats/tar_index.h"

namespace stoke::data {
namespace {

// Class folders nest their images at most this deep (class/a/b/c/img.jpg).
constexpr int kMaxDepth = 8;
// A manifest larger than this is no manifest (a billion short lines at most).
constexpr size_t kMaxManifestBytes = size_t{1} << 34;

absl::Status Bad(const std::string& what, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", problem));
}

std::string Stripped(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  return {text.data(), text.size()};
}

// Appends the images beneath `dir`, sorted, descending into subfolders.
void CollectImages(const std::string& dir, int depth, std::vector<std::string>* out) {
  std::vector<std::string> names = files::ListDirectory(dir);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (name.empty() || name[0] == '.') continue;
    const std::string path = absl::StrCat(dir, "/", name);
    if (IsImageFileName(name)) {
      out->push_back(path);
    } else if (depth < kMaxDepth && files::IsDirectory(path)) {
      CollectImages(path, depth + 1, out);
    }
  }
}

// Labels as given: all integers are class indices; otherwise names, numbered in sorted
// order.
absl::Status NumberLabels(const std::string& manifest, const std::vector<std::string>& labels,
                          ImageList* list) {
  bool integers = true;
  int64_t largest = -1;
  for (const std::string& label : labels) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(label, &value) || value < 0) {
      integers = false;
      break;
    }
    largest = std::max(largest, value);
  }
  if (integers) {
    for (size_t i = 0; i < labels.size(); ++i) {
      int64_t value = 0;
      (void)absl::SimpleAtoi(labels[i], &value);
      list->files[i].label = value;
    }
    for (int64_t c = 0; c <= largest; ++c) list->classes.push_back(std::to_string(c));
    return absl::OkStatus();
  }
  std::map<std::string, int64_t> numbers;
  for (const std::string& label : labels) numbers[label] = 0;
  int64_t next = 0;
  for (auto& [name, number] : numbers) {
    number = next++;
    list->classes.push_back(name);
  }
  for (size_t i = 0; i < labels.size(); ++i) list->files[i].label = numbers[labels[i]];
  if (list->classes.size() < 2) return Bad(manifest, "names one class only");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SampledSides> CheckImageHeaders(const std::vector<ImageFile>& files, size_t count,
                                               const ReadOptions& options) {
  SampledSides sides;
  sides.images = std::min(count, files.size());
  sides.min_side = 1 << 30;
  std::string bytes;
  for (size_t i = 0; i < sides.images; ++i) {
    const ImageFile& file = files[i * files.size() / sides.images];
    if (auto s = ReadImageHead(file, options, size_t{1} << 20, &bytes); !s.ok()) return s;
    auto size = ReadImageSize(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (!size.ok()) {
      return Bad(DescribeImageFile(file, options), absl::StrCat(size.status().message()));
    }
    sides.min_side = std::min({sides.min_side, size->width, size->height});
    sides.max_side = std::max({sides.max_side, size->width, size->height});
  }
  return sides;
}

absl::Status ReadImageBytes(const ImageFile& file, const ReadOptions& options, size_t max_size,
                            std::string* bytes) {
  if (file.offset < 0) return ReadDataFile(file.path, options, max_size, bytes);
  return ReadDataFileRange(file.path, options, file.offset, file.length, bytes);
}

absl::Status ReadImageHead(const ImageFile& file, const ReadOptions& options, size_t limit,
                           std::string* bytes) {
  if (file.offset < 0) return ReadDataFileHead(file.path, options, limit, bytes);
  return ReadDataFileRange(file.path, options, file.offset,
                           std::min(file.length, static_cast<int64_t>(limit)), bytes);
}

std::string DescribeImageFile(const ImageFile& file, const ReadOptions& options) {
  if (file.offset < 0) return file.path;
  const std::string member = ReadTarMemberName(file.path, file.offset, options);
  if (!member.empty()) return absl::StrCat(file.path, ":", member);
  return absl::StrCat(file.path, " at byte ", file.offset);
}

bool IsImageFileName(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const char* suffix : {".jpg", ".jpeg", ".png"}) {
    const size_t n = std::strlen(suffix);
    if (lower.size() > n && lower.compare(lower.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

absl::StatusOr<ImageList> ListImageFolder(const std::string& folder, const ReadOptions& options) {
  if (!files::IsDirectory(folder)) return Bad(folder, "not a folder");
  std::vector<std::string> names = files::ListDirectory(folder);
  std::sort(names.begin(), names.end());
  ImageList list;
  for (const std::string& name : names) {
    const std::string class_folder = absl::StrCat(folder, "/", name);
    if (name.empty() || name[0] == '.' || !files::IsDirectory(class_folder)) continue;
    if (options.cancelled()) return ReadCancelled(folder);
    std::vector<std::string> images;
    CollectImages(class_folder, 0, &images);
    const int64_t label = static_cast<int64_t>(list.classes.size());
    list.classes.push_back(name);
    for (std::string& path : images) list.files.push_back({std::move(path), label});
  }
  if (list.classes.size() < 2) {
    return Bad(folder, absl::StrCat("holds ", list.classes.size(),
                                    " class folder(s); data.images.path wants one subfolder per "
                                    "class, with its .jpg and .png images"));
  }
  if (list.files.empty()) return Bad(folder, "its class folders hold no .jpg or .png image");
  return list;
}

absl::StatusOr<ImageList> ReadImageManifest(const std::string& manifest,
                                            const ReadOptions& options) {
  std::string text;
  if (auto s = ReadDataFile(manifest, options, kMaxManifestBytes, &text); !s.ok()) return s;
  const std::string base = manifest.substr(0, manifest.rfind('/') + 1);
  const bool jsonl = manifest.size() > 6 && manifest.compare(manifest.size() - 6, 6, ".jsonl") == 0;
  ImageList list;
  std::vector<std::string> labels;
  int64_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::string path, label;
    const std::string where = absl::StrCat(manifest, ":", line_number);
    if (jsonl) {
      const auto entry = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (entry.is_discarded() || !entry.is_object() || !entry.contains("path") ||
          !entry["path"].is_string() || !entry.contains("label")) {
        return Bad(where, "not a JSON object with \"path\" and \"label\"");
      }
      path = entry["path"].get<std::string>();
      label =
          entry["label"].is_string() ? entry["label"].get<std::string>() : entry["label"].dump();
    } else {
      const size_t comma = line.rfind(',');
      if (comma == absl::string_view::npos) return Bad(where, "not a \"path,label\" line");
      path = Stripped(line.substr(0, comma));
      label = Stripped(line.substr(comma + 1));
      if (line_number == 1 && path == "path" && label == "label") continue;  // a header
    }
    if (path.empty() || label.empty()) return Bad(where, "a path and a label, both non-empty");
    if (!IsImageFileName(path)) return Bad(where, absl::StrCat(path, ": not a .jpg or .png file"));
    list.files.push_back({path[0] == '/' ? path : base + path, 0});
    labels.push_back(std::move(label));
  }
  if (list.files.empty()) return Bad(manifest, "lists no image");
  if (auto s = NumberLabels(manifest, labels, &list); !s.ok()) return s;
  if (list.classes.size() < 2) return Bad(manifest, "names one class only");
  return list;
}

absl::StatusOr<ImageSplit> ListImageSplit(const ImageSplitNames& names,
                                          const ReadOptions& options) {
  auto in_field = [](const char* field, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("data.images.", field, ": ", s.message()));
  };
  auto list = [&](const std::string& folder, const std::string& manifest, const char* folder_field,
                  const char* manifest_field) -> absl::StatusOr<ImageList> {
    if (!folder.empty() && !manifest.empty()) {
      return Bad(absl::StrCat("data.images.", folder_field),
                 absl::StrCat("set ", folder_field, " or ", manifest_field, ", not both"));
    }
    auto listed =
        folder.empty() ? ReadImageManifest(manifest, options) : ListImageFolder(folder, options);
    if (!listed.ok()) {
      return in_field(folder.empty() ? manifest_field : folder_field, listed.status());
    }
    return listed;
  };
  if (names.path.empty() && names.manifest.empty()) {
    return absl::InvalidArgumentError("data.images.path: required (or data.images.manifest)");
  }
  ImageSplit split;
  auto train = list(names.path, names.manifest, "path", "manifest");
  if (!train.ok()) return train.status();
  split.train = *std::move(train);
  if (!names.val_path.empty() || !names.val_manifest.empty()) {
    auto val = list(names.val_path, names.val_manifest, "val_path", "val_manifest");
    if (!val.ok()) return val.status();
    split.val = *std::move(val);
    if (!names.path.empty() && !names.val_path.empty() &&
        split.val.classes != split.train.classes) {
      return Bad("data.images.val_path",
                 absl::StrCat(names.val_path, " holds ", split.val.classes.size(),
                              " class folders, not the ", split.train.classes.size(),
                              " of data.images.path by the same names"));
    }
  } else {
    if (!(names.val_fraction > 0 && names.val_fraction < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.images.val_fraction: must lie between 0 and 1, not ", names.val_fraction));
    }
    const size_t every =
        std::max<size_t>(2, static_cast<size_t>(std::lround(1 / names.val_fraction)));
    std::vector<ImageFile> kept;
    for (size_t i = 0; i < split.train.files.size(); ++i) {
      (i % every == every - 1 ? split.val.files : kept).push_back(split.train.files[i]);
    }
    split.train.files = std::move(kept);
    split.val.classes = split.train.classes;
    if (split.val.files.empty() || split.train.files.empty()) {
      return Bad("data.images.path",
                 absl::StrCat(names.path.empty() ? names.manifest : names.path,
                              ": too few images to hold out a validation share"));
    }
  }
  split.num_classes =
      static_cast<int64_t>(std::max(split.train.classes.size(), split.val.classes.size()));
  return split;
}

}  // namespace stoke::data
