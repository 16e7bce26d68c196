// One optimizer step: the micro-batches' forward and backward passes (autocast, fp16
// loss scaling, gradient accumulation, the all-reduce of several ranks), clipping and the
// optimizer. StepRunner runs it eagerly, or, on a GPU, warms it up for a few steps,
// captures it once as a CUDA graph and replays that graph from then on, copying each new
// batch into the captured input buffers. A step that cannot be captured falls back to
// eager with the reason logged, never silently.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/data/batch_source.h"
#include "worker/engine/optimizer.h"
#include "worker/models/network.h"

namespace stoke::worker {

class GradientReducer;
class LossScaler;
class StepContext;
class StepGraph;

struct StepParts {
  Network* net = nullptr;
  Optimizer* optimizer = nullptr;
  std::vector<torch::Tensor> parameters;
  LossScaler* scaler = nullptr;        // fp16 only
  GradientReducer* reducer = nullptr;  // several ranks only
  double grad_clip_norm = 0;           // 0: off
  torch::Device device = torch::kCPU;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;
  bool channels_last = false;  // image inputs in NHWC
  // The run's step context (worker/ops/step_context.h), whose weight copies the runner
  // makes and drops around each step; none: the layers cast for themselves. The caller
  // installs it (RunTraining does, for the whole run): the layers find it there.
  StepContext* context = nullptr;
  // The user's code (Python models): the first replay of a captured step is checked
  // against an eager forward pass on the same batch, and a mismatch goes back to eager.
  bool verify_capture = false;
};

// Whether an optimizer step can be captured: it must read no value from the host that
// changes between steps. Empty if it can, else the reason.
std::string WhyNotCapturable(const StepParts& parts, bool learning_rate_changes);

class StepRunner {
 public:
  // graph: capture the step (after warm-up steps); the caller has checked it can.
  StepRunner(StepParts parts, bool graph, std::function<void(const std::string&)> log);
  ~StepRunner();

  // Runs one optimizer step over these micro-batches and returns their losses (device
  // scalars, valid until the next call). It takes the batches: the step that captures
  // the graph copies them into the graph's inputs and lets them go before it records, so
  // that one copy, not two, is in memory beside the step's activations.
  std::vector<torch::Tensor> Run(std::vector<Batch> micro_batches);

  // Whether steps now replay a captured graph.
  bool graphed() const { return graphed_; }

  // Eager steps before capture.
  static constexpr int kWarmupSteps = 3;

 private:
  // Forward, backward and optimizer over these batches; gradients are left in .grad.
  std::vector<torch::Tensor> Body(const std::vector<Batch>& micro_batches);
  std::vector<torch::Tensor> ForwardBackwardAndUpdate(const std::vector<Batch>& micro_batches);
  std::vector<torch::Tensor> RunEager(const std::vector<Batch>& micro_batches);
  void ResetGrads();
  void CaptureOrFallBack(std::vector<Batch> micro_batches);
  // Replays the just-captured step after an eager forward pass on its first batch, with
  // the same weights; false (and logged) when their losses differ by more than 5% (plus
  // 1e-3): the capture froze something the forward computes differently each time.
  bool ReplayMatchesEager();

  StepParts parts_;
  // fp16: an optimizer that can skips an overflowing step on the device (the fused
  // AdamW); for the others the flag is read on the host.
  bool host_checks_overflow_ = false;
  // Set when each gradient bucket's parameters are updated as soon as it is reduced.
  bool bucketwise_ = false;
  bool want_graph_;
  bool graphed_ = false;
  int steps_run_ = 0;
  std::function<void(const std::string&)> log_;
  std::unique_ptr<StepGraph> graph_;
  std::vector<Batch> static_batches_;  // the captured step's inputs
  std::vector<torch::Tensor> static_losses_;
};

}  // namespace stoke::worker
