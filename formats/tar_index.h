// The members of a tar file (POSIX ustar, with GNU long names and pax paths), found by
// reading each member's header and skipping its contents, so that a shard of gigabytes is
// indexed in a few thousand small reads. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/read_options.h"

namespace stoke::data {

struct TarMember {
  std::string name;     // the member's path within the archive
  int64_t offset = 0;   // where its contents start in the file
  int64_t size = 0;     // bytes of contents
  std::string content;  // read with the index, for members `keep_content` named
};

// Regular-file members in archive order (directories, links and others are passed over).
// `keep_content` (may be empty) picks the members whose contents, when at most
// `content_limit` bytes, are read into TarMember::content: small labels beside large
// images. DATA_LOSS naming the file and the byte for a header that fails its checksum or
// a member cut off by the file's end; INVALID_ARGUMENT for a file that is no tar.
absl::StatusOr<std::vector<TarMember>> ReadTarIndex(
    const std::string& path, const ReadOptions& options,
    const std::function<bool(const std::string&)>& keep_content = {},
    int64_t content_limit = 64 * 1024);

// The name in the ustar header of the member whose contents start at `offset` (the block
// before them); empty when it cannot be read or the member has a long name (its header
// holds a placeholder).
std::string ReadTarMemberName(const std::string& path, int64_t offset, const ReadOptions& options);

}  // namespace stoke::data
