#include "formats/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "files/posix_files.h"
#include "formats/open_failure.h"

namespace stoke::data {

absl::StatusOr<std::shared_ptr<const TokenFile>> TokenFile::Open(const std::string& path,
                                                                 const ReadOptions& options) {
  long long size = 0;
  auto opened = OpenDataFile(path, options, &size);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  const size_t bytes = static_cast<size_t>(size);
  if (bytes < 4) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds ", bytes / 2, " tokens; too few"));
  }
  if (bytes % 2 != 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", bytes, " bytes is not a whole number of uint16 tokens; is it a token file?"));
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot map: ", std::strerror(errno)));
  }
  return std::shared_ptr<const TokenFile>(new TokenFile(path, map, bytes));
}

TokenFile::~TokenFile() { munmap(map_, bytes_); }

int64_t TokenFile::FirstOutOfVocabulary(int64_t vocab_size, int64_t* id, int64_t begin,
                                        int64_t end) const {
  if (end < 0 || end > size_) end = size_;
  for (int64_t i = std::max<int64_t>(begin, 0); i < end; ++i) {
    if (tokens_[i] >= vocab_size) {
      *id = tokens_[i];
      return i;
    }
  }
  return -1;
}

absl::StatusOr<int64_t> TokenizeBytes(const std::string& text_path, const std::string& token_path) {
  // A regular file only: a folder would read as empty ("wrote 0 tokens"), a FIFO would
  // wait for a writer.
  std::string error;
  bool not_regular = false;
  const int fd = files::OpenRegularFile(text_path, &error, nullptr, &not_regular);
  if (fd < 0) return OpenFailure(not_regular, absl::StrCat(text_path, ": cannot open: ", error));
  close(fd);
  std::ifstream in(text_path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(text_path, ": cannot open: ", std::strerror(errno)));
  std::ofstream out(token_path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat(token_path, ": cannot write: ", std::strerror(errno)));
  }
  std::vector<char> buffer(1 << 20);
  std::vector<uint16_t> tokens;
  int64_t count = 0;
  while (in && out) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize n = in.gcount();
    tokens.resize(static_cast<size_t>(n));
    for (std::streamsize i = 0; i < n; ++i) tokens[i] = static_cast<unsigned char>(buffer[i]);
    // Little-endian on disk, whatever the host (every host Stoke runs on is).
    out.write(reinterpret_cast<const char*>(tokens.data()), n * 2);
    count += n;
  }
  // Closed here, not by the destructor: the last buffered bytes are written now, and a
  // failure to write them (a full disk) is reported instead of lost.
  if (out) out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat(token_path, ": cannot write: ", std::strerror(errno)));
  }
  return count;
}

}  // namespace stoke::data
