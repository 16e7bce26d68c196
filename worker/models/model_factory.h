// Builds the network a job's ModelConfig names.
#pragma once

#include <memory>

#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker {

std::shared_ptr<Network> BuildNetwork(const ModelConfig& config);

}  // namespace stoke::worker
