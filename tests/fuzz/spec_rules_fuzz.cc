// libFuzzer target: the submission rules (job_spec_rules.h, model_size.h) on any JobSpec
// the wire can carry. Whatever the bytes, the rules answer OK or INVALID_ARGUMENT naming a
// field, never crash or overflow; and a spec they accept, once its defaults are filled in,
// still passes them (what is stored is what ran, and it is valid).
#include <cstddef>
#include <cstdint>

#include "server/api/data_checks.h"
#include "server/api/job_spec_rules.h"
#include "server/api/model_size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoke::v1::JobSpec spec;
  if (!spec.ParseFromArray(data, static_cast<int>(size))) return 0;
  spec.DiscardUnknownFields();
  auto refused = [](const absl::Status& s) {
    if (s.code() != absl::StatusCode::kInvalidArgument || s.message().empty()) __builtin_trap();
  };
  if (auto s = stoke::server::ValidateJobSpec(spec); !s.ok()) {
    refused(s);
    return 0;
  }
  // No data roots: every file path is refused, synthetic data is inspected in full.
  const stoke::server::DataRoots roots({});
  auto facts = stoke::server::InspectData(spec, roots);
  if (!facts.ok()) {
    refused(facts.status());
    return 0;
  }
  if (auto s = stoke::server::ValidateAgainstData(spec, *facts); !s.ok()) {
    refused(s);
    return 0;
  }
  stoke::server::ApplyJobSpecDefaults(spec, *facts);
  if (!stoke::server::ValidateJobSpec(spec).ok()) __builtin_trap();
  auto again = stoke::server::InspectData(spec, roots);
  if (!again.ok() || !stoke::server::ValidateAgainstData(spec, *again).ok()) __builtin_trap();
  return 0;
}
