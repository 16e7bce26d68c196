#include "worker/ops/step_context.h"

#include <ATen/ATen.h>

#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

// This thread's innermost installed context: each thread starts with none, so a job's
// settings never reach another thread unless a scope carries them there.
thread_local StepContext* current_context = nullptr;

}  // namespace

StepContext* StepContext::Current() { return current_context; }

StepContextScope::StepContextScope(StepContext* context) : previous_(current_context) {
  current_context = context;
}

StepContextScope::~StepContextScope() { current_context = previous_; }

bool OwnKernelsAllowed() {
  const StepContext* context = StepContext::Current();
  return context == nullptr || context->own_kernels_allowed();
}

std::optional<at::ScalarType> StepHalfType(const torch::Tensor& x) {
  if (!OwnKernelsAllowed() || !x.is_cuda()) return std::nullopt;
  const compat::AutocastState autocast = compat::GetAutocast(c10::DeviceType::CUDA);
  if (!autocast.enabled || (autocast.dtype != at::kBFloat16 && autocast.dtype != at::kHalf)) {
    return std::nullopt;
  }
  return autocast.dtype;
}

torch::Tensor StepHalfCopy(StepContext* context, const torch::Tensor& parameter,
                           at::ScalarType type) {
  if (parameter.scalar_type() == type) return parameter;
  if (context == nullptr) return parameter.to(type);
  HalfWeights& table = context->half_weights();
  torch::Tensor copy = table.Find(parameter, type);
  if (copy.defined()) return copy;
  table.Want(parameter, type);
  return parameter.to(type);
}

}  // namespace stoke::worker
