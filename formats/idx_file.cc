#include "formats/idx_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoke::data {
namespace {

// gzread reads plain files too, so one path serves both.
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads n bytes. When they are one piece of a longer read, `before` bytes of which are
// read already and `needed` bytes in all, the error says so of the whole.
absl::Status ReadExactly(gzFile file, const std::string& path, void* out, size_t n,
                         const std::string& what, uint64_t before = 0, uint64_t needed = 0) {
  size_t done = 0;
  auto* dst = static_cast<char*>(out);
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    int got = gzread(file, dst + done, chunk);
    if (got < 0) {
      int err = 0;
      const char* message = gzerror(file, &err);
      return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read: ", message));
    }
    if (got == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated: ", what, " needs ",
                                                     needed ? needed : n, " bytes, the file has ",
                                                     before + done));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_dims) {
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  gzbuffer(file.get(), 1 << 20);
  unsigned char magic[4];
  if (auto s = ReadExactly(file.get(), path, magic, 4, "the header"); !s.ok()) return s;
  const uint32_t expected_magic = 0x00000800u | static_cast<uint32_t>(expected_dims);
  const uint32_t found = (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) |
                         (uint32_t{magic[2]} << 8) | magic[3];
  if (found != expected_magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: wrong magic number 0x%08x (expected 0x%08x: unsigned bytes in %d dimensions); is "
        "it an idx file of the right kind?",
        path, found, expected_magic, expected_dims));
  }
  IdxArray array;
  constexpr uint64_t kMaxBytes = uint64_t{1} << 34;
  uint64_t total = 1;
  for (int i = 0; i < expected_dims; ++i) {
    unsigned char d[4];
    if (auto s = ReadExactly(file.get(), path, d, 4, "the header"); !s.ok()) return s;
    const int64_t dim = (int64_t{d[0]} << 24) | (int64_t{d[1]} << 16) | (int64_t{d[2]} << 8) | d[3];
    if (dim <= 0) return absl::InvalidArgumentError(absl::StrCat(path, ": dimension ", i, " is 0"));
    array.dims.push_back(dim);
    // Checked before multiplying: three 32-bit dimensions can overflow 64 bits.
    if (total > kMaxBytes / static_cast<uint64_t>(dim)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": implausibly large (its header claims more than ", kMaxBytes, " bytes)"));
    }
    total *= static_cast<uint64_t>(dim);
  }
  // The buffer grows as data arrives rather than to the header's size at once: a short
  // file with a damaged header must not make the reader (the coordinator, at submission)
  // claim gigabytes. The reservation (at most 256 MiB) stays address space until written.
  constexpr uint64_t kPiece = uint64_t{1} << 24;
  array.bytes.reserve(static_cast<size_t>(std::min<uint64_t>(total, uint64_t{1} << 28)));
  const std::string what = absl::StrCat("the header's ", array.dims[0], " entries");
  while (array.bytes.size() < total) {
    const uint64_t before = array.bytes.size();
    const uint64_t n = std::min(total - before, kPiece);
    array.bytes.resize(static_cast<size_t>(before + n));
    if (auto s = ReadExactly(file.get(), path, array.bytes.data() + before, static_cast<size_t>(n),
                             what, before, total);
        !s.ok()) {
      return s;
    }
  }
  char extra;
  if (gzread(file.get(), &extra, 1) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": longer than its header says (", total, " data bytes)"));
  }
  return array;
}

}  // namespace stoke::data
