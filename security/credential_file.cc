#include "security/credential_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace stoke::security {
namespace {

// PEM bundles of a few certificates are a few KiB; a CA bundle may reach a few hundred.
constexpr off_t kMaxBytes = 1 << 20;

}  // namespace

absl::StatusOr<std::string> ReadCredentialFile(const std::string& path, const std::string& what) {
  // O_NONBLOCK: a FIFO put where a certificate should be must not hang us in open().
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(what, " ", path, ": cannot open: ", strerror(errno)));
  }
  struct stat st;
  std::string text;
  absl::Status status;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": not a regular file"));
  } else if (st.st_size > kMaxBytes) {
    status = absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": larger than 1 MiB"));
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = read(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = absl::UnavailableError(absl::StrCat(what, " ", path, ": cannot read"));
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return text;
}

absl::StatusOr<std::string> ReadTokenFromFile(const std::string& path, const std::string& what) {
  auto text = ReadCredentialFile(path, what);
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(text->substr(0, text->find('\n'))));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": empty"));
  return token;
}

std::string ExposedSecretWarning(const std::string& path, const std::string& what) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0 || (st.st_mode & S_IROTH) == 0) return "";
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return absl::StrCat(what, " ", path, " can be read by every user of this machine (mode ", mode,
                      "): it holds a secret; chmod o-r it");
}

}  // namespace stoke::security
