#include "server/api/model_export.h"

#include "absl/strings/str_cat.h"

namespace stoke::server {

absl::StatusOr<std::string> ExportFileName(const v1::JobSpec& spec, v1::ModelFormat format) {
  if (spec.has_command()) {
    return absl::FailedPreconditionError(
        "a script job saves its own model: look in its STOKE_CHECKPOINT_DIR, the job's "
        "checkpoints folder on the coordinator's jobs storage");
  }
  const v1::ModelSpec& model = spec.model();
  const bool python = model.has_python();
  // Built-in networks export as TorchScript too: their forward written in ATen operations.
  const std::string formats =
      python ? "state_dict, safetensors or libtorch" : "torchscript or libtorch";
  auto unavailable = [&](const char* what) {
    return absl::FailedPreconditionError(
        absl::StrCat("format ", what, ": this job's model exports as ", formats));
  };
  switch (format) {
    case v1::MODEL_FORMAT_UNSPECIFIED:
      return python ? "state_dict.pt" : "model.torchscript.pt";
    case v1::MODEL_FORMAT_STATE_DICT:
      if (!python) return unavailable("state_dict");
      return "state_dict.pt";
    case v1::MODEL_FORMAT_SAFETENSORS:
      if (!python) return unavailable("safetensors");
      return "model.safetensors";
    case v1::MODEL_FORMAT_TORCHSCRIPT:
      if (python) return unavailable("torchscript");
      return "model.torchscript.pt";
    case v1::MODEL_FORMAT_LIBTORCH_ARCHIVE:
      return "model.pt";
    default:
      return absl::InvalidArgumentError(absl::StrCat("format: unknown value ", format));
  }
}

}  // namespace stoke::server
