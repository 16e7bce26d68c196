// A batch shaped like the data's, made on the device without reading any: for the
// batch-size search's trials and a model's one-time preparation (its FLOP count and
// torch.compile), which need shapes, not samples.
#pragma once

#include <torch/types.h>

#include "worker/common/data_shape.h"
#include "worker/models/network.h"

namespace stoke::worker {

struct FakeBatch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

// Random inputs of `shape` (token ids for token data, NHWC images when channels_last),
// and targets for the network's loss: class indices or next tokens; for MSE, zeros shaped
// like the outputs, which one forward pass (without gradients) finds out.
FakeBatch MakeFakeBatch(Network& net, const DataShape& shape, int64_t batch,
                        const torch::Device& device, bool channels_last);

}  // namespace stoke::worker
