#include "formats/image_files.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "files/descriptor.h"
#include "files/posix_files.h"
#include "formats/image_decode.h"
#include "formats/tar_index.h"

namespace stoke::data {
namespace {

// Class folders nest their images at most this deep (class/a/b/c/img.jpg).
constexpr int kMaxDepth = 8;
// A manifest larger than this is no manifest (a billion short lines at most).
constexpr size_t kMaxManifestBytes = size_t{1} << 34;
// A manifest line longer than this is no "path,label" line (a path is at most PATH_MAX,
// 4096 bytes, on Linux), and a manifest is read in pieces of kManifestPiece bytes: what one
// holds in memory is what it lists, never the file's size (a sparse file of zeros).
constexpr size_t kMaxManifestLine = 64 * 1024;
constexpr size_t kManifestPiece = 1 << 20;

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

// Calls `each` with every line of `path` (without its newline) and its number from 1,
// reading the file a piece at a time. A line longer than kMaxManifestLine stops it.
absl::Status ForEachLine(const std::string& path, const ReadOptions& options,
                         const std::function<absl::Status(absl::string_view, int64_t)>& each) {
  long long size = 0;  // NOLINT(google-runtime-int): OpenDataFile's type
  auto opened = OpenDataFile(path, options, &size);
  if (!opened.ok()) return opened.status();
  const files::Descriptor file(*opened);
  const int fd = file.get();
  if (static_cast<unsigned long long>(size) > kMaxManifestBytes) {
    return Bad(path, absl::StrCat(size, " bytes, more than the ", kMaxManifestBytes,
                                  " such a file may hold"));
  }
  std::string piece(std::min(static_cast<size_t>(size), kManifestPiece), '\0');
  std::string carry;  // the start of a line that an earlier piece began
  int64_t number = 0;
  auto too_long = [&] {
    return Bad(absl::StrCat(path, ":", number + 1),
               absl::StrCat("a line longer than ", kMaxManifestLine,
                            " bytes; a manifest line is a path and a label"));
  };
  for (int64_t offset = 0; offset < size;) {
    if (options.cancelled()) return ReadCancelled(path);
    const int64_t want = std::min<int64_t>(size - offset, static_cast<int64_t>(piece.size()));
    const int64_t got = ReadFully(fd, offset, want, piece.data());
    if (got <= 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": ended after ", offset, " bytes, short of its ", size));
    }
    offset += got;
    absl::string_view rest(piece.data(), static_cast<size_t>(got));
    for (size_t end = rest.find('\n'); end != absl::string_view::npos; end = rest.find('\n')) {
      absl::string_view line = rest.substr(0, end);
      if (!carry.empty()) {
        if (carry.size() + line.size() > kMaxManifestLine) return too_long();
        carry.append(line.data(), line.size());
        line = carry;
      }
      if (line.size() > kMaxManifestLine) return too_long();
      if (auto s = each(line, ++number); !s.ok()) return s;
      carry.clear();
      rest.remove_prefix(end + 1);
    }
    if (carry.size() + rest.size() > kMaxManifestLine) return too_long();
    carry.append(rest.data(), rest.size());
  }
  if (!carry.empty()) return each(carry, ++number);
  return absl::OkStatus();
}

