// 16-bit copies of a step's fp32 weights, made together at the start of the step.
//
// Under bf16/fp16 autocast each linear layer casts its weight and bias before it
// multiplies: one small kernel each, 96 a GPT-2 small step, every one a node of the
// captured graph. AutocastLinear (half_linear.h) instead asks this table for a copy; the
// first time it finds none it casts as before and marks the parameter as wanted, and from
// the next step on the step runner's Refresh casts every wanted parameter in one kernel
// launch (worker/ops/cuda/cast_kernels.h) before the forward pass.
//
// A copy is handed out only while it is certainly the parameter's value: Refresh makes
// copies at the start of a step and Release drops them at its end, so nothing outside a
// step (evaluation, a checkpoint load, the batch search) can meet one; and each copy
// carries the parameter's version counter at the cast, so an in-place change inside the
// step retires it too. Without Stoke's CUDA kernels (CPU builds) Refresh makes nothing
// and every layer casts for itself.
//
// The table belongs to a training run's StepContext (step_context.h), through which layers
// and the step runner meet without knowing of each other. Entries hold their parameter
// weakly (a batch search's trial network asks too, and its memory must go with it) and
// are matched to the tensor itself, not just to its address, which a later tensor may
// reuse; Forget drops them when a job's step runner goes.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace stoke::worker {

class HalfWeights {
 public:
  // `parameter` is cast to `type` by a layer: Refresh should make that copy from now on.
  void Want(const torch::Tensor& parameter, at::ScalarType type);
  // Casts the wanted ones among `parameters` (fp32, contiguous, on a CUDA device) into
  // fresh buffers, one kernel launch per device and type (a few for more than 48).
  void Refresh(const std::vector<torch::Tensor>& parameters);
  // The copy of `parameter` in `type` that the running step's Refresh made, if there is
  // one and the parameter has not changed since; else an undefined tensor.
  torch::Tensor Find(const torch::Tensor& parameter, at::ScalarType type);
  // Drops these parameters' copies (they stay wanted): the step is over.
  void Release(const std::vector<torch::Tensor>& parameters);
  // Drops everything about these parameters.
  void Forget(const std::vector<torch::Tensor>& parameters);

 private:
  struct Entry {
    explicit Entry(const torch::Tensor& p) : parameter(p.getIntrusivePtr()) {}
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> parameter;
    at::ScalarType type = at::kBFloat16;
    torch::Tensor copy;
    int64_t version = -1;  // the parameter's at the cast
  };
  // The entry of `parameter` itself, or nullptr (an entry left by a dead tensor at the
  // same address is dropped). Called with mutex_ held.
  Entry* EntryOf(const torch::Tensor& parameter);

  std::mutex mutex_;
  std::unordered_map<const void*, Entry> entries_;
};

}  // namespace stoke::worker
