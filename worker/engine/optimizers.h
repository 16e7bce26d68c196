// Builds the optimizer a job's OptimizerConfig names, for parameters on `device`.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "worker/common/task.h"
#include "worker/engine/optimizer.h"

namespace stoke::worker {

std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerConfig& config,
                                         std::vector<torch::Tensor> parameters,
                                         const torch::Device& device);

}  // namespace stoke::worker
