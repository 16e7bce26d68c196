#include "server/core/job_folder_usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

namespace stoke::server {
namespace {

// Deeper than any checkpoint layout; a deeper tree is someone's trick, not a job's files.
constexpr int kMaxDepth = 32;

// The names in the folder open as `fd` (which this closes).
std::vector<std::string> NamesIn(int fd) {
  std::vector<std::string> names;
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    close(fd);
    return names;
  }
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  return names;
}

uint64_t BytesBeneath(int parent, const std::string& name, int depth) {
  struct stat st {};
  if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
  if (S_ISREG(st.st_mode)) return static_cast<uint64_t>(st.st_blocks) * 512;
  if (!S_ISDIR(st.st_mode) || depth >= kMaxDepth) return 0;
  const int fd = openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t total = 0;
  for (const std::string& child : NamesIn(dup(fd))) total += BytesBeneath(fd, child, depth + 1);
  close(fd);
  return total;
}

}  // namespace

uint64_t FolderBytes(const std::string& dir) { return BytesBeneath(AT_FDCWD, dir, 0); }

std::map<std::string, uint64_t> BytesPerOwner(
    const std::string& jobs_dir,
    const std::function<std::optional<std::string>(const std::string& job_id)>& owner_of) {
  std::map<std::string, uint64_t> bytes;
  const int fd = open(jobs_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return bytes;
  for (const std::string& id : NamesIn(dup(fd))) {
    std::optional<std::string> owner = owner_of(id);
    if (owner) bytes[*owner] += BytesBeneath(fd, id, 1);
  }
  close(fd);
  return bytes;
}

}  // namespace stoke::server
