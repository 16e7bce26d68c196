#include "worker/engine/train_step.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "worker/common/byte_units.h"
#include "worker/dist/gradient_reducer.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/step_graph.h"
#include "worker/engine/step_math.h"
#include "worker/ops/step_context.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

// The device's memory once the step is captured, for the job's log: replays allocate
// nothing, so what training holds from here on is known, and the peak so far shows
// whether warm-up and capture set the job's peak or something later did.
std::string DeviceMemoryNow(const torch::Device& device) {
  const DeviceRef ref{device.is_cuda() ? DeviceKind::kCuda : DeviceKind::kCpu,
                      device.has_index() ? device.index() : 0};
  const AllocatorStats stats = ReadAllocatorStats(ref);
  return "device memory " + FormatGiB(stats.allocated_bytes, 2) + " GiB in use, peak " +
         FormatGiB(stats.peak_allocated_bytes, 2) + " GiB so far";
}

}  // namespace

std::string WhyNotCapturable(const StepParts& parts, bool learning_rate_changes) {
  if (!parts.device.is_cuda()) return "CUDA graphs need a CUDA device";
  if (!StepGraph::Supported()) return "this build has no CUDA graphs (torch 2 with CUDA needed)";
  if (parts.reducer != nullptr) {
    return "gradient all-reduces between ranks are not captured; jobs of several devices "
           "run eagerly";
  }
  return parts.optimizer->WhyNotCapturable(learning_rate_changes, parts.scaler != nullptr);
}

StepRunner::StepRunner(StepParts parts, bool graph, std::function<void(const std::string&)> log)
    : parts_(std::move(parts)), want_graph_(graph), log_(std::move(log)) {
  if (want_graph_) graph_ = std::make_unique<StepGraph>(parts_.device);
  // Nothing needs every gradient at once (no overflow check, no clipping norm): each
  // bucket's parameters can be updated as soon as that bucket is reduced, while the last
  // buckets' reductions are still in flight.
  bucketwise_ = parts_.reducer && parts_.optimizer->StepsInParts() && !parts_.scaler &&
                parts_.grad_clip_norm <= 0;
  if (parts_.scaler) {
    host_checks_overflow_ = !parts_.optimizer->SkipOnDeviceWhere(parts_.scaler->found_inf());
  }
}

StepRunner::~StepRunner() {
  if (parts_.context != nullptr) parts_.context->half_weights().Forget(parts_.parameters);
}

void StepRunner::ResetGrads() {
  // set_to_none: the next backward writes fresh gradients instead of adding to zeros.
  for (const auto& p : parts_.parameters) p.mutable_grad().reset();
}

std::vector<torch::Tensor> StepRunner::Body(const std::vector<Batch>& micro_batches) {
  // The 16-bit copies of the weights the layers multiply, in one launch, for this step's
  // forward passes (and the recomputed ones of checkpointed blocks); dropped at its end.
  if (parts_.context == nullptr) return ForwardBackwardAndUpdate(micro_batches);
  HalfWeights& copies = parts_.context->half_weights();
  struct ReleasedAtTheEnd {  // however the step ends
    HalfWeights& copies;
    const std::vector<torch::Tensor>& parameters;
    ~ReleasedAtTheEnd() { copies.Release(parameters); }
  } release{copies, parts_.parameters};
  if (parts_.autocast && parts_.device.is_cuda()) copies.Refresh(parts_.parameters);
  return ForwardBackwardAndUpdate(micro_batches);
}

std::vector<torch::Tensor> StepRunner::ForwardBackwardAndUpdate(
    const std::vector<Batch>& micro_batches) {
  const int64_t micro_steps = static_cast<int64_t>(micro_batches.size());
  std::vector<torch::Tensor> losses;
  losses.reserve(micro_batches.size());
  for (int64_t micro = 0; micro < micro_steps; ++micro) {
    const Batch& batch = micro_batches[static_cast<size_t>(micro)];
    torch::Tensor inputs = batch.inputs;
    if (parts_.channels_last && inputs.dim() == 4) {
      inputs = inputs.contiguous(at::MemoryFormat::ChannelsLast);
    }
    torch::Tensor loss;
    {
      compat::AutocastScope autocast(parts_.device.type(), parts_.autocast_dtype, parts_.autocast);
      loss = TrainingLoss(*parts_.net, inputs, batch.targets);
    }
    losses.push_back(loss.detach());
    // Gradients are reduced across ranks on the last micro-step only.
    if (parts_.reducer && micro + 1 == micro_steps) parts_.reducer->Arm();
    // Gradients of the micro-batches add up to those of their mean loss; the reducer sums
    // the ranks' gradients, which the world size in the divisor makes their mean.
    const int64_t divisor = micro_steps * (parts_.reducer ? parts_.reducer->world_size() : 1);
    torch::Tensor objective = divisor > 1 ? loss / static_cast<double>(divisor) : loss;
    if (parts_.scaler) objective = parts_.scaler->Scale(objective);
    objective.backward();
  }
  if (bucketwise_) {
    parts_.reducer->LaunchRest();
    parts_.optimizer->StepInParts(parts_.reducer->BucketParameters(),
                                  [this](size_t bucket) { parts_.reducer->WaitForBucket(bucket); });
    return losses;
  }
  if (parts_.reducer) parts_.reducer->Finish();
  bool step = true;
  if (parts_.scaler) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : parts_.parameters) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    parts_.scaler->UnscaleAndCheck(grads);
    // One host read per step where the optimizer cannot skip on the device.
    if (host_checks_overflow_) step = parts_.scaler->found_inf().item<float>() == 0;
  }
  if (parts_.grad_clip_norm > 0) ClipGradNorm(parts_.parameters, parts_.grad_clip_norm);
  if (step) parts_.optimizer->Step();
  if (parts_.scaler) parts_.scaler->Update();
  return losses;
}

