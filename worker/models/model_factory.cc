#include "worker/models/model_factory.h"

#include <numeric>
#include <stdexcept>

#include "worker/models/cnn.h"
#include "worker/models/mlp.h"

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
    if (c.hidden.empty()) c.hidden = {4 * c.input_dim};
    return std::make_shared<MlpImpl>(c);
  }
  std::shared_ptr<Network> operator()(const CnnConfig& config) const {
    if (data.kind != DataShape::Kind::kImage) {
      throw std::invalid_argument("model.cnn: needs image data (mnist, cifar10, synthetic.image_shape)");
    }
    return std::make_shared<CnnImpl>(config, data.sample,
                                     Classes(config.num_classes, data, "model.cnn.num_classes"));
  }
  std::shared_ptr<Network> operator()(const ResNetConfig&) const {
    throw std::invalid_argument("model.resnet: not available in this worker yet");
  }
  std::shared_ptr<Network> operator()(const GptConfig&) const {
    throw std::invalid_argument("model.gpt: not available in this worker yet");
  }
  std::shared_ptr<Network> operator()(const TorchScriptConfig&) const {
    throw std::invalid_argument("model.torchscript: not available in this worker yet");
  }
};

}  // namespace

std::shared_ptr<Network> BuildNetwork(const ModelConfig& config, const DataShape& data) {
  return std::visit(Builder{data}, config);
}

}  // namespace stoke::worker
