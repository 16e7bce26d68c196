// libFuzzer target: the safetensors reader the coordinator runs on data.arrays (and
// `stoke data inspect`): its 8-byte header length, its JSON header (walked for its depth
// and size before it is parsed) and each tensor's dtype, shape and data_offsets. The input
// is the file. Each read must answer with arrays or an error, never crash, never claim
// memory its header's size does not justify (run with -rss_limit_mb), and never claim
// rows the file does not hold.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/array_file.h"
#include "tests/fuzz/array_invariants.h"
#include "tests/fuzz/fuzz_files.h"

namespace {

void Check(const std::string& name, size_t size) {
  auto file = stoke::data::ArrayFile::Open(name);
  if (!file.ok()) return;
  stoke::fuzz::CheckArray(**file, size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = stoke::fuzz::Write("arrays.safetensors", data, size);
  Check(path, size);  // a file of one tensor
  auto names = stoke::data::ListArrays(path);
  if (names.ok()) {
    size_t opened = 0;
    for (const std::string& name : *names) {
      if (++opened > 8) break;
      Check(name, size);
    }
  }
  return 0;
}
