#include "formats/idx_file.h"

#include <unistd.h>
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

// Opens `path` (a regular file only, never waiting on a FIFO) for gzread, which reads
// plain files too. *plain_size: the file's size when it is not gzipped, else -1.
absl::StatusOr<std::unique_ptr<gzFile_s, GzCloser>> OpenIdx(const std::string& path,
                                                            const ReadOptions& options,
                                                            long long* plain_size,
                                                            uint32_t* gzip_isize) {
  long long size = 0;
  auto opened = OpenDataFile(path, options, &size);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  unsigned char head[2] = {0, 0};
  const bool gzipped =
      size >= 18 && pread(fd, head, 2, 0) == 2 && head[0] == 0x1f && head[1] == 0x8b;
  *plain_size = gzipped ? -1 : size;
  if (gzipped && gzip_isize) {
    // A gzip member ends with its uncompressed size modulo 2^32, little-endian.
    unsigned char tail[4] = {0, 0, 0, 0};
    if (pread(fd, tail, 4, size - 4) == 4) {
      *gzip_isize = uint32_t{tail[0]} | (uint32_t{tail[1]} << 8) | (uint32_t{tail[2]} << 16) |
                    (uint32_t{tail[3]} << 24);
    }
  }
  std::unique_ptr<gzFile_s, GzCloser> file(gzdopen(fd, "rb"));
  if (!file) {
    close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: out of memory"));
  }
  gzbuffer(file.get(), 1 << 20);
  return file;
}

// The magic number and the dimensions; *total: the data bytes they announce.
absl::StatusOr<std::vector<int64_t>> ReadHeader(gzFile file, const std::string& path,
                                                int expected_dims, uint64_t* total) {
  unsigned char magic[4];
  if (auto s = ReadExactly(file, path, magic, 4, "the header"); !s.ok()) return s;
  const uint32_t expected_magic = 0x00000800u | static_cast<uint32_t>(expected_dims);
  const uint32_t found = (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) |
                         (uint32_t{magic[2]} << 8) | magic[3];
  // What was found is not quoted: a message must never carry a file's bytes.
  if (found != expected_magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: wrong magic number (expected 0x%08x: unsigned bytes in %d dimensions); is it an "
        "idx file of the right kind?",
        path, expected_magic, expected_dims));
  }
  std::vector<int64_t> dims;
  constexpr uint64_t kMaxBytes = uint64_t{1} << 34;
  *total = 1;
  for (int i = 0; i < expected_dims; ++i) {
    unsigned char d[4];
    if (auto s = ReadExactly(file, path, d, 4, "the header"); !s.ok()) return s;
    const int64_t dim = (int64_t{d[0]} << 24) | (int64_t{d[1]} << 16) | (int64_t{d[2]} << 8) | d[3];
    if (dim <= 0) return absl::InvalidArgumentError(absl::StrCat(path, ": dimension ", i, " is 0"));
    dims.push_back(dim);
    // Checked before multiplying: three 32-bit dimensions can overflow 64 bits.
    if (*total > kMaxBytes / static_cast<uint64_t>(dim)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": implausibly large (its header claims more than ", kMaxBytes, " bytes)"));
    }
    *total *= static_cast<uint64_t>(dim);
  }
  return dims;
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_dims,
                                     const ReadOptions& options) {
  long long plain_size = 0;
  auto file = OpenIdx(path, options, &plain_size, nullptr);
  if (!file.ok()) return file.status();
  IdxArray array;
  uint64_t total = 0;
  auto dims = ReadHeader(file->get(), path, expected_dims, &total);
  if (!dims.ok()) return dims.status();
  array.dims = *std::move(dims);
  // The buffer grows as data arrives rather than to the header's size at once: a short
  // file with a damaged header must not make the reader claim gigabytes. The reservation
  // (at most 256 MiB) stays address space until written.
  constexpr uint64_t kPiece = uint64_t{1} << 24;
  array.bytes.reserve(static_cast<size_t>(std::min<uint64_t>(total, uint64_t{1} << 28)));
  const std::string what = absl::StrCat("the header's ", array.dims[0], " entries");
  while (array.bytes.size() < total) {
    if (options.cancelled()) return ReadCancelled(path);
    const uint64_t before = array.bytes.size();
    const uint64_t n = std::min(total - before, kPiece);
    array.bytes.resize(static_cast<size_t>(before + n));
    if (auto s = ReadExactly(file->get(), path, array.bytes.data() + before, static_cast<size_t>(n),
                             what, before, total);
        !s.ok()) {
      return s;
    }
  }
  char extra;
  if (gzread(file->get(), &extra, 1) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": longer than its header says (", total, " data bytes)"));
  }
  return array;
}

absl::StatusOr<IdxShape> InspectIdxFile(const std::string& path, int expected_dims, bool scan_max,
                                        const ReadOptions& options) {
  long long plain_size = 0;
  uint32_t gzip_isize = 0;
  auto file = OpenIdx(path, options, &plain_size, &gzip_isize);
  if (!file.ok()) return file.status();
  IdxShape shape;
  uint64_t total = 0;
  auto dims = ReadHeader(file->get(), path, expected_dims, &total);
  if (!dims.ok()) return dims.status();
  shape.dims = *std::move(dims);
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(expected_dims);
  const std::string what = absl::StrCat("the header's ", shape.dims[0], " entries");
  if (plain_size >= 0) {
    const uint64_t has = static_cast<uint64_t>(plain_size) - header;
    if (has < total) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated: ", what, " needs ", total,
                                                     " bytes, the file has ", has));
    }
    if (has > total) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": longer than its header says (", total, " data bytes)"));
    }
  } else if (!scan_max && static_cast<uint32_t>(header + total) != gzip_isize) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": its gzip trailer records ", gzip_isize, " uncompressed bytes (modulo 2^32), but ",
        what, " need ", header + total, "; is it truncated or more than one gzip member?"));
  }
  if (!scan_max) return shape;
  // Labels: a piece at a time, so a gzip bomb costs time bounded by its header, not memory.
  std::vector<uint8_t> piece(1 << 20);
  uint64_t done = 0;
  while (done < total) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(total - done, piece.size()));
    if (auto s = ReadExactly(file->get(), path, piece.data(), n, what, done, total); !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < n; ++i) shape.max_value = std::max<int>(shape.max_value, piece[i]);
    done += n;
  }
  char extra;
  if (gzread(file->get(), &extra, 1) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": longer than its header says (", total, " data bytes)"));
  }
  return shape;
}

}  // namespace stoke::data
