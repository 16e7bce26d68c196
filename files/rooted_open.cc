#include "files/rooted_open.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "files/descriptor.h"

namespace stoke::files {
namespace {

// As many links as the kernel follows in one lookup (MAXSYMLINKS).
constexpr int kMaxLinks = 40;

// The components of `path`, last first (so that the next one is at the back), without
// empty ones ("a//b") or ".".
void PushComponents(const std::string& path, std::vector<std::string>& pending) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    std::string part = path.substr(start, end - start);
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
    start = end + 1;
  }
  pending.insert(pending.end(), parts.rbegin(), parts.rend());
}

bool Beneath(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/';
}

const char* Kind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISLNK(mode)  ? "a symbolic link"
                          : "a special file";
}

int Refuse(OpenRefusal kind, std::string message, std::string* error, OpenRefusal* why) {
  *error = std::move(message);
  if (why) *why = kind;
  return -1;
}

}  // namespace

int OpenRegularFileUnderRoots(const std::vector<std::string>& roots, const std::string& path,
                              std::string* error, long long* size, OpenRefusal* why) {
  if (why) *why = OpenRefusal::kNone;
  if (path.empty() || path[0] != '/') {
    return Refuse(OpenRefusal::kOutsideRoots, "not an absolute path", error, why);
  }
  // The descriptors of the folders from "/" down to where the walk stands, and their
  // names: the path walked so far, with no link in it.
  std::vector<Descriptor> folders;
  std::vector<std::string> names;
  folders.emplace_back(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (folders.back().get() < 0) {
    return Refuse(OpenRefusal::kUnavailable, std::strerror(errno), error, why);
  }
  std::vector<std::string> pending;
  PushComponents(path, pending);
  std::string last;
  int links = 0;
  while (!pending.empty()) {
    std::string name = std::move(pending.back());
    pending.pop_back();
    if (name == "..") {
      if (folders.size() > 1) {
        folders.pop_back();
        names.pop_back();
      }
      continue;
    }
    char target[PATH_MAX];
    const ssize_t n = readlinkat(folders.back().get(), name.c_str(), target, sizeof(target));
    if (n >= 0) {
      if (++links > kMaxLinks || static_cast<size_t>(n) >= sizeof(target)) {
        return Refuse(OpenRefusal::kOutsideRoots, "too many levels of symbolic links", error, why);
      }
      const std::string to(target, static_cast<size_t>(n));
      if (!to.empty() && to[0] == '/') {
        folders.erase(folders.begin() + 1, folders.end());
        names.clear();
      }
      PushComponents(to, pending);
      continue;
    }
    if (errno != EINVAL) {  // EINVAL: there, and no link
      return Refuse(OpenRefusal::kUnavailable, std::strerror(errno), error, why);
    }
    if (pending.empty()) {
      last = std::move(name);
      break;
    }
    const int fd =
        openat(folders.back().get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      // A link appeared where the walk had just found none: ELOOP, or ENOTDIR from what is
      // a link (or, swapped back already, a folder again) rather than a file.
      const int open_errno = errno;
      struct stat now;
      const bool swapped = open_errno == ELOOP || (open_errno == ENOTDIR &&
                                                   fstatat(folders.back().get(), name.c_str(), &now,
                                                           AT_SYMLINK_NOFOLLOW) == 0 &&
                                                   (S_ISLNK(now.st_mode) || S_ISDIR(now.st_mode)));
      return Refuse(swapped ? OpenRefusal::kOutsideRoots : OpenRefusal::kUnavailable,
                    swapped ? "changed while being opened" : std::strerror(open_errno), error, why);
    }
    folders.emplace_back(fd);
    names.push_back(std::move(name));
  }
  std::string resolved;
  for (const auto& name : names) resolved += "/" + name;
  resolved += "/" + last;
  if (last.empty()) {
    return Refuse(OpenRefusal::kNotRegular, "not a regular file (a directory)", error, why);
  }
  bool inside = false;
  std::string listed;
  for (const auto& root : roots) {
    char canonical[PATH_MAX];
    if (realpath(root.c_str(), canonical) == nullptr) continue;
    listed += (listed.empty() ? "" : ", ") + std::string(canonical);
    inside = inside || Beneath(resolved, canonical);
  }
  if (!inside) {
    return Refuse(OpenRefusal::kOutsideRoots,
                  "leads to " + resolved + ", beneath none of the data roots (" +
                      (listed.empty() ? "none" : listed) + ")",
                  error, why);
  }
  const int parent = folders.back().get();
  struct stat st;
  // Looked at before it is opened: opening a device can have effects of its own.
  if (fstatat(parent, last.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Refuse(OpenRefusal::kUnavailable, std::strerror(errno), error, why);
  }
  if (!S_ISREG(st.st_mode)) {
    return Refuse(S_ISLNK(st.st_mode) ? OpenRefusal::kOutsideRoots : OpenRefusal::kNotRegular,
                  S_ISLNK(st.st_mode)
                      ? std::string("changed while being opened")
                      : std::string("not a regular file (") + Kind(st.st_mode) + ")",
                  error, why);
  }
  const int fd =
      openat(parent, last.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return Refuse(errno == ELOOP ? OpenRefusal::kOutsideRoots : OpenRefusal::kUnavailable,
                  errno == ELOOP ? "changed while being opened" : std::strerror(errno), error, why);
  }
  // Swapped for a FIFO between the look and the open: still refused, never waited on.
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Refuse(OpenRefusal::kNotRegular,
                  std::string("not a regular file (") + Kind(st.st_mode) + ")", error, why);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size) *size = static_cast<long long>(st.st_size);
  return fd;
}

}  // namespace stoke::files
