// The autograd function behind CheckpointedForward, and what it saves and restores so
// that the recompute in backward computes exactly what the forward pass did.
#include "worker/ops/activation_checkpoint.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>
#include <utility>
#include <vector>

#include "worker/ops/step_context.h"
#include "worker/runtime/torch_compat.h"

#if STOKE_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace stoke::worker {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr char kRecomputeKey[] = "recompute";

at::Tensor GeneratorState(const c10::Device& device) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void SetGeneratorState(const c10::Device& device, const at::Tensor& state) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// The CUDA generator refuses to be read or set during a capture; say why in our terms.
void CheckNotCapturing(const c10::Device& device) {
#if STOKE_WITH_CUDA
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(
      cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device.index()).stream(), &status));
  TORCH_CHECK(status == cudaStreamCaptureStatusNone,
              "activation checkpointing: the CUDA random number generator cannot be saved "
              "inside a CUDA graph capture; capture only blocks that draw no random numbers, "
              "with CheckpointOptions::preserve_rng_state off");
#else
  (void)device;
#endif
}

// The generators a block on `device` may draw from: the CPU one always (Python's
// torch.utils.checkpoint does the same), and the device's own if it has one.
struct RngStates {
  c10::optional<c10::Device> cuda;
  at::Tensor cpu_state;
  at::Tensor cuda_state;

  static RngStates Save(const c10::Device& device) {
    RngStates states;
    states.cpu_state = GeneratorState(c10::Device(c10::DeviceType::CPU));
    if (device.is_cuda()) {
      CheckNotCapturing(device);
      states.cuda = device;
      states.cuda_state = GeneratorState(device);
    }
    return states;
  }

  void Restore() const {
    SetGeneratorState(c10::Device(c10::DeviceType::CPU), cpu_state);
    if (cuda) SetGeneratorState(*cuda, cuda_state);
  }
};

// Sets the generators to the forward pass's states for the recompute, and back to where
// they were after it: the random numbers drawn after this backward do not depend on
// whether the block was checkpointed.
class RngReplay {
 public:
  RngReplay(const RngStates* replayed, const c10::Device& device) {
    if (replayed == nullptr) return;
    current_ = RngStates::Save(device);
    replayed->Restore();
  }
  ~RngReplay() {
    if (current_) current_->Restore();
  }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  c10::optional<RngStates> current_;
};

// Autocast for the recompute as the forward pass had it (backward runs with it off). As
// compat::AutocastScope does, the cast-weight cache is cleared when the outermost scope
// ends: bf16 copies of weights made here must not be reused after the optimizer step.
class RecomputeAutocast {
 public:
  RecomputeAutocast(c10::DeviceType type, compat::AutocastState wanted)
      : type_(type), wanted_(wanted), previous_(compat::GetAutocast(type)) {
    active_ = wanted_.enabled || previous_.enabled;
    if (!active_) return;
    compat::SetAutocast(type_, wanted_.enabled, wanted_.dtype);
    if (wanted_.enabled) at::autocast::increment_nesting();
  }
  ~RecomputeAutocast() {
    if (!active_) return;
    if (wanted_.enabled && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::SetAutocast(type_, previous_.enabled, previous_.dtype);
  }
  RecomputeAutocast(const RecomputeAutocast&) = delete;
  RecomputeAutocast& operator=(const RecomputeAutocast&) = delete;

 private:
  c10::DeviceType type_;
  compat::AutocastState wanted_;
  compat::AutocastState previous_;
  bool active_ = false;
};

// Autocast caches the bf16 copy of a weight the first time it is cast, for the rest of the
// autocast region. A copy made in the no-grad forward has no history: reused later in the
// same region by a use that needs a gradient, that gradient would be lost.
class NoCastCache {
 public:
  NoCastCache() : previous_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~NoCastCache() { at::autocast::set_autocast_cache_enabled(previous_); }
  NoCastCache(const NoCastCache&) = delete;
  NoCastCache& operator=(const NoCastCache&) = delete;

 private:
  bool previous_;
};

// What the recompute needs besides the input. The autograd node keeps it in
// ctx->saved_data, whose values are IValues: a capsule is how an IValue holds a C++
// object.
struct Recompute : torch::CustomClassHolder {
  CheckpointedBlock block;
  CheckpointOptions options;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  compat::AutocastState autocast;
  RngStates rng;
  // The forward pass's step context (step_context.h): the recompute runs on an autograd
  // thread, and must choose kernels and find weight copies as the forward pass did.
  StepContext* context = nullptr;
};

// torch::autograd::Function calls forward and backward by these names.
class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `anchor` is set only when the input needs no gradient: a leaf that does, so that
  // the output has a grad_fn and backward reaches the block's parameters.
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& input,
      const c10::optional<torch::Tensor>& /*anchor*/, c10::intrusive_ptr<Recompute> recompute) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({input});
    recompute->device = input.device();
    recompute->autocast = compat::GetAutocast(input.device().type());
    recompute->context = StepContext::Current();
    if (recompute->options.preserve_rng_state) recompute->rng = RngStates::Save(input.device());
    torch::Tensor output;
    {
      NoCastCache no_cast_cache;
      output = recompute->block(input);  // grad mode is off here: nothing is recorded
    }
    ctx->saved_data[kRecomputeKey] = at::IValue::make_capsule(std::move(recompute));
    return output;
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    const torch::Tensor& grad = grad_outputs[0];
    // The output did not reach the loss: nothing to recompute.
    if (!grad.defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const auto recompute =
        c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data[kRecomputeKey].toCapsule());
    const torch::Tensor input = ctx->get_saved_variables()[0];
    torch::Tensor detached = input.detach();
    detached.requires_grad_(input.requires_grad());

    std::vector<torch::Tensor> restored;
    restored.reserve(recompute->options.restore_after_recompute.size());
    torch::Tensor output;
    {
      at::NoGradGuard no_grad;
      for (const auto& t : recompute->options.restore_after_recompute) {
        restored.push_back(t.clone());
      }
    }
    // Around the re-entrant backward too: what it recomputes in turn (a nested checkpoint)
    // looks the context up.
    const StepContextScope context(recompute->context);
    {
      RngReplay rng(recompute->options.preserve_rng_state ? &recompute->rng : nullptr,
                    recompute->device);
      RecomputeAutocast autocast(recompute->device.type(), recompute->autocast);
      at::AutoGradMode grad_on(true);
      output = recompute->block(detached);
    }
    // Re-entrant backward, outside the autocast scope as the outer backward is: it
    // accumulates into the parameters' .grad and into detached.grad().
    if (output.requires_grad()) torch::autograd::backward({output}, {grad});
    // Only now: the recompute's graph saved these tensors (batch norm's backward takes
    // the running statistics), and writing to them earlier would fail its version check.
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < restored.size(); ++i) {
        recompute->options.restore_after_recompute[i].copy_(restored[i]);
      }
    }
    return {input.requires_grad() ? detached.grad() : torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor CheckpointedForward(CheckpointedBlock block, const torch::Tensor& input,
                                  CheckpointOptions options) {
  if (!at::GradMode::is_enabled()) return block(input);
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->block = std::move(block);
  recompute->options = std::move(options);
  c10::optional<torch::Tensor> anchor;
  if (!input.requires_grad()) anchor = torch::empty({0}, torch::requires_grad());
  return CheckpointFunction::apply(input, anchor, std::move(recompute));
}

}  // namespace stoke::worker
