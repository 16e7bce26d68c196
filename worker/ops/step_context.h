// What the layers of one training run share with the code that steps it, passed down as
// an object instead of kept in process-wide tables:
// - whether Stoke's own CUDA kernels may run (`training.fused_kernels`; off, every layer
//   takes ATen's operations, as a build without nvcc does);
// - the step's 16-bit weight copies (HalfWeights: the step runner fills and empties it,
//   the linear layers read it);
// - where a weight's gradient may be written directly (GradientDestinations: the gradient
//   reducer offers its bucket slices, the linear layers' backward takes them).
//
// The training run owns its context. A StepContextScope installs it on the thread that
// builds and steps the run; the layers find it through StepContext::Current(). Backward
// may run on autograd's own threads, where no scope is installed, so a layer that needs
// the context in backward keeps the pointer it found in forward (in the autograd node's
// saved data), and the activation checkpoint installs the forward pass's context again
// around its recompute. Outside any scope (unit tests calling a layer, a network built by
// hand) layers run as a run with the default settings would, with no tables: own kernels
// allowed, every weight cast where it is used, every gradient in a fresh tensor.
#pragma once

#include <optional>

#include "worker/ops/gradient_destinations.h"
#include "worker/ops/half_weights.h"

namespace stoke::worker {

class StepContext {
 public:
  explicit StepContext(bool own_kernels_allowed) : own_kernels_allowed_(own_kernels_allowed) {}
  StepContext(const StepContext&) = delete;
  StepContext& operator=(const StepContext&) = delete;

  bool own_kernels_allowed() const { return own_kernels_allowed_; }
  HalfWeights& half_weights() { return half_weights_; }
  GradientDestinations& gradient_destinations() { return gradient_destinations_; }

  // The context the innermost StepContextScope of this thread installed, or nullptr.
  static StepContext* Current();

 private:
  const bool own_kernels_allowed_;
  HalfWeights half_weights_;
  GradientDestinations gradient_destinations_;
};

// Installs a context on this thread for its lifetime, then restores the one it found.
// nullptr installs none (layers inside run as outside any scope).
class StepContextScope {
 public:
  explicit StepContextScope(StepContext* context);
  ~StepContextScope();
  StepContextScope(const StepContextScope&) = delete;
  StepContextScope& operator=(const StepContextScope&) = delete;

 private:
  StepContext* previous_;
};

// Whether Stoke's own CUDA kernels may run where they apply: the current context's
// setting, or yes outside any.
bool OwnKernelsAllowed();

// The 16-bit type Stoke's layers (AutocastLinear, AutocastConv2d) compute x in: bf16 or
// fp16 while CUDA autocast is on with one of them, x is on a CUDA device and own kernels
// are allowed; else nullopt, where ATen's layer runs.
std::optional<at::ScalarType> StepHalfType(const torch::Tensor& x);

// `parameter` in `type` for a layer of the running step: the copy the step made of it with
// the rest, or between steps the one the optimizer wrote (half_weights.h); else cast
// here, once, asking the step for a copy from the next step on. Outside a context, simply
// cast.
torch::Tensor StepHalfCopy(StepContext* context, const torch::Tensor& parameter,
                           at::ScalarType type);

}  // namespace stoke::worker
