// The small pieces of arithmetic a training step needs, kept on the device where they
// touch tensors: the loss for each kind of model, the learning rate at a step, and
// gradient clipping that never reads the norm back to the host.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker {

// Classifiers: [B, C] outputs against [B] class indices; language models: [B, T, V]
// against [B, T]; both cross-entropy, computed in fp32 (low-precision logits through
// SoftmaxCrossEntropy, which never copies them to fp32). MSE compares like shapes.
torch::Tensor ComputeLoss(const torch::Tensor& outputs, const torch::Tensor& targets,
                          LossKind kind);

// The training loss of a batch: the network's own ForwardLoss where it has one, else
// ComputeLoss of its forward().
torch::Tensor TrainingLoss(Network& net, const torch::Tensor& inputs, const torch::Tensor& targets);

// The learning rate for optimizer step `step` (1-based) of `total_steps`: linear warmup,
// then constant or cosine decay to lr x min_lr_ratio.
double LearningRateAt(const OptimizerConfig& config, uint64_t step, uint64_t total_steps);

// Scales all gradients by min(1, max_norm / global L2 norm), entirely on the device.
void ClipGradNorm(const std::vector<torch::Tensor>& parameters, double max_norm);

}  // namespace stoke::worker
