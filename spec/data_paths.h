// The file paths a job spec names (its data, a TorchScript model, a Python model's file, a
// script's folder), visited in one place for whoever rewrites them: the CLI makes relative
// ones absolute from the job file's folder, the coordinator resolves data-root ones.
//
// A path written "data:REL" is relative to the coordinator's data roots rather than to
// the job file: the coordinator takes the first root holding REL. A job file can then
// name a data set the same way on every cluster (examples/gpt-bytes.yaml does).
#pragma once

#include <functional>
#include <string>

#include "stoke/v1/job_spec.pb.h"

namespace stoke::spec {

inline constexpr char kDataRootPrefix[] = "data:";

// True for "data:REL".
bool IsDataRootPath(const std::string& path);

// Calls `visit(field, path)` for every non-empty path field of `spec`, with the field's
// name as errors give it ("data.tokens.train_path").
void ForEachPath(v1::JobSpec& spec,
                 const std::function<void(const std::string& field, std::string* path)>& visit);

}  // namespace stoke::spec
