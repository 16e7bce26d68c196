// For the libFuzzer targets whose readers take a file: a folder of the target's own under
// $TMPDIR (made once per process), and each input written into it whole.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace stoke::fuzz {

inline const std::string& Folder() {
  static const std::string folder = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/stoke-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    return pattern;
  }();
  return folder;
}

// Writes `size` bytes to `name` in Folder(); its path.
inline std::string Write(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = Folder() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace stoke::fuzz
