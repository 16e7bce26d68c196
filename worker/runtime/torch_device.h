// DeviceRef (plain) to torch::Device.
#pragma once

#include <torch/types.h>

#include "worker/common/task.h"

namespace stoke::worker {

inline torch::Device ToTorchDevice(const DeviceRef& device) {
  return device.kind == DeviceKind::kCuda
             ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device.index))
             : torch::Device(torch::kCPU);
}

}  // namespace stoke::worker
