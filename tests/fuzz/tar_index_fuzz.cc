// libFuzzer target: the tar reader behind data.shards, as the coordinator runs it: the
// index of members (ustar, GNU long names and base-256 sizes, pax paths), the samples and
// labels they group into, and the headers of samples' members (.npy headers from a
// member's head, images' first bytes). The input is the shard. Each must answer or fail,
// never crash, never hang (a pax record's length once sent the reader back for ever), and
// never read or allocate a member's claimed size.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/image_files.h"
#include "formats/shard_files.h"
#include "formats/tar_index.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = stoke::fuzz::Write("shard.tar", data, size);
  auto members = stoke::data::ReadTarIndex(
      path, {}, [](const std::string& name) { return name.size() % 2 == 0; }, 512);
  if (members.ok()) {
    for (const auto& m : *members) {
      // Every member lies within the file, after its header.
      if (m.offset < 512 || m.size < 0 || m.size > static_cast<int64_t>(size) - m.offset) {
        __builtin_trap();
      }
      if (!m.content.empty() && m.content.size() != static_cast<size_t>(m.size)) __builtin_trap();
      (void)stoke::data::ReadTarMemberName(path, m.offset, {});
    }
  }
  stoke::data::ShardInput input = stoke::data::ShardInput::kImage;
  auto samples = stoke::data::ListShardSamples(path, {}, &input);
  if (!samples.ok()) return 0;
  size_t read = 0;
  std::string bytes;
  for (const auto& sample : *samples) {
    if (++read > 8) break;
    if (sample.label < 0 || sample.offset < 0 ||
        sample.offset + sample.length > static_cast<int64_t>(size)) {
      __builtin_trap();
    }
    (void)stoke::data::DescribeImageFile(sample, {});
    if (input == stoke::data::ShardInput::kArray) {
      (void)stoke::data::ReadShardArrayHeader(sample, {}, 4096);
    } else {
      (void)stoke::data::ReadImageHead(sample, {}, 4096, &bytes);
      if (bytes.size() > 4096) __builtin_trap();
      (void)stoke::data::ReadImageBytes(sample, {}, 1 << 16, &bytes);
      if (bytes.size() > (1 << 16)) __builtin_trap();
    }
  }
  return 0;
}
