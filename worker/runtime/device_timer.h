// A point in a device's work: a CUDA event (timed, in stream order) on GPUs, a host clock
// reading on CPUs, where work is done by the time the call returns.
#pragma once

#include <torch/types.h>

#include <memory>

namespace stoke::worker {

class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  // Marks the current point of the device's (current stream's) work.
  static std::unique_ptr<DeviceTimer> Record(torch::Device device);
  // Whether the device has reached the mark; never blocks.
  virtual bool Ready() = 0;
  virtual void Wait() = 0;
  // Seconds of device time from `earlier` to this mark; both must be Ready.
  virtual double SecondsSince(DeviceTimer& earlier) = 0;
};

}  // namespace stoke::worker
