// What the training loop needs of a model, whatever its architecture, and what a model
// needs to know of the data to shape itself.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/common/data_shape.h"
#include "worker/common/task.h"

namespace stoke::worker {

class Network : public torch::nn::Module {
 public:
  // Classifiers: [B, num_classes] logits. Language models: [B, T, vocab] logits. Other
  // TorchScript models: whatever the loss compares with the targets.
  virtual torch::Tensor forward(const torch::Tensor& inputs) = 0;
  // Floating-point operations of one training step (forward and backward) per sample,
  // for achieved TFLOP/s and MFU.
  virtual int64_t TrainingFlopsPerSample() const = 0;
  virtual LossKind loss() const { return LossKind::kCrossEntropy; }
  // Models that compute their training loss better than logits-then-loss (a language
  // model's output layer and cross-entropy in chunks, say) return it here; nullopt means
  // forward() and the loss() kind.
  virtual std::optional<torch::Tensor> ForwardLoss(const torch::Tensor& inputs,
                                                   const torch::Tensor& targets) {
    (void)inputs;
    (void)targets;
    return std::nullopt;
  }
  // Convolutional models run faster on GPUs with activations and weights in NHWC
  // ("channels last") order, which cuDNN's tensor-core kernels use natively.
  virtual bool PrefersChannelsLast() const { return false; }
  // A user's model gets its input batches contiguous, as a PyTorch DataLoader gives them,
  // even when its weights are channels last: its forward may call inputs.view(n, -1).
  virtual bool WantsContiguousInputs() const { return false; }

  int64_t ParameterCount() {
    int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
  }

  // Activation checkpointing: each block (a transformer layer, a residual block, a hidden
  // layer) keeps only its input for backward and runs again there, trading about one
  // more forward pass for the activation memory. Off by default; turning it on for a
  // model that does not support it throws std::invalid_argument.
  void SetActivationCheckpointing(bool on) {
    if (on && !SupportsActivationCheckpointing()) {
      throw std::invalid_argument("activation checkpointing: not supported by this model");
    }
    checkpoint_blocks_ = on;
  }
  virtual bool SupportsActivationCheckpointing() const { return false; }

  // torch.compile, for models that can compile themselves (Python models), from the next
  // training call on. Returns what was chosen, for the job's log ("" when nothing
  // applies). Throws std::invalid_argument for a compile asked for that cannot be done.
  virtual std::string SetCompile(CompileMode mode, bool cuda) {
    (void)mode;
    (void)cuda;
    return "";
  }

  // Files beside each checkpoint for tools outside Stoke (a Python model's state_dict and
  // safetensors, a TorchScript model's scripted module), written into the checkpoint's
  // folder `dir` before it is complete. Throws what saving throws.
  virtual void WriteExports(const std::string& dir) { (void)dir; }

  struct Preparation {
    double compile_seconds = 0;
    std::string note;  // for the job's log; empty: nothing was done
  };
  // The one-time work of a model's first calls (a Python model's FLOP count and its
  // torch.compile), done once on the device before the first step, under the step's
  // autocast, on a batch shaped like the training batches: so that it is neither timed
  // as a step nor recorded in a CUDA graph. Training starts after it as it would have
  // without it (buffers, gradients and random generators as they were).
  virtual Preparation Prepare(const torch::Tensor& inputs, const torch::Tensor& targets) {
    (void)inputs;
    (void)targets;
    return {};
  }

 protected:
  // Read by forward(): run each block through CheckpointedForward.
  bool checkpoint_blocks_ = false;
};

}  // namespace stoke::worker
