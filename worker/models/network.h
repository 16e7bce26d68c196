// What the training loop needs of a model, whatever its architecture.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>

namespace stoke::worker {

class Network : public torch::nn::Module {
 public:
  // Logits for a batch of inputs.
  virtual torch::Tensor forward(const torch::Tensor& inputs) = 0;
  // Floating-point operations of one training step (forward and backward) per sample,
  // for throughput in TFLOP/s and MFU.
  virtual int64_t TrainingFlopsPerSample() const = 0;

  int64_t ParameterCount() {
    int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
  }
};

}  // namespace stoke::worker
