#include "worker/data/device_copy.h"

#if STOKE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace stoke::worker {
namespace {

class NoFence final : public CopyFence {
 public:
  void Wait() override {}
};

class HostCopier final : public DeviceCopier {
 public:
  Copied Copy(const torch::Tensor& inputs, const torch::Tensor& targets) override {
    return {inputs.clone(), targets.clone(), std::make_unique<NoFence>()};
  }
};

#if STOKE_WITH_CUDA
class EventFence final : public CopyFence {
 public:
  explicit EventFence(std::shared_ptr<at::cuda::CUDAEvent> event) : event_(std::move(event)) {}
  void Wait() override { event_->synchronize(); }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> event_;
};

class CudaCopier final : public DeviceCopier {
 public:
  explicit CudaCopier(torch::Device device)
      : device_(device),
        copy_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index())) {}

  Copied Copy(const torch::Tensor& inputs, const torch::Tensor& targets) override {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    Copied copied;
    {
      c10::cuda::CUDAStreamGuard on_copy_stream(copy_stream_);
      // Asynchronous: the host buffers are page-locked.
      copied.inputs = inputs.to(device_, /*non_blocking=*/true);
      copied.targets = targets.to(device_, /*non_blocking=*/true);
      done->record(copy_stream_);
    }
    done->block(compute);
    // The memory was allocated on the copy stream; the caching allocator must not hand
    // it out again until the compute stream is done with it too.
    copied.inputs.record_stream(compute);
    copied.targets.record_stream(compute);
    copied.fence = std::make_unique<EventFence>(std::move(done));
    return copied;
  }

 private:
  torch::Device device_;
  c10::cuda::CUDAStream copy_stream_;
};
#endif

}  // namespace

std::unique_ptr<DeviceCopier> DeviceCopier::Create(torch::Device device) {
#if STOKE_WITH_CUDA
  if (device.is_cuda()) return std::make_unique<CudaCopier>(device);
#endif
  (void)device;
  return std::make_unique<HostCopier>();
}

}  // namespace stoke::worker
