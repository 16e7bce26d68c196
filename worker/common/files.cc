#include "worker/common/files.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace stoke::files {

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool MakeDirectories(const std::string& path, std::string* error) {
  if (path.empty() || IsDirectory(path)) return true;
  const auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !MakeDirectories(path.substr(0, slash), error)) {
    return false;
  }
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    if (error) *error = path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

std::vector<std::string> ListDirectory(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  return names;
}

bool RemoveTree(const std::string& path) {
  if (!Exists(path)) return true;
  // Children before parents (FTW_DEPTH); links removed, never followed (FTW_PHYS).
  nftw(
      path.c_str(),
      [](const char* file, const struct stat*, int, struct FTW*) {
        std::remove(file);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
  return !Exists(path);
}

bool Rename(const std::string& from, const std::string& to, std::string* error) {
  if (std::rename(from.c_str(), to.c_str()) == 0) return true;
  if (error) *error = std::strerror(errno);
  return false;
}

unsigned long long DirectorySize(const std::string& path) {
  unsigned long long total = 0;
  for (const auto& name : ListDirectory(path)) {
    struct stat st;
    if (stat((path + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
  }
  return total;
}

}  // namespace stoke::files