// Labels as given: all integers are class indices; otherwise names, numbered in sorted
// order. `lines[i]` is the manifest line of labels[i]. Integer labels must lie below the
// files listed (or `classes`, where larger): each index up to the largest becomes a class
// name, so the bound is checked before any is made, and the classes stay as many as the
// manifest has lines.
absl::Status NumberLabels(const std::string& manifest, const std::vector<std::string>& labels,
                          const std::vector<int64_t>& lines, int64_t classes, ImageList* list) {
  const int64_t files = static_cast<int64_t>(labels.size());
  const int64_t bound = std::max(files, classes);
  bool integers = true;
  int64_t largest = -1;
  size_t first_over = labels.size();  // the first integer label at or over the bound
  int64_t over = 0;                   // its value (quoted as parsed, not as the file's text)
  for (size_t i = 0; i < labels.size(); ++i) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(labels[i], &value) || value < 0) {
      integers = false;
      break;
    }
    if (value >= bound && first_over == labels.size()) {
      first_over = i;
      over = value;
    }
    largest = std::max(largest, value);
  }
  if (integers && first_over < labels.size()) {
    return Bad(
        absl::StrCat(manifest, ":", lines[first_over]),
        absl::StrCat(
            "label ", over, " is over the ", files, " files listed",
            classes > files ? absl::StrCat(" and the ", classes, " classes of the training images")
                            : "",
            "; numeric labels count classes from 0, so they run from 0 to ", bound - 1, " here"));
  }
  if (integers) {
    for (size_t i = 0; i < labels.size(); ++i) {
      int64_t value = 0;
      (void)absl::SimpleAtoi(labels[i], &value);
      list->files[i].label = value;
    }
    list->classes.reserve(static_cast<size_t>(largest + 1));
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
  // A member's length, from its tar header, is refused as a whole file's size is.
  if (file.length < 0 || static_cast<uint64_t>(file.length) > max_size) {
    return Bad(DescribeImageFile(file, options), absl::StrCat(file.length, " bytes, more than the ",
                                                              max_size, " such a file may hold"));
  }
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

absl::StatusOr<ImageList> ReadImageManifest(const std::string& manifest, const ReadOptions& options,
                                            int64_t classes) {
  const std::string base = manifest.substr(0, manifest.rfind('/') + 1);
  const bool jsonl = manifest.size() > 6 && manifest.compare(manifest.size() - 6, 6, ".jsonl") == 0;
  ImageList list;
  std::vector<std::string> labels;
  std::vector<int64_t> lines;  // of each label
  auto read_line = [&](absl::string_view line, int64_t line_number) -> absl::Status {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) return absl::OkStatus();
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
      if (line_number == 1 && path == "path" && label == "label") {
        return absl::OkStatus();  // a header
      }
    }
    if (path.empty() || label.empty()) return Bad(where, "a path and a label, both non-empty");
    if (!IsImageFileName(path)) return Bad(where, absl::StrCat(path, ": not a .jpg or .png file"));
    list.files.push_back({path[0] == '/' ? path : base + path, 0});
    labels.push_back(std::move(label));
    lines.push_back(line_number);
    return absl::OkStatus();
  };
  if (auto s = ForEachLine(manifest, options, read_line); !s.ok()) return s;
  if (list.files.empty()) return Bad(manifest, "lists no image");
  if (auto s = NumberLabels(manifest, labels, lines, classes, &list); !s.ok()) return s;
  if (list.classes.size() < 2) return Bad(manifest, "names one class only");
  return list;
}

absl::StatusOr<ImageSplit> ListImageSplit(const ImageSplitNames& names,
                                          const ReadOptions& options) {
  auto in_field = [](const char* field, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("data.images.", field, ": ", s.message()));
  };
  ImageSplit split;  // the training classes bound a held-out manifest's labels
  auto list = [&](const std::string& folder, const std::string& manifest, const char* folder_field,
                  const char* manifest_field) -> absl::StatusOr<ImageList> {
    if (!folder.empty() && !manifest.empty()) {
      return Bad(absl::StrCat("data.images.", folder_field),
                 absl::StrCat("set ", folder_field, " or ", manifest_field, ", not both"));
    }
    // A held-out manifest's labels may reach every class of the training images.
    auto listed =
        folder.empty()
            ? ReadImageManifest(manifest, options, static_cast<int64_t>(split.train.classes.size()))
            : ListImageFolder(folder, options);
    if (!listed.ok()) {
      return in_field(folder.empty() ? manifest_field : folder_field, listed.status());
    }
    return listed;
  };
  if (names.path.empty() && names.manifest.empty()) {
    return absl::InvalidArgumentError("data.images.path: required (or data.images.manifest)");
  }
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
