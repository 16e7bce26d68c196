// What the first job on a device would otherwise pay in its first step, paid once when the
// worker starts, before it attaches: on GPUs the CUDA context, the cuBLAS, cuBLASLt and
// cuDNN handles; on every device the intra-op thread pool and the autograd engine's
// threads. A job then starts on a warm worker in about the time of one ordinary step.
#pragma once

#include "worker/common/task.h"

namespace stoke::worker {

// Runs a small forward and backward pass on the device and waits for it. Throws what
// LibTorch throws (a device that cannot be used).
void WarmUpDevice(const DeviceRef& device);

}  // namespace stoke::worker
