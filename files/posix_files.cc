#include "files/posix_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

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

FileSink::FileSink(std::string path) : path_(std::move(path)) {
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) Fail("cannot create");
}

FileSink::~FileSink() {
  if (fd_ >= 0) close(fd_);
}

int OpenRegularFile(const std::string& path, std::string* error, long long* size,
                    bool* not_regular) {
  if (not_regular) *not_regular = false;
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *error = std::strerror(errno);
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a special file";
    *error = std::string("not a regular file (") + kind + ")";
    if (not_regular) *not_regular = true;
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size) *size = static_cast<long long>(st.st_size);
  return fd;
}

void FileSink::Fail(const char* what) {
  if (error_.empty()) error_ = path_ + ": " + what + ": " + std::strerror(errno);
}

size_t FileSink::Write(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  size_t left = error_.empty() ? size : 0;
  while (left > 0) {
    const ssize_t n = write(fd_, bytes, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      Fail("cannot write");
      break;
    }
    bytes += n;
    left -= static_cast<size_t>(n);
  }
  return size;
}

bool FileSink::Finish(std::string* error) {
  if (fd_ >= 0) {
    if (error_.empty() && fsync(fd_) != 0) Fail("cannot flush");
    if (close(fd_) != 0) Fail("cannot close");
    fd_ = -1;
  }
  if (error != nullptr) *error = error_;
  return error_.empty();
}

}  // namespace stoke::files
