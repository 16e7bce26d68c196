#include "formats/read_options.h"

#include "absl/strings/str_cat.h"
#include "formats/open_failure.h"
#include "worker/common/files.h"
#include "worker/common/rooted_open.h"

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

absl::Status ReadCancelled(const std::string& path) {
  return absl::CancelledError(absl::StrCat(path, ": reading stopped: the job was cancelled"));
}

}  // namespace stoke::data
