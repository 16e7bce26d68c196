// libFuzzer target: the image manifest reader the coordinator runs on data.images.manifest
// and val_manifest (and `stoke data inspect` on a .csv or .jsonl). The first byte picks CSV
// or JSON lines, and whether the file is also read as a held-out manifest beside itself;
// the rest is the manifest. Each read must answer with a list or an error, never crash,
// and never make more classes than the manifest has lines (an integer label of 2^40 once
// made 2^40 class names).
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/image_files.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t how = data[0];
  const std::string path =
      stoke::fuzz::Write((how & 1) ? "images.jsonl" : "images.csv", data + 1, size - 1);
  auto listed = stoke::data::ReadImageManifest(path);
  if (listed.ok()) {
    if (listed->files.empty() || listed->classes.size() > listed->files.size()) __builtin_trap();
    for (const auto& file : listed->files) {
      if (file.label < 0 || file.label >= static_cast<int64_t>(listed->classes.size())) {
        __builtin_trap();
      }
    }
  }
  if (how & 2) {
    // Itself as its own held-out manifest: the labels it accepts as training labels it
    // accepts as held-out ones.
    auto split = stoke::data::ListImageSplit({"", path, "", path, 0.1});
    if (split.ok() != listed.ok()) __builtin_trap();
    if (split.ok() && split->num_classes != static_cast<int64_t>(listed->classes.size())) {
      __builtin_trap();
    }
  }
  return 0;
}
