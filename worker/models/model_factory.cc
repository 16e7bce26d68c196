#include "worker/models/model_factory.h"

#include "worker/models/mlp.h"

namespace stoke::worker {

std::shared_ptr<Network> BuildNetwork(const ModelConfig& config) {
  struct Builder {
    std::shared_ptr<Network> operator()(const MlpConfig& mlp) const {
      return std::make_shared<MlpImpl>(mlp);
    }
  };
  return std::visit(Builder{}, config);
}

}  // namespace stoke::worker
