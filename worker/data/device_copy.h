// Host-to-device copies of batches on a CUDA stream of their own, so a copy overlaps the
// previous step's compute and the compute stream waits only for its own batch (an event,
// not a host sync). On CPU the "copy" is a plain copy into fresh tensors.
#pragma once

#include <torch/types.h>

#include <memory>

namespace stoke::worker {

// Marks the end of a copy; the host buffers it read from may be refilled after Wait().
class CopyFence {
 public:
  virtual ~CopyFence() = default;
  virtual void Wait() = 0;
};

class DeviceCopier {
 public:
  struct Copied {
    torch::Tensor inputs;
    torch::Tensor targets;
    std::unique_ptr<CopyFence> fence;
  };

  virtual ~DeviceCopier() = default;
  static std::unique_ptr<DeviceCopier> Create(torch::Device device);
  // Called from the training thread. The returned tensors are ready for the compute
  // stream (it has been told to wait for the copy).
  virtual Copied Copy(const torch::Tensor& inputs, const torch::Tensor& targets) = 0;
};

}  // namespace stoke::worker
