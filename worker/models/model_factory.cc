#include "worker/models/model_factory.h"

#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>

#include "worker/models/cnn.h"
#include "worker/models/gpt.h"
#include "worker/models/mlp.h"
#include "worker/models/resnet.h"
#include "worker/models/torchscript_model.h"

namespace stoke::worker {
namespace {

// Sizes the data and the spec imply, multiplied in 64 bits with the overflow checked: a
// wrapped product would build a small, wrong layer, or a negative size. A weight must
// also leave room for its bytes (8 per element at most) and the optimizer's copies.
constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / 64;

int64_t Checked(std::initializer_list<int64_t> factors, const std::string& what,
                int64_t limit = kMaxElements) {
  int64_t product = 1;
  std::string spelled;
  bool overflow = false;
  for (int64_t f : factors) {
    spelled += (spelled.empty() ? "" : " x ") + std::to_string(f);
    if (f < 0) throw std::invalid_argument(what + ": negative size " + std::to_string(f));
    overflow = overflow || __builtin_mul_overflow(product, f, &product) || product > limit;
  }
  if (overflow) {
    throw std::invalid_argument(what + ": " + spelled +
                                " elements is more than any device holds; make it smaller");
  }
  return product;
}

int64_t Product(const std::vector<int64_t>& dims, const std::string& what) {
  int64_t product = 1;
  for (int64_t d : dims) product = Checked({product, d}, what);
  return product;
}

int64_t Classes(int64_t configured, const DataShape& data, const char* field) {
  const int64_t n = configured > 0 ? configured : data.num_classes;
  if (n < 2) throw std::invalid_argument(std::string(field) + ": the data has no class labels");
  return n;
}

struct Builder {
  const DataShape& data;
  const data::ReadOptions& files;

  std::shared_ptr<Network> operator()(const MlpConfig& config) const {
    if (data.kind == DataShape::Kind::kTokens) {
      throw std::invalid_argument("model.mlp: cannot take token data; use model.gpt");
    }
    MlpConfig c = config;
    // Images are flattened: an MLP sees C*H*W features.
    if (c.input_dim == 0) c.input_dim = Product(data.sample, "model.mlp: the data's samples");
    if (!data.regression.empty()) {
      // Floating targets: one output per target value, MSE.
      c.regression = data.regression;
      c.num_classes = Product(data.regression, "model.mlp: the regression targets");
    } else {
      c.num_classes = Classes(c.num_classes, data, "model.mlp.num_classes");
    }
    if (c.hidden.empty()) {
      // The input checked first, the default width made of it then cannot overflow.
      const auto input = static_cast<uint64_t>(Checked({c.input_dim}, "model.mlp.input_dim"));
      c.hidden = {Checked({static_cast<int64_t>(defaults::DefaultMlpHidden(input))},
                          "model.mlp.hidden (default: 4 x input_dim)")};
    }
    int64_t in = c.input_dim;
    for (int64_t width : c.hidden) {
      Checked({in, width}, "model.mlp: a layer of " + std::to_string(in) + " inputs and " +
                               std::to_string(width) + " outputs");
      in = width;
    }
    Checked({in, c.num_classes}, "model.mlp: the classifier layer");
    return std::make_shared<MlpImpl>(c);
  }
  std::shared_ptr<Network> operator()(const CnnConfig& config) const {
    if (data.kind != DataShape::Kind::kImage) {
      throw std::invalid_argument(
          "model.cnn: needs image data (mnist, cifar10, synthetic.image_shape)");
    }
    // The first stage's work per sample, the largest product the network forms.
    const int64_t first = config.channels.empty() ? 1 : config.channels[0];
    Checked({Product(data.sample, "model.cnn: the images"), first, 9 * 6},
            "model.cnn: the first convolution's work per image");
    Checked({Product(data.sample, "model.cnn: the images"), config.hidden},
            "model.cnn.hidden: the hidden layer over the flattened images");
    return std::make_shared<CnnImpl>(config, data.sample,
                                     Classes(config.num_classes, data, "model.cnn.num_classes"));
  }
  std::shared_ptr<Network> operator()(const ResNetConfig& config) const {
    if (data.kind != DataShape::Kind::kImage) {
      throw std::invalid_argument(
          "model.resnet: needs image data (mnist, cifar10, synthetic.image_shape)");
    }
    Checked({Product(data.sample, "model.resnet: the images"), 64 * 9 * 6},
            "model.resnet: the stem's work per image");
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
    Checked({c.vocab_size, c.width}, "model.gpt: the token embedding (vocab_size x width)");
    Checked({c.context, c.width}, "model.gpt: the position embedding (context x width)");
    // The weights, and the FLOP count the model reports: context x (6 x weights + 12 x
    // layers x width x context), each term checked (the count may exceed kMaxElements).
    const int64_t block = Checked({12, c.width, c.width}, "model.gpt: a block (12 x width^2)");
    const int64_t weights = Checked({block, c.layers}, "model.gpt: the blocks (layers)") +
                            Checked({c.vocab_size, c.width}, "model.gpt");
    constexpr int64_t kAny = std::numeric_limits<int64_t>::max() / 2;
    const std::string work = "model.gpt: the work per sequence (context x weights)";
    Checked({c.context, 6, weights}, work, kAny);
    Checked({c.context, c.context, 12, c.layers, c.width}, work, kAny);
    return std::make_shared<GptImpl>(c);
  }
  // Any data: only the user's module knows what it takes.
  std::shared_ptr<Network> operator()(const TorchScriptConfig& config) const {
    Product(config.input_shape, "model.torchscript.input_shape");
    Product(config.target_shape, "model.torchscript.target_shape");
    return std::make_shared<TorchScriptModelImpl>(config, files);
  }
  std::shared_ptr<Network> operator()(const PythonConfig&) const {
    throw std::invalid_argument(
        "model.python: Python models are built in the trainer process (stoke-trainer), "
        "which embeds Python");
  }
};

}  // namespace

std::shared_ptr<Network> BuildNetwork(const ModelConfig& config, const DataShape& data,
                                      const data::ReadOptions& files) {
  return std::visit(Builder{data, files}, config);
}

}  // namespace stoke::worker
