#include "worker/data/synthetic.h"

#include <torch/torch.h>

namespace stoke::worker {

SyntheticSource::SyntheticSource(const SyntheticDataConfig& config, torch::Device device,
                                 int64_t batch_size, uint64_t seed)
    : config_(config), device_(device), batch_size_(batch_size) {
  // The teacher comes from its own generator so that it depends on the seed alone, not on
  // how much randomness model initialisation drew before it.
  auto generator = at::detail::createCPUGenerator(seed ^ 0x5deece66dULL);
  teacher_ = torch::randn({config.features, config.num_classes}, generator,
                          torch::TensorOptions().dtype(torch::kFloat32))
                 .to(device);
}

Batch SyntheticSource::Next() {
  torch::NoGradGuard no_grad;
  Batch batch;
  batch.inputs =
      torch::randn({batch_size_, config_.features}, torch::TensorOptions().device(device_));
  batch.targets = batch.inputs.matmul(teacher_).argmax(1);
  return batch;
}

}  // namespace stoke::worker
