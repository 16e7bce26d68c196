// libFuzzer target: the readers the coordinator runs on submitted data files (idx
// headers and labels, plain or gzipped; token files; CIFAR-10 batches). The first byte
// picks the reader, the rest is the file. Each must answer with facts or an error, never
// crash, and never claim memory the file does not justify (run with -rss_limit_mb).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/idx_file.h"
#include "formats/image_set.h"
#include "formats/token_file.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t which = data[0] % 4;
  ++data;
  --size;
  switch (which) {
    case 0:
    case 1: {
      const std::string path = stoke::fuzz::Write("file.idx", data, size);
      const int dims = which == 0 ? 1 : 3;
      auto shape = stoke::data::InspectIdxFile(path, dims, /*scan_max=*/which == 0);
      auto array = stoke::data::ReadIdxFile(path, dims);
      // Both readers agree on what a file holds.
      if (array.ok() && shape.ok() && array->dims != shape->dims) __builtin_trap();
      break;
    }
    case 2: {
      const std::string path = stoke::fuzz::Write("tokens.bin", data, size);
      auto file = stoke::data::TokenFile::Open(path);
      if (file.ok()) {
        int64_t id = 0;
        (*file)->FirstOutOfVocabulary(256, &id);
      }
      break;
    }
    default: {
      for (const char* name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                               "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"}) {
        stoke::fuzz::Write(name, data, size);
      }
      const std::string& folder = stoke::fuzz::Folder();
      auto shape = stoke::data::InspectCifar10Folder(folder);
      auto loaded = stoke::data::ReadCifar10Folder(folder);
      if (shape.ok() != loaded.ok()) __builtin_trap();
      break;
    }
  }
  return 0;
}
