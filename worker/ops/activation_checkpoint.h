// Activation checkpointing: a block's forward pass that keeps none of the block's
// activations for backward, only its input, and runs the block again in backward to
// rebuild them. About one more forward pass of compute buys the memory of everything
// the block would have saved.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace stoke::worker {

using CheckpointedBlock = std::function<torch::Tensor(const torch::Tensor&)>;

struct CheckpointOptions {
  // Replays the random numbers of the forward pass in the recompute (the CPU generator,
  // and the CUDA one of the input's device), so that dropout draws the same masks. The
  // CUDA generator cannot be read inside a CUDA graph capture: blocks that draw no random
  // numbers turn this off, and can then be captured.
  bool preserve_rng_state = true;
  // Tensors the block updates in place during its forward pass (batch norm's running
  // statistics). They are put back after the recompute, so that a step updates them once,
  // as it would without checkpointing.
  std::vector<torch::Tensor> restore_after_recompute;
};

// Returns block(input). With grad mode on, the block runs without recording a graph and
// backward runs it again on the saved input, under the autocast state and with the random
// numbers of the first run, then back-propagates through that second run: its parameters'
// gradients accumulate into their .grad (firing their hooks) from inside the outer
// backward, and the input gets its gradient as usual. With grad mode off it just calls
// the block.
//
// The block must reach no tensor that needs a gradient other than its input and leaf
// parameters, and each parameter must belong to one checkpointed block: the recompute's
// backward would otherwise run parts of the outer graph, or fire a parameter's hooks
// twice in one step. Gradients arrive through backward(), not torch::autograd::grad().
// Nothing here waits for the device.
torch::Tensor CheckpointedForward(CheckpointedBlock block, const torch::Tensor& input,
                                  CheckpointOptions options = {});

}  // namespace stoke::worker
