// libFuzzer target: the submission rules (job_spec_rules.h, model_size.h) on any JobSpec
// the wire can carry. Whatever the bytes, the rules answer OK or INVALID_ARGUMENT naming a
// field, never crash or overflow; and a spec they accept, once its defaults are filled in,
// still passes them (what is stored is what ran, and it is valid).
#include <cstddef>
#include <cstdint>

#include "spec/data_checks.h"
#include "spec/job_spec_rules.h"
#include "spec/model_size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoke::v1::JobSpec spec;
  if (!spec.ParseFromArray(data, static_cast<int>(size))) return 0;
  spec.DiscardUnknownFields();
  auto refused = [](const absl::Status& s) {
    if (s.code() != absl::StatusCode::kInvalidArgument || s.message().empty()) __builtin_trap();
  };
  if (auto s = stoke::spec::ValidateJobSpec(spec); !s.ok()) {
    refused(s);
    return 0;
  }
  // No data roots: every file path is refused, synthetic data is inspected in full.
  const stoke::spec::DataRoots roots({});
  auto facts = stoke::spec::InspectData(spec, roots);
  if (!facts.ok()) {
    refused(facts.status());
    return 0;
  }
  if (auto s = stoke::spec::ValidateAgainstData(spec, *facts); !s.ok()) {
    refused(s);
    return 0;
  }
  stoke::spec::ApplyJobSpecDefaults(spec, *facts);
  if (!stoke::spec::ValidateJobSpec(spec).ok()) __builtin_trap();
  auto again = stoke::spec::InspectData(spec, roots);
  if (!again.ok() || !stoke::spec::ValidateAgainstData(spec, *again).ok()) __builtin_trap();
  return 0;
}
