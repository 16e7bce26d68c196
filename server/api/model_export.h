// Which file of a checkpoint an export is (DownloadModel's format): a Python model's
// state_dict or safetensors, a TorchScript model's scripted module, or the LibTorch archive
// every checkpoint holds.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "stoke/v1/coordinator.pb.h"

namespace stoke::server {

// The file's name in the checkpoint's folder; FAILED_PRECONDITION when this model writes
// no such export (a state_dict of a built-in model, say), naming the formats it has, or
// when the job is a script job (its program saves its own model).
absl::StatusOr<std::string> ExportFileName(const v1::JobSpec& spec, v1::ModelFormat format);

}  // namespace stoke::server
