// Builds the optimizer a job's OptimizerConfig names.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "worker/common/task.h"

namespace stoke::worker {

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerConfig& config,
                                                       std::vector<torch::Tensor> parameters);

}  // namespace stoke::worker
