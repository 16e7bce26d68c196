#include "worker/data/synthetic.h"

#include <torch/torch.h>

#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace stoke::worker {
namespace {

// A sample's size from a TorchScript model's shapes, multiplied with the overflow checked:
// a wrapped product would shape a small, wrong rule (or a negative size).
int64_t CheckedProduct(const std::vector<int64_t>& dims, const std::string& field) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d < 1 || __builtin_mul_overflow(product, d, &product) ||
        product > std::numeric_limits<int32_t>::max()) {
      throw std::invalid_argument("the model's " + field +
                                  ": a sample of more than 2^31 elements, or a dimension below 1");
    }
  }
  return product;
}

}  // namespace

SyntheticSource::SyntheticSource(const SyntheticDataConfig& config, torch::Device device,
                                 int64_t batch_size, uint64_t seed, int world_size)
    : config_(config),
      device_(device),
      batch_size_(batch_size),
      world_size_(world_size),
      seed_(seed) {
  // The rule comes from its own generator so that it depends on the seed alone, not on
  // how much randomness model initialisation drew before it.
  auto generator = at::detail::createCPUGenerator(seed ^ 0x5deece66dULL);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  if (config.vocab_size > 0) {
    token_step_ = 1 + torch::randint(std::max<int64_t>(1, config.vocab_size - 1), {1}, generator,
                                     torch::TensorOptions().dtype(torch::kLong))
                          .item<int64_t>();
  } else if (!config.input_shape.empty()) {
    int64_t outputs = config.num_classes;
    if (config.regression_shape) outputs = CheckedProduct(*config.regression_shape, "target_shape");
    teacher_ =
        torch::randn({CheckedProduct(config.input_shape, "input_shape"), outputs}, generator, f32)
            .to(device);
  } else if (config.image_shape.empty()) {
    teacher_ = torch::randn({config.features, config.num_classes}, generator, f32).to(device);
  }
}

DataShape SyntheticSource::Shape() const {
  if (!config_.input_shape.empty()) {
    return DataShape{
        config_.input_shape.size() == 3 ? DataShape::Kind::kImage : DataShape::Kind::kVector,
        config_.input_shape,
        config_.regression_shape ? 0 : config_.num_classes,
        0,
        {}};
  }
  if (config_.vocab_size > 0) {
    return DataShape{DataShape::Kind::kTokens, {config_.context}, 0, config_.vocab_size, {}};
  }
  if (!config_.image_shape.empty()) {
    return DataShape{DataShape::Kind::kImage, config_.image_shape, config_.num_classes, 0, {}};
  }
  return DataShape{DataShape::Kind::kVector, {config_.features}, config_.num_classes, 0, {}};
}

Batch SyntheticSource::Next() { return Draw(at::Generator(), device_, images_channels_last_); }

Batch SyntheticSource::HeldOut(int64_t index) const {
  auto generator =
      at::detail::createCPUGenerator(seed_ ^ 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(index));
  Batch batch = Draw(generator, torch::kCPU, /*channels_last=*/false);
  // Evaluation is not the hot loop: a plain copy is fine here.
  return {batch.inputs.to(device_), batch.targets.to(device_)};
}

const torch::Tensor& SyntheticSource::ClassOffset() const {
  // Made at the first draw, not with the source: a job's sizes are checked (the model's
  // parameter count against the device) after its data source is made, and a wrong
  // image_shape must fail there, naming the layer, not here allocating its table.
  std::call_once(class_offset_->made, [this] {
    // Offsets of half the noise's deviation: far apart next to how little a channel's
    // mean over a whole image varies (1/sqrt(pixels)), even for a thousand classes in
    // three channels, yet small enough that each image stays mostly noise. From a
    // generator of its own, so the rule depends on the seed alone.
    auto generator = at::detail::createCPUGenerator(seed_ ^ 0x5deece66dULL);
    class_offset_->table =
        (0.5 * torch::randn({config_.num_classes, config_.image_shape.front()}, generator,
                            torch::TensorOptions().dtype(torch::kFloat32)))
            .to(device_);
  });
  return class_offset_->table;
}

Batch SyntheticSource::Draw(const at::Generator& generator, torch::Device where,
                            bool channels_last) const {
  torch::NoGradGuard no_grad;
  const auto on_device = torch::TensorOptions().device(where);
  // The rule's tensors where the batch is made.
  const torch::Tensor teacher = teacher_.defined() ? teacher_.to(where) : teacher_;
  Batch batch;
  if (config_.vocab_size > 0) {
    const auto ids = on_device.dtype(torch::kLong);
    torch::Tensor start = torch::randint(config_.vocab_size, {batch_size_, 1}, generator, ids);
    // Inputs and targets each in a tensor of its own, not two views of one sequence: user
    // code (nanoGPT's `targets.view(-1)`) relies on contiguous batches, as a DataLoader's.
    const torch::Tensor offsets = torch::arange(config_.context, ids).view({1, -1}) * token_step_;
    batch.inputs = (start + offsets).remainder(config_.vocab_size);
    batch.targets = (start + token_step_ + offsets).remainder(config_.vocab_size);
  } else if (!config_.input_shape.empty()) {
    std::vector<int64_t> shape = {batch_size_};
    shape.insert(shape.end(), config_.input_shape.begin(), config_.input_shape.end());
    batch.inputs = torch::randn(shape, generator, on_device);
    torch::Tensor projected = batch.inputs.flatten(1).matmul(teacher);
    if (config_.regression_shape) {
      std::vector<int64_t> target = {batch_size_};
      target.insert(target.end(), config_.regression_shape->begin(),
                    config_.regression_shape->end());
      batch.targets = projected.reshape(target);
    } else {
      batch.targets = projected.argmax(1);
    }
  } else if (!config_.image_shape.empty()) {
    std::vector<int64_t> shape = {batch_size_};
    shape.insert(shape.end(), config_.image_shape.begin(), config_.image_shape.end());
    batch.targets = torch::randint(config_.num_classes, {batch_size_}, generator,
                                   on_device.dtype(torch::kLong));
    const auto format = channels_last && shape.size() == 4 ? at::MemoryFormat::ChannelsLast
                                                           : at::MemoryFormat::Contiguous;
    batch.inputs = torch::empty(shape, on_device.memory_format(format));
    batch.inputs.normal_(0, 1, generator);
    std::vector<int64_t> per_channel(shape.size(), 1);
    per_channel[0] = batch_size_;
    per_channel[1] = config_.image_shape.front();
    batch.inputs.add_(ClassOffset().to(where).index_select(0, batch.targets).view(per_channel));
  } else {
    batch.inputs = torch::randn({batch_size_, config_.features}, generator, on_device);
    batch.targets = batch.inputs.matmul(teacher).argmax(1);
  }
  return batch;
}

}  // namespace stoke::worker
