// Submission-time checks of the files a job spec names: each path must lie under one of
// the coordinator's data roots (--data-root), exist, and hold data in the right format
// and size. Read with the worker's own torch-free readers (formats/), so what
// passes here loads there. The facts learned (sample shape, classes, vocabulary, how
// many samples) let the spec rules check the model and batch size against the data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::spec {

struct DataFacts {
  enum class Kind { kVector, kImage, kTokens };
  Kind kind = Kind::kVector;
  std::vector<int64_t> sample;  // [features], [C, H, W] or [context]
  int64_t num_classes = 0;
  int64_t vocab_size = 0;
  std::vector<int64_t> regression;  // floating targets: one target's dimensions
  int64_t train_samples = 0;        // samples (or token windows) in the training split
  std::string source;               // the field the data came from, for messages
};

class DataRoots {
 public:
  // Canonicalizes the roots; ones that do not exist are dropped.
  explicit DataRoots(const std::vector<std::string>& roots);
  // The canonical path of `path` if it lies under a root; INVALID_ARGUMENT naming `field`
  // otherwise (relative, missing, or outside every root).
  absl::StatusOr<std::string> Resolve(const std::string& field, const std::string& path) const;
  // "data:REL": the path of REL beneath the first root that holds it (for a brace
  // pattern, its folder; for "file.safetensors:tensor", the file). INVALID_ARGUMENT
  // naming `field` for an absolute REL, one that climbs out with "..", or one no root
  // holds. Resolve still checks what this returns.
  absl::StatusOr<std::string> FindBeneathRoots(const std::string& field,
                                               const std::string& relative) const;
  const std::vector<std::string>& roots() const { return roots_; }

 private:
  std::vector<std::string> roots_;
};

// Rewrites every "data:REL" path of `spec` (spec/data_paths.h) to where a data root holds
// it. INVALID_ARGUMENT names the field.
absl::Status ResolveDataRootPaths(v1::JobSpec& spec, const DataRoots& roots);

// Inspects the data a (structurally valid) spec names. INVALID_ARGUMENT names the field
// and the file.
absl::StatusOr<DataFacts> InspectData(const v1::JobSpec& spec, const DataRoots& roots);

}  // namespace stoke::spec
