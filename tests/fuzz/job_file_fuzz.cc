// libFuzzer target: the job-file reader (YAML or JSON onto JobSpec). Whatever the bytes,
// ParseJobSpec returns a spec or an error naming the place; it never throws or crashes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "spec/job_spec_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = stoke::spec::ParseJobSpec(text, "fuzz.yaml");
  if (!spec.ok() && spec.status().message().rfind("fuzz.yaml", 0) != 0) __builtin_trap();
  return 0;
}
