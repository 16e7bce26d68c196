// Token files: a flat array of little-endian uint16 token ids, as nanoGPT's prepare
// scripts write them (and `stoke tokenize`). Mapped into memory, not read. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "formats/read_options.h"

namespace stoke::data {

class TokenFile {
 public:
  // Maps the file; errors name it (missing, empty, odd size).
  static absl::StatusOr<std::shared_ptr<const TokenFile>> Open(const std::string& path,
                                                               const ReadOptions& options = {});
  ~TokenFile();

  const uint16_t* tokens() const { return tokens_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // The first token id >= vocab_size, if any, among tokens [begin, end) (end -1: to the
  // last): -1 when every id is below it.
  int64_t FirstOutOfVocabulary(int64_t vocab_size, int64_t* id, int64_t begin = 0,
                               int64_t end = -1) const;

 private:
  TokenFile(std::string path, void* map, size_t bytes)
      : path_(std::move(path)),
        map_(map),
        bytes_(bytes),
        tokens_(static_cast<const uint16_t*>(map)),
        size_(static_cast<int64_t>(bytes / 2)) {}

  std::string path_;
  void* map_;
  size_t bytes_;
  const uint16_t* tokens_;
  int64_t size_;
};

// Byte-level tokenization: each byte of `text_path` becomes one token (vocabulary 256).
// Returns the number of tokens written to `token_path`.
absl::StatusOr<int64_t> TokenizeBytes(const std::string& text_path, const std::string& token_path);

}  // namespace stoke::data
