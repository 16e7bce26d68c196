// Builds the network a job's ModelConfig names, shaped for the data it will see.
#pragma once

#include <memory>

#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker {

// Throws std::invalid_argument when the model cannot take this data (a language model
// on images, say), naming the model field.
std::shared_ptr<Network> BuildNetwork(const ModelConfig& config, const DataShape& data);

}  // namespace stoke::worker