std::vector<torch::Tensor> StepRunner::RunEager(const std::vector<Batch>& micro_batches) {
  std::vector<torch::Tensor> losses = Body(micro_batches);
  ResetGrads();
  return losses;
}

void StepRunner::CaptureOrFallBack(std::vector<Batch> micro_batches) {
  // The captured step reads its batches from these buffers; each replay refills them.
  static_batches_.clear();
  for (const Batch& b : micro_batches) {
    Batch copy;
    copy.inputs =
        b.inputs.clone(parts_.channels_last && b.inputs.dim() == 4 ? at::MemoryFormat::ChannelsLast
                                                                   : at::MemoryFormat::Contiguous);
    copy.targets = b.targets.clone();
    static_batches_.push_back(std::move(copy));
  }
  // Recording allocates every activation of the step at once: the batches, copied, are
  // not kept beside it (at ResNet-50's batch, 147 MiB of fp32 images).
  micro_batches.clear();
  ResetGrads();
  try {
    graph_->Capture([&] { static_losses_ = Body(static_batches_); });
    graphed_ = true;
    log_("training step captured as a CUDA graph after " + std::to_string(kWarmupSteps) +
         " warm-up steps; replaying it from here on (" + DeviceMemoryNow(parts_.device) + ")");
  } catch (const std::exception& e) {
    // static_batches_ stay: this step runs eagerly on them (Run).
    static_losses_.clear();
    ResetGrads();
    want_graph_ = false;
    log_(std::string("CUDA graph capture failed, training on eagerly: ") + e.what());
  }
}

bool StepRunner::ReplayMatchesEager() {
  torch::Tensor eager;
  {
    // With gradients on, as a training step runs it (a compiled forward is not compiled
    // again for no_grad); nothing is kept of it but the loss. Buffers (batch norm's
    // running statistics) go back to what the replay will start from.
    std::vector<torch::Tensor> saved;
    for (const auto& b : parts_.net->buffers()) saved.push_back(b.clone());
    {
      compat::AutocastScope autocast(parts_.device.type(), parts_.autocast_dtype, parts_.autocast);
      eager = TrainingLoss(*parts_.net, static_batches_[0].inputs, static_batches_[0].targets)
                  .detach()
                  .to(torch::kFloat64);
    }
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (auto& b : parts_.net->buffers()) b.copy_(saved[i++]);
    ResetGrads();
  }
  graph_->Replay();
  // One host read, once per run.
  const double expected = eager.item<double>();
  const double replayed = static_losses_[0].to(torch::kFloat64).item<double>();
  if (std::isfinite(replayed) &&
      std::abs(replayed - expected) <= 0.05 * std::abs(expected) + 1e-3) {
    return true;
  }
  log_("CUDA graph check failed: the replayed step's loss " + std::to_string(replayed) +
       " is not the eager forward pass's " + std::to_string(expected) +
       " on the same batch (the forward depends on something the capture froze); training "
       "on eagerly (that one step used the replay's gradients)");
  graphed_ = false;
  want_graph_ = false;
  return false;
}

std::vector<torch::Tensor> StepRunner::Run(std::vector<Batch> micro_batches) {
  ++steps_run_;
  if (graphed_) {
    // The graph reads the weight copies its own optimizer wrote: a parameter changed
    // since (none is, in a run today) must reach them before it replays.
    if (parts_.context != nullptr && parts_.autocast) {
      parts_.context->half_weights().RecastChanged(parts_.parameters);
    }
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      static_batches_[i].inputs.copy_(micro_batches[i].inputs, /*non_blocking=*/true);
      static_batches_[i].targets.copy_(micro_batches[i].targets, /*non_blocking=*/true);
    }
    graph_->Replay();
    return static_losses_;
  }
  if (!want_graph_) return RunEager(micro_batches);
  if (steps_run_ <= kWarmupSteps) {
    std::vector<torch::Tensor> losses;
    graph_->Warm([&] { losses = RunEager(micro_batches); });
    return losses;
  }
  CaptureOrFallBack(std::move(micro_batches));
  if (!graphed_) {
    const std::vector<Batch> batches = std::move(static_batches_);
    static_batches_.clear();
    return RunEager(batches);
  }
  // Capture recorded the step without running it.
  if (parts_.verify_capture) {
    ReplayMatchesEager();
    return static_losses_;
  }
  graph_->Replay();
  return static_losses_;
}

}  // namespace stoke::worker
