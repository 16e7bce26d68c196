// Builds the network a job's ModelConfig names, shaped for the data it will see.
#pragma once

#include <memory>

#include "formats/read_options.h"
#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker {

// Throws std::invalid_argument when the model cannot take this data (a language model
// on images, say), naming the model field. `files`: how a TorchScript model's file is
// opened (beneath the data roots).
std::shared_ptr<Network> BuildNetwork(const ModelConfig& config, const DataShape& data,
                                      const data::ReadOptions& files = {});

}  // namespace stoke::worker
