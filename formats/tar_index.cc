#include "formats/tar_index.h"

#include <unistd.h>

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"

namespace stoke::data {
namespace {

constexpr int64_t kBlock = 512;
// Members between looks at the cancel flag.
constexpr int kCancelCheckEvery = 1024;
// A GNU long name or a pax header larger than this is no honest archive's.
constexpr int64_t kMaxExtendedHeader = 1 << 20;

// Offsets and sizes of ustar's header fields.
constexpr size_t kNameAt = 0, kNameSize = 100;
constexpr size_t kSizeAt = 124, kSizeSize = 12;
constexpr size_t kChecksumAt = 148, kChecksumSize = 8;
constexpr size_t kTypeAt = 156;
constexpr size_t kMagicAt = 257;
constexpr size_t kPrefixAt = 345, kPrefixSize = 155;

using Header = std::array<unsigned char, kBlock>;

// A NUL-terminated (or full) text field.
std::string Field(const Header& h, size_t at, size_t size) {
  const auto* begin = reinterpret_cast<const char*>(h.data() + at);
  return std::string(begin, std::find(begin, begin + size, '\0'));
}

// An octal number, padded with spaces or NULs; GNU's base-256 form when the high bit of
// its first byte is set. -1 when it is neither.
int64_t Number(const Header& h, size_t at, size_t size) {
  if (h[at] & 0x80) {
    int64_t value = h[at] & 0x7f;
    for (size_t i = at + 1; i < at + size; ++i) {
      if (value > (INT64_MAX >> 8)) return -1;
      value = (value << 8) | h[i];
    }
    return value;
  }
  int64_t value = 0;
  bool digits = false;
  for (size_t i = at; i < at + size; ++i) {
    const unsigned char c = h[i];
    if (c >= '0' && c <= '7') {
      if (value > (INT64_MAX >> 3)) return -1;
      value = value * 8 + (c - '0');
      digits = true;
    } else if (c == ' ' || c == '\0') {
      if (digits) break;
    } else {
      return -1;
    }
  }
  return digits ? value : -1;
}

bool ChecksumMatches(const Header& h) {
  int64_t sum = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    sum += (i >= kChecksumAt && i < kChecksumAt + kChecksumSize) ? ' ' : h[i];
  }
  return Number(h, kChecksumAt, kChecksumSize) == sum;
}

bool AllZero(const Header& h) {
  return std::all_of(h.begin(), h.end(), [](unsigned char c) { return c == 0; });
}

// The "path" record of a pax extended header ("LEN path=VALUE\n" records, LEN in decimal
// counting the whole record); empty if none. A record whose length is not digits, or does
// not reach past its own "LEN " and end in a newline within the text, ends the search.
std::string PaxPath(const std::string& records) {
  size_t at = 0;
  while (at < records.size()) {
    const size_t space = records.find(' ', at);
    if (space == std::string::npos || space == at || space - at > 19) break;
    size_t length = 0;
    for (size_t i = at; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9') return "";
      length = length * 10 + static_cast<size_t>(records[i] - '0');
    }
    // The record holds its length, the space, at least one byte and the newline.
    if (length < space - at + 3 || length > records.size() - at) break;
    const size_t end = at + length - 1;  // its newline
    if (records[end] != '\n') break;
    const std::string record = records.substr(space + 1, end - space - 1);
    if (record.rfind("path=", 0) == 0) return record.substr(5);
    at += length;
  }
  return "";
}

int64_t Padded(int64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

// Reads exactly `size` bytes at `offset`; false when the file ends first.
bool ReadAt(int fd, int64_t offset, int64_t size, void* out) {
  return ReadFully(fd, offset, size, out) == size;
}

}  // namespace

absl::StatusOr<std::vector<TarMember>> ReadTarIndex(
    const std::string& path, const ReadOptions& options,
    const std::function<bool(const std::string&)>& keep_content, int64_t content_limit) {
  long long file_size = 0;  // NOLINT(google-runtime-int): OpenDataFile's type
  auto opened = OpenDataFile(path, options, &file_size);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  auto fail = [&](absl::Status status) {
    close(fd);
    return status;
  };
  auto damaged = [&](int64_t at, const std::string& why) {
    return fail(absl::DataLossError(absl::StrCat(path, ": damaged tar at byte ", at, ": ", why)));
  };
  std::vector<TarMember> members;
  std::string long_name;  // from a GNU 'L' or pax header, for the member that follows
  int64_t offset = 0;
  for (int count = 0;; ++count) {
    if (count % kCancelCheckEvery == 0 && options.cancelled()) return fail(ReadCancelled(path));
    Header h;
    // An archive ends with a zero block: one that ends without is cut off (a copy that
    // stopped halfway), even where the cut falls between members.
    if (!ReadAt(fd, offset, kBlock, h.data())) {
      if (offset == 0) {
        return fail(absl::InvalidArgumentError(absl::StrCat(path, ": not a tar file")));
      }
      return damaged(offset, "cut off: the file ends before the archive's end");
    }
    if (AllZero(h)) break;
    if (!ChecksumMatches(h)) {
      if (offset == 0) {
        return fail(absl::InvalidArgumentError(absl::StrCat(path, ": not a tar file")));
      }
      return damaged(offset, "a header fails its checksum");
    }
    const int64_t size = Number(h, kSizeAt, kSizeSize);
    if (size < 0) return damaged(offset, "a header with no size");
    const int64_t contents = offset + kBlock;
    // Against what is left of the file, so that a size near 2^63 cannot overflow the sum.
    if (contents > file_size || size > file_size - contents) {
      return damaged(offset, absl::StrCat("a member of ", size, " bytes runs past the file's end"));
    }
    const char type = static_cast<char>(h[kTypeAt]);
    if (type == 'L' || type == 'x') {
      if (size > kMaxExtendedHeader) return damaged(offset, "an extended header too large");
      std::string text(static_cast<size_t>(size), '\0');
      if (!ReadAt(fd, contents, size, text.data())) return damaged(contents, "cut off");
      if (type == 'L') {
        long_name = text.substr(0, text.find('\0'));
      } else if (std::string pax = PaxPath(text); !pax.empty()) {
        long_name = std::move(pax);
      }
    } else if (type == '0' || type == '\0' || type == '7') {
      TarMember member;
      if (!long_name.empty()) {
        member.name = std::move(long_name);
      } else {
        const std::string prefix = std::equal(h.begin() + kMagicAt, h.begin() + kMagicAt + 5,
                                              reinterpret_cast<const unsigned char*>("ustar"))
                                       ? Field(h, kPrefixAt, kPrefixSize)
                                       : "";
        member.name = prefix.empty() ? Field(h, kNameAt, kNameSize)
                                     : absl::StrCat(prefix, "/", Field(h, kNameAt, kNameSize));
      }
      long_name.clear();
      member.offset = contents;
      member.size = size;
      if (keep_content && size <= content_limit && keep_content(member.name)) {
        member.content.resize(static_cast<size_t>(size));
        if (!ReadAt(fd, contents, size, member.content.data())) return damaged(contents, "cut off");
      }
      members.push_back(std::move(member));
    } else {
      long_name.clear();  // a directory, link or global header: nothing to train on
    }
    offset = contents + Padded(size);
  }
  close(fd);
  return members;
}

std::string ReadTarMemberName(const std::string& path, int64_t offset, const ReadOptions& options) {
  std::string block;
  if (offset < kBlock || !ReadDataFileRange(path, options, offset - kBlock, kBlock, &block).ok()) {
    return "";
  }
  Header h;
  std::copy(block.begin(), block.end(), h.begin());
  std::string name = Field(h, kNameAt, kNameSize);
  const char type = static_cast<char>(h[kTypeAt]);
  // A long name is in the 'L' or pax header before this one; this one's is a stand-in.
  if (!ChecksumMatches(h) || name.find("@LongLink") != std::string::npos ||
      !(type == '0' || type == '\0' || type == '7')) {
    return "";
  }
  return name;
}

}  // namespace stoke::data
