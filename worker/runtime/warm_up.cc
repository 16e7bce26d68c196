#include "worker/runtime/warm_up.h"

#include <torch/torch.h>

#include "worker/runtime/devices.h"
#include "worker/runtime/torch_device.h"

namespace stoke::worker {

void WarmUpDevice(const DeviceRef& ref) {
  MakeCurrent(ref);
  const torch::Device device = ToTorchDevice(ref);
  const auto options = torch::TensorOptions().device(device);
  // A matrix product through autograd: the thread pool (CPUs), the context and cuBLAS
  // (GPUs), and the autograd engine's device threads.
  torch::Tensor x = torch::randn({64, 64}, options.requires_grad(true));
  torch::Tensor w = torch::randn({64, 64}, options);
  torch::Tensor loss = torch::mm(x, w).relu().sum();
  loss.backward();
  torch::Tensor done = x.grad().sum();
  if (device.is_cuda()) {
    // bf16 products go through cuBLASLt, convolutions through cuDNN: each has its handle.
    done =
        done +
        torch::mm(x.detach().to(torch::kBFloat16), w.to(torch::kBFloat16)).sum().to(torch::kFloat);
    torch::Tensor image = torch::randn({1, 3, 8, 8}, options);
    torch::Tensor kernel = torch::randn({4, 3, 3, 3}, options);
    done = done + torch::conv2d(image, kernel).sum();
  }
  // Reading the result waits for the device.
  (void)done.item<float>();
}

}  // namespace stoke::worker
