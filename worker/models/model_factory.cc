#include "worker/models/model_factory.h"

#include <numeric>
#include <stdexcept>
#include <string>

#include "worker/models/cnn.h"
#include "worker/models/gpt.h"
#include "worker/models/mlp.h"
#include "worker/models/resnet.h"
#include "worker/models/torchscript_model.h"

namespace stoke::worker {
namespace {

int64_t Product(const std::vector<int64_t>& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

int64_t Classes(int64_t configured, const DataShape& data, const char* field) {
  const int64_t n = configured > 0 ? configured : data.num_classes;
  if (n < 2) throw std::invalid_argument(std::string(field) + ": the data has no class labels");
  return n;
}

struct Builder {
  const DataShape& data;

  std::shared_ptr<Network> operator()(const MlpConfig& config) const {
    if (data.kind == DataShape::Kind::kTokens) {
      throw std::invalid_argument("model.mlp: cannot take token data; use model.gpt");
    }
    MlpConfig c = config;
    // Images are flattened: an MLP sees C*H*W features.
    if (c.input_dim == 0) c.input_dim = Product(data.sample);
    c.num_classes = Classes(c.num_classes, data, "model.mlp.num_classes");
    if (c.hidden.empty()) c.hidden = {defaults::kMlpHiddenPerInput * c.input_dim};
    return std::make_shared<MlpImpl>(c);
  }
  std::shared_ptr<Network> operator()(const CnnConfig& config) const {
    if (data.kind != DataShape::Kind::kImage) {
      throw std::invalid_argument(
          "model.cnn: needs image data (mnist, cifar10, synthetic.image_shape)");
    }
    return std::make_shared<CnnImpl>(config, data.sample,
                                     Classes(config.num_classes, data, "model.cnn.num_classes"));
  }
  std::shared_ptr<Network> operator()(const ResNetConfig& config) const {
    if (data.kind != DataShape::Kind::kImage) {
      throw std::invalid_argument(
          "model.resnet: needs image data (mnist, cifar10, synthetic.image_shape)");
    }
    return std::make_shared<ResNetImpl>(
        config, data.sample, Classes(config.num_classes, data, "model.resnet.num_classes"));
  }
  std::shared_ptr<Network> operator()(const GptConfig& config) const {
    if (data.kind != DataShape::Kind::kTokens || data.sample.size() != 1 || data.vocab_size < 1) {
      throw std::invalid_argument(
          "model.gpt: needs token data (tokens, or synthetic with vocab_size and context)");
    }
    GptConfig c = config;
    // A larger context or vocabulary than the data's is allowed (room to grow, or a
    // tokenizer's unused ids); a smaller one would fail on the first batch.
    const int64_t data_context = data.sample[0];
    if (c.context == 0) c.context = data_context;
    if (c.context < data_context) {
      throw std::invalid_argument("model.gpt.context: " + std::to_string(c.context) +
                                  " is shorter than the data's sequences of " +
                                  std::to_string(data_context) + " tokens");
    }
    if (c.vocab_size == 0) c.vocab_size = data.vocab_size;
    if (c.vocab_size < data.vocab_size) {
      throw std::invalid_argument("model.gpt.vocab_size: " + std::to_string(c.vocab_size) +
                                  " is smaller than the data's vocabulary of " +
                                  std::to_string(data.vocab_size));
    }
    return std::make_shared<GptImpl>(c);
  }
  // Any data: only the user's module knows what it takes.
  std::shared_ptr<Network> operator()(const TorchScriptConfig& config) const {
    return std::make_shared<TorchScriptModelImpl>(config);
  }
};

}  // namespace

std::shared_ptr<Network> BuildNetwork(const ModelConfig& config, const DataShape& data) {
  return std::visit(Builder{data}, config);
}

}  // namespace stoke::worker
