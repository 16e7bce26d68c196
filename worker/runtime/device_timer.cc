#include "worker/runtime/device_timer.h"

#include <chrono>

#if STOKE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#endif

namespace stoke::worker {
namespace {

class HostTimer final : public DeviceTimer {
 public:
  HostTimer() : at_(std::chrono::steady_clock::now()) {}
  bool Ready() override { return true; }
  void Wait() override {}
  double SecondsSince(DeviceTimer& earlier) override {
    return std::chrono::duration<double>(at_ - static_cast<HostTimer&>(earlier).at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_;
};

#if STOKE_WITH_CUDA
class CudaTimer final : public DeviceTimer {
 public:
  CudaTimer() : event_(cudaEventDefault) { event_.record(); }
  bool Ready() override { return event_.query(); }
  void Wait() override { event_.synchronize(); }
  double SecondsSince(DeviceTimer& earlier) override {
    return static_cast<CudaTimer&>(earlier).event_.elapsed_time(event_) / 1000.0;
  }

 private:
  at::cuda::CUDAEvent event_;  // cudaEventDefault: timing enabled
};
#endif

}  // namespace

std::unique_ptr<DeviceTimer> DeviceTimer::Record(torch::Device device) {
#if STOKE_WITH_CUDA
  if (device.is_cuda()) return std::make_unique<CudaTimer>();
#endif
  (void)device;
  return std::make_unique<HostTimer>();
}

}  // namespace stoke::worker
