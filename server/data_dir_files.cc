#include "server/data_dir_files.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "security/credential_file.h"
#include "security/token_hash.h"

namespace fs = std::filesystem;

namespace stoke::server {

// Tools and scripts poll for these files: they must never see one half written, and a
// coordinator that cannot write them (a full disk) says so rather than leave them waiting.
absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    const std::string cause = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", cause));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());  // no half-done file left beside the real one
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LocalWorkerToken(const std::string& path) {
  // Reused only if it is this user's own file that no one else may read: a token planted
  // by another user, or readable by others, would let them attach as a worker.
  struct stat st;
  const bool exists = lstat(path.c_str(), &st) == 0;
  const bool private_file =
      exists && S_ISREG(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 077) == 0;
  if (exists && !private_file) {
    spdlog::warn(
        "{}: not a file of this user's that only it can read (mode {:o}, owner uid {}); "
        "making a new token (local workers still holding the old one must be restarted)",
        path, st.st_mode & 07777, st.st_uid);
  }
  auto token = private_file ? security::ReadTokenFromFile(path, "local worker token")
                            : absl::StatusOr<std::string>(absl::NotFoundError("none"));
  if (token.ok()) return token;
  token = security::NewToken();
  if (!token.ok()) return token.status();
  std::remove(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  const std::string line = *token + "\n";
  if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  close(fd);
  return token;
}

}  // namespace stoke::server
