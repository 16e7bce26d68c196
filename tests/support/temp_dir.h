// A directory under $TMPDIR that exists for one test and is removed after it. POSIX
// calls, not std::filesystem, so that tests linked with the torch wheel can use it (see
// files/posix_files.h).
#pragma once

#include <cstdlib>
#include <string>

#include "files/posix_files.h"

namespace stoke::testing {

class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/stoke-test-XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { files::RemoveTree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace stoke::testing
