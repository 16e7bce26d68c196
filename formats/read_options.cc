#include "formats/read_options.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "files/posix_files.h"
#include "files/rooted_open.h"
#include "formats/open_failure.h"

namespace stoke::data {

absl::StatusOr<int> OpenDataFile(const std::string& path, const ReadOptions& options,
                                 long long* size) {
  std::string error;
  if (options.roots.empty()) {
    bool not_regular = false;
    const int fd = files::OpenRegularFile(path, &error, size, &not_regular);
    if (fd < 0) return OpenFailure(not_regular, absl::StrCat(path, ": cannot open: ", error));
    return fd;
  }
  files::OpenRefusal why = files::OpenRefusal::kNone;
  const int fd = files::OpenRegularFileUnderRoots(options.roots, path, &error, size, &why);
  if (fd >= 0) return fd;
  const std::string message = absl::StrCat(path, ": cannot open: ", error);
  if (why == files::OpenRefusal::kOutsideRoots) return absl::PermissionDeniedError(message);
  return OpenFailure(why == files::OpenRefusal::kNotRegular, message);
}

namespace {

// Reads at most `limit` bytes; `refuse_larger`: a larger file is refused unread.
absl::Status Read(const std::string& path, const ReadOptions& options, size_t limit,
                  bool refuse_larger, std::string* bytes) {
  long long size = 0;  // NOLINT(google-runtime-int): OpenDataFile's type
  auto opened = OpenDataFile(path, options, &size);
  if (!opened.ok()) return opened.status();
  if (refuse_larger && static_cast<size_t>(size) > limit) {
    close(*opened);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes, more than the ", limit, " such a file may hold"));
  }
  bytes->resize(std::min(static_cast<size_t>(size), limit));
  const auto done = static_cast<size_t>(
      ReadFully(*opened, 0, static_cast<int64_t>(bytes->size()), bytes->data()));
  close(*opened);
  if (done != bytes->size()) {
    bytes->resize(done);
    return absl::DataLossError(
        absl::StrCat(path, ": ended after ", done, " bytes, short of its ", size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadDataFile(const std::string& path, const ReadOptions& options, size_t max_size,
                          std::string* bytes) {
  return Read(path, options, max_size, /*refuse_larger=*/true, bytes);
}

absl::Status ReadDataFileHead(const std::string& path, const ReadOptions& options, size_t limit,
                              std::string* bytes) {
  return Read(path, options, limit, /*refuse_larger=*/false, bytes);
}

absl::Status ReadDataFileRange(const std::string& path, const ReadOptions& options, int64_t offset,
                               int64_t length, std::string* bytes) {
  long long size = 0;  // NOLINT(google-runtime-int): OpenDataFile's type
  auto opened = OpenDataFile(path, options, &size);
  if (!opened.ok()) return opened.status();
  bytes->resize(static_cast<size_t>(length));
  const int64_t done = ReadFully(*opened, offset, length, bytes->data());
  close(*opened);
  if (done != length) {
    bytes->resize(static_cast<size_t>(done));
    return absl::DataLossError(
        absl::StrCat(path, ": ended before byte ", offset + length, " (", size, " bytes)"));
  }
  return absl::OkStatus();
}

int64_t ReadFully(int fd, int64_t offset, int64_t size, void* out) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, static_cast<char*>(out) + done, static_cast<size_t>(size - done),
                            static_cast<off_t>(offset + done));
    if (n <= 0) break;
    done += n;
  }
  return done;
}

absl::Status ReadCancelled(const std::string& path) {
  return absl::CancelledError(absl::StrCat(path, ": reading stopped: the job was cancelled"));
}

}  // namespace stoke::data
