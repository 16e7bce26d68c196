// Checkpoints of one job: <job_dir>/checkpoints/step-<n>/ holding model.pt (the module's
// parameters and buffers, loadable with torch::load), optimizer.pt and state.pt (the step,
// the random number generators' states and, for fp16, the loss scaler's state; the data
// position follows from the step).
// Written into a temporary directory and renamed, so a crash mid-write leaves the previous
// checkpoint as the newest complete one; only the newest `keep` are kept.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/common/task.h"
#include "worker/engine/loss_scaler.h"
#include "worker/models/network.h"

namespace stoke::worker {

struct CheckpointInfo {
  uint64_t step = 0;
  std::string path;
};

class Checkpointer {
 public:
  Checkpointer(std::string job_dir, uint32_t keep) : dir_(job_dir + "/checkpoints"), keep_(keep) {}

  // Complete checkpoints, oldest first.
  std::vector<CheckpointInfo> List() const;
  std::optional<CheckpointInfo> Latest() const;

  // Throws std::runtime_error naming the directory if it cannot be written.
  void Save(uint64_t step, Network& net, const torch::optim::Optimizer& optimizer,
            const DeviceRef& device, const LossScaler* scaler = nullptr) const;
  // Loads model, optimizer and generator states, and the loss scaler's where both the job
  // and the checkpoint have one (a checkpoint from before it was kept leaves the scaler
  // at its initial scale); returns the checkpoint's step.
  uint64_t Restore(const CheckpointInfo& checkpoint, Network& net,
                   torch::optim::Optimizer& optimizer, const DeviceRef& device,
                   LossScaler* scaler = nullptr) const;

 private:
  std::string dir_;
  uint32_t keep_;
};

}  // namespace stoke::worker
