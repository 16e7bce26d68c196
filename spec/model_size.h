// What a job would need to allocate, judged at submission from the spec and its data:
// the model's parameters layer by layer, its weights, gradients and optimizer state, and
// a lower bound on one step's input and activations. A job that cannot fit on any device
// is refused here, naming the field to change, instead of failing (and being retried)
// on a worker. The arithmetic is 64-bit and saturates rather than wrapping, so no spec
// can make a size look small by overflowing it.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "spec/data_checks.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::spec {

// One rank holds the whole model (data parallel): its weights, gradients and optimizer
// state, plus one step's inputs and activations, must fit in this much memory, about one
// of the largest GPUs (an H200 has 141 GB). docs/operations.md's limits section states it.
inline constexpr uint64_t kMaxStepBytes = uint64_t{128} << 30;

// The widest input an MLP takes (its first layer is input_dim x hidden).
inline constexpr uint64_t kMaxMlpInputs = uint64_t{1} << 20;

// a * b and a + b, or UINT64_MAX where the true value does not fit.
uint64_t SaturatingMul(uint64_t a, uint64_t b);
uint64_t SaturatingAdd(uint64_t a, uint64_t b);

struct ModelSize {
  uint64_t parameters = 0;
  // fp32 weights, gradients and optimizer state.
  uint64_t state_bytes = 0;
  // One step's input batch and the activations it keeps, at the least.
  uint64_t step_bytes = 0;
};

// The size of the model `spec` describes on `data` (TorchScript models: unknown, zero).
// Expects a spec that passed ValidateJobSpec.
ModelSize EstimateModelSize(const v1::JobSpec& spec, const DataFacts& data);

// INVALID_ARGUMENT naming the field when the job cannot fit in kMaxStepBytes: the first
// layer that alone exceeds it, else the model, else the batch.
absl::Status CheckModelSize(const v1::JobSpec& spec, const DataFacts& data);

}  // namespace stoke::spec
