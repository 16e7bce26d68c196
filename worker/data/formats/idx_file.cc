#include "worker/data/formats/idx_file.h"

#include <zlib.h>

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

absl::Status ReadExactly(gzFile file, const std::string& path, void* out, size_t n,
                         const std::string& what) {
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
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated: ", what, " needs ", n,
                                                     " bytes, the file has ", done));
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
  uint64_t total = 1;
  for (int i = 0; i < expected_dims; ++i) {
    unsigned char d[4];
    if (auto s = ReadExactly(file.get(), path, d, 4, "the header"); !s.ok()) return s;
    const int64_t dim = (int64_t{d[0]} << 24) | (int64_t{d[1]} << 16) | (int64_t{d[2]} << 8) | d[3];
    if (dim <= 0) return absl::InvalidArgumentError(absl::StrCat(path, ": dimension ", i, " is 0"));
    array.dims.push_back(dim);
    total *= static_cast<uint64_t>(dim);
  }
  if (total > (uint64_t{1} << 34)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": implausibly large (", total, " bytes)"));
  }
  array.bytes.resize(total);
  if (auto s = ReadExactly(file.get(), path, array.bytes.data(), total,
                           absl::StrCat("the header's ", array.dims[0], " entries"));
      !s.ok()) {
    return s;
  }
  char extra;
  if (gzread(file.get(), &extra, 1) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": longer than its header says (", total, " data bytes)"));
  }
  return array;
}

}  // namespace stoke::data
