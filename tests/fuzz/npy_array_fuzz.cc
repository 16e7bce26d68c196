// libFuzzer target: the .npy reader, as the coordinator runs it on data.arrays (the file
// mapped, its header parsed, the labels scanned) and as the worker runs it on a shard's
// .npy member held in memory (whole, or only its head beside the member's size). The input
// is the file. Each must answer with an array or an error, never crash, never claim more
// rows than the file holds bytes for, and never loop over rows it does not hold.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/array_file.h"
#include "formats/array_set.h"
#include "tests/fuzz/array_invariants.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = stoke::fuzz::Write("array.npy", data, size);
  auto file = stoke::data::ArrayFile::Open(path);
  if (file.ok()) {
    stoke::fuzz::CheckArray(**file, size);
    (void)stoke::data::DescribeArray(**file);
  }
  // As data.arrays' inputs and targets at once: the labels scanned, the rows split.
  (void)stoke::data::OpenArraySet({path, path, "", "", 0.25});

  // A shard's member: in memory whole, and only its first 64 bytes beside its size.
  auto whole = stoke::data::ReadNpyHeader("member.npy", data, size);
  if (whole.ok() && whole->data_offset + static_cast<uint64_t>(whole->data_bytes) > size) {
    __builtin_trap();
  }
  const size_t head = std::min<size_t>(size, 64);
  auto from_head = stoke::data::ReadNpyHeader("member.npy", data, head, static_cast<int64_t>(size));
  // What the head alone accepts, the whole accepts alike.
  if (from_head.ok() && (!whole.ok() || from_head->shape != whole->shape)) __builtin_trap();
  return 0;
}
