#include "worker/engine/fake_batch.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace stoke::worker {

FakeBatch MakeFakeBatch(Network& net, const DataShape& shape, int64_t batch,
                        const torch::Device& device, bool channels_last) {
  FakeBatch fake;
  std::vector<int64_t> dims = {batch};
  dims.insert(dims.end(), shape.sample.begin(), shape.sample.end());
  const auto on_device = torch::TensorOptions().device(device);
  if (shape.kind == DataShape::Kind::kTokens) {
    fake.inputs =
        torch::randint(std::max<int64_t>(1, shape.vocab_size), dims, on_device.dtype(torch::kLong));
  } else {
    fake.inputs = torch::randn(dims, on_device);
  }
  if (channels_last && fake.inputs.dim() == 4) {
    fake.inputs = fake.inputs.contiguous(at::MemoryFormat::ChannelsLast);
  }
  if (net.loss() == LossKind::kMse) {
    torch::NoGradGuard no_grad;
    fake.targets = torch::zeros_like(net.forward(fake.inputs), torch::kFloat32);
  } else if (shape.kind == DataShape::Kind::kTokens) {
    fake.targets = torch::randint(std::max<int64_t>(1, shape.vocab_size),
                                  {batch, shape.sample.at(0)}, on_device.dtype(torch::kLong));
  } else {
    fake.targets = torch::randint(std::max<int64_t>(1, shape.num_classes), {batch},
                                  on_device.dtype(torch::kLong));
  }
  return fake;
}

}  // namespace stoke::worker
