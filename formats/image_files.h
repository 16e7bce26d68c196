// The image files of data.images and their labels: a folder with one subfolder per class
// (torchvision's ImageFolder layout), or a manifest of path and label lines (CSV or
// JSONL). Only listed here; each file is opened when a batch takes it. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/read_options.h"

namespace stoke::data {

struct ImageFile {
  std::string path;
  int64_t label = 0;
  // A member of a tar shard (data.shards): its bytes at `offset` within `path`, `length`
  // of them. -1: the whole file.
  int64_t offset = -1;
  int64_t length = 0;
};

// The encoded bytes of `file` (the whole file, or its member of a shard), at most
// `limit` of them (a header); INVALID_ARGUMENT, before reading, for a whole file or member
// larger than `max_size`.
absl::Status ReadImageBytes(const ImageFile& file, const ReadOptions& options, size_t max_size,
                            std::string* bytes);
absl::Status ReadImageHead(const ImageFile& file, const ReadOptions& options, size_t limit,
                           std::string* bytes);
// The file, for messages: its path, or for a member of a shard "SHARD:MEMBER" (the
// member's name read back from its tar header), or "SHARD at byte N" when that fails.
std::string DescribeImageFile(const ImageFile& file, const ReadOptions& options);

struct ImageList {
  std::vector<ImageFile> files;
  // Class names by label: the subfolders' names, or a manifest's label names (its
  // integers as text when it gives integers).
  std::vector<std::string> classes;
};

// `folder`/<class>/**/*.{jpg,jpeg,png} (any case), classes in sorted order, files in sorted
// order within each; hidden entries skipped. INVALID_ARGUMENT naming the folder when it
// holds no class folder or no image.
absl::StatusOr<ImageList> ListImageFolder(const std::string& folder,
                                          const ReadOptions& options = {});

// A manifest: "path,label" lines (CSV, a first line "path,label" skipped) or JSON lines
// {"path": ..., "label": ...} (a .jsonl file). Paths relative to the manifest's folder;
// labels integers (class indices) or names (numbered in sorted order). Errors name the
// manifest and the line ("MANIFEST:LINE: ...").
// Integer labels count classes from 0 and must lie below the number of files listed, or
// below `classes` where that is larger (a held-out manifest's labels may reach every
// class of the training set): one class name is made per index, so an index is refused
// before anything is sized from it. Read a piece at a time (lines of at most 64 KiB), so a
// file that is no manifest is refused at its first bad line, unread beyond it.
absl::StatusOr<ImageList> ReadImageManifest(const std::string& manifest,
                                            const ReadOptions& options = {}, int64_t classes = 0);

struct ImageSplitNames {
  std::string path;          // class folders, or
  std::string manifest;      // a manifest
  std::string val_path;      // held-out class folders, or
  std::string val_manifest;  // a held-out manifest; neither: every k-th training image
  double val_fraction = 0.1;
};

struct ImageSplit {
  ImageList train;
  ImageList val;
  int64_t num_classes = 0;
};

// data.images' files: the training list, the held-out list (given, or every
// round(1 / val_fraction)-th training image, so that every class is held out alike), and
// the classes. Errors name the field (data.images.path, ...). Held-out class folders must
// be the training ones.
absl::StatusOr<ImageSplit> ListImageSplit(const ImageSplitNames& names,
                                          const ReadOptions& options = {});

// The sides of a sample of images, read from their headers.
struct SampledSides {
  size_t images = 0;
  int min_side = 0;
  int max_side = 0;
};

// Reads the headers (the first MiB, enough for any JPEG or PNG header) of up to `count`
// images spread over `files`, as a check before training: INVALID_ARGUMENT naming the
// first that is no image Stoke decodes; an open failure's status naming the file.
absl::StatusOr<SampledSides> CheckImageHeaders(const std::vector<ImageFile>& files, size_t count,
                                               const ReadOptions& options = {});

// Whether `name` ends in .jpg, .jpeg or .png, in any case.
bool IsImageFileName(const std::string& name);

}  // namespace stoke::data
