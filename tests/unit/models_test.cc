// Each model on CPU: forward gives the expected shape, backward reaches every parameter,
// and the FLOP count is what the architecture implies.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

#include "worker/common/status_error.h"
#include "worker/models/gpt.h"
#include "worker/models/model_factory.h"
#include "worker/models/resnet.h"

namespace stoke::worker {
namespace {

DataShape Images(int64_t c, int64_t h, int64_t w, int64_t classes) {
  return DataShape{DataShape::Kind::kImage, {c, h, w}, classes, 0, {}};
}

DataShape Tokens(int64_t context, int64_t vocab_size) {
  return DataShape{DataShape::Kind::kTokens, {context}, 0, vocab_size, {}};
}

GptConfig TinyGpt() {
  GptConfig config;
  config.layers = 2;
  config.heads = 2;
  config.width = 32;
  return config;
}

// A temp file that is removed when the test ends.
class TempPath {
 public:
  explicit TempPath(const std::string& suffix) {
    path_ = ::testing::TempDir() + "stoke_models_test_" + std::to_string(::getpid()) + suffix;
  }
  ~TempPath() { std::remove(path_.c_str()); }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

// Runs forward and backward; every parameter must receive a gradient.
void ExpectTrainable(Network& net, const torch::Tensor& inputs, std::vector<int64_t> logits_shape) {
  net.train();
  torch::Tensor out = net.forward(inputs);
  EXPECT_EQ(out.sizes().vec(), logits_shape);
  out.sum().backward();
  for (const auto& p : net.named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient";
  }
}

TEST(Models, MlpFlattensImagesAndTakesShapeFromTheData) {
  MlpConfig config;
  config.hidden = {64};
  auto net = BuildNetwork(config, Images(1, 28, 28, 10));
  ExpectTrainable(*net, torch::randn({5, 1, 28, 28}), {5, 10});
  EXPECT_EQ(net->ParameterCount(), 784 * 64 + 64 + 64 * 10 + 10);
  EXPECT_EQ(net->TrainingFlopsPerSample(), 6 * (784 * 64 + 64 * 10));
}

TEST(Models, CnnClassifiesImages) {
  CnnConfig config;
  config.channels = {8, 16};
  config.hidden = 32;
  auto net = BuildNetwork(config, Images(1, 28, 28, 10));
  ExpectTrainable(*net, torch::randn({4, 1, 28, 28}), {4, 10});
  // 28x28 -> 14x14 -> 7x7 after two stages.
  const int64_t macs = 28 * 28 * 1 * 8 * 9 + 14 * 14 * 8 * 16 * 9 + 16 * 7 * 7 * 32 + 32 * 10;
  EXPECT_EQ(net->TrainingFlopsPerSample(), 6 * macs);
}

TEST(Models, ModelsRefuseDataTheyCannotTake) {
  DataShape tokens{DataShape::Kind::kTokens, {64}, 0, 256, {}};
  EXPECT_THROW(BuildNetwork(MlpConfig{}, tokens), std::invalid_argument);
  EXPECT_THROW(BuildNetwork(CnnConfig{}, DataShape{DataShape::Kind::kVector, {16}, 4, 0, {}}),
               std::invalid_argument);
  CnnConfig deep;
  deep.channels = {8, 8, 8, 8, 8, 8};
  EXPECT_THROW(BuildNetwork(deep, Images(1, 28, 28, 10)), std::invalid_argument);
}

TEST(Models, ResNet18WithTheSmallStemClassifiesCifarSizedImages) {
  ResNetConfig config;  // depth 18, stem from the image size
  auto net = BuildNetwork(config, Images(3, 32, 32, 10));
  EXPECT_TRUE(std::dynamic_pointer_cast<ResNetImpl>(net)->small_stem());
  ExpectTrainable(*net, torch::randn({2, 3, 32, 32}), {2, 10});
  // torchvision's resnet18 has 11689512 parameters with 1000 classes and the 7x7 stem.
  EXPECT_EQ(net->ParameterCount(), 11689512 - 512 * 990 - 990 - 3 * 64 * 49 + 3 * 64 * 9);
}

TEST(Models, ResNet50WithTheImageNetStemTrainsOnAnyChannelCount) {
  ResNetConfig config;
  config.depth = 50;
  config.small_stem = false;
  auto net = BuildNetwork(config, Images(3, 64, 64, 7));
  ExpectTrainable(*net, torch::randn({2, 3, 64, 64}), {2, 7});
  // torchvision's resnet50 has 25557032 parameters with 1000 classes.
  EXPECT_EQ(net->ParameterCount(), 25557032 - 2048 * 993 - 993);

  ResNetConfig gray;
  gray.depth = 34;
  auto mono = BuildNetwork(gray, Images(1, 28, 28, 10));
  torch::NoGradGuard no_grad;
  mono->eval();
  EXPECT_EQ(mono->forward(torch::randn({1, 1, 28, 28})).sizes().vec(),
            (std::vector<int64_t>{1, 10}));
}

TEST(Models, ResNet18FlopsOnCifarMatchAnIndependentCount) {
  auto net = BuildNetwork(ResNetConfig{}, Images(3, 32, 32, 10));
  // Multiply-adds per layer, written out: the stem at 32x32; stage 1, four 64->64 3x3
  // convolutions at 32x32; stages 2-4 each halve the size and double the channels: the
  // strided first conv, three more 3x3 convs and the 1x1 projection; the classifier.
  const int64_t stem = 32 * 32 * 3 * 64 * 9;
  const int64_t stage1 = 4 * (32 * 32 * 64 * 64 * 9);
  auto stage = [](int64_t size, int64_t in, int64_t out) {
    return size * size * (in * out * 9 + 3 * out * out * 9 + in * out);
  };
  const int64_t macs =
      stem + stage1 + stage(16, 64, 128) + stage(8, 128, 256) + stage(4, 256, 512) + 512 * 10;
  EXPECT_EQ(macs, 555422720);  // the ~0.56 GMACs usually quoted for CIFAR ResNet-18
  EXPECT_EQ(net->TrainingFlopsPerSample(), 6 * macs);
}

TEST(Models, ResNetFlopsOnImageNetAgreeWithPublishedCounts) {
  // torchvision's model cards: 1.81, 3.66 and 4.09 G multiply-adds at 224x224.
  const std::pair<int, double> published[] = {{18, 1.814e9}, {34, 3.664e9}, {50, 4.089e9}};
  for (const auto& [depth, macs] : published) {
    ResNetConfig config;
    config.depth = depth;
    auto net = BuildNetwork(config, Images(3, 224, 224, 1000));
    EXPECT_NEAR(net->TrainingFlopsPerSample() / 6.0, macs, 0.01 * macs) << "ResNet-" << depth;
  }
}

TEST(Models, ResNetRefusesDepthsItDoesNotKnow) {
  ResNetConfig config;
  config.depth = 101;
  try {
    BuildNetwork(config, Images(3, 32, 32, 10));
    FAIL() << "depth 101 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.resnet.depth"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BuildNetwork(ResNetConfig{}, Tokens(8, 16)), std::invalid_argument);
}

TEST(Models, GptGivesNextTokenLogitsAndTiesItsOutputToTheEmbedding) {
  const int64_t vocab = 16, context = 8, width = 32;
  auto net = BuildNetwork(TinyGpt(), Tokens(context, vocab));
  ExpectTrainable(*net, torch::randint(vocab, {3, context}, torch::kLong), {3, context, vocab});
  // Shorter sequences than the context are fine.
  EXPECT_EQ(net->forward(torch::randint(vocab, {3, 5}, torch::kLong)).sizes().vec(),
            (std::vector<int64_t>{3, 5, vocab}));

  // Embeddings, then per layer two layer norms, qkv, the attention projection and the
  // MLP, then the final layer norm: and no separate [vocab, width] output matrix.
  const int64_t per_layer = 2 * 2 * width + (3 * width * width + 3 * width) +
                            (width * width + width) + (4 * width * width + 4 * width) +
                            (4 * width * width + width);
  EXPECT_EQ(net->ParameterCount(), vocab * width + context * width + 2 * per_layer + 2 * width);
  int64_t vocab_by_width = 0;
  for (const auto& p : net->parameters()) {
    if (p.sizes().vec() == std::vector<int64_t>{vocab, width}) ++vocab_by_width;
  }
  EXPECT_EQ(vocab_by_width, 1);
  // The output layer is the embedding: zeroing it zeroes the logits.
  {
    torch::NoGradGuard no_grad;
    std::dynamic_pointer_cast<GptImpl>(net)->token_embedding().zero_();
  }
  EXPECT_EQ(
      net->forward(torch::randint(vocab, {1, context}, torch::kLong)).abs().max().item<float>(),
      0.0f);

  const int64_t n = net->ParameterCount() - context * width;
  EXPECT_EQ(net->TrainingFlopsPerSample(), context * (6 * n + 12 * 2 * width * context));
}

TEST(Models, GptLogitsDependOnlyOnEarlierTokens) {
  const int64_t vocab = 16, context = 8;
  auto net = BuildNetwork(TinyGpt(), Tokens(context, vocab));
  net->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(vocab, {2, context}, torch::kLong);
  torch::Tensor changed = tokens.clone();
  changed.select(1, 5).fill_(0);
  changed.select(1, 5).add_(tokens.select(1, 5).add(1).remainder(vocab));
  const torch::Tensor before = net->forward(tokens), after = net->forward(changed);
  EXPECT_TRUE(torch::allclose(before.slice(1, 0, 5), after.slice(1, 0, 5)));
  EXPECT_FALSE(torch::allclose(before.slice(1, 5), after.slice(1, 5)));
}

TEST(Models, GptOverfitsATinyBatch) {
  torch::manual_seed(0);
  const int64_t vocab = 16, context = 8, batch = 4;
  GptConfig config = TinyGpt();
  config.dropout = 0.1;  // dropout on: it must still fit, and eval must turn it off
  auto net = BuildNetwork(config, Tokens(context, vocab));
  // Distinct first tokens make every prefix unique, so every next token can be learned.
  torch::Tensor sequences = torch::randint(vocab, {batch, context + 1}, torch::kLong);
  sequences.select(1, 0).copy_(torch::arange(batch));
  const torch::Tensor inputs = sequences.slice(1, 0, context);
  const torch::Tensor targets = sequences.slice(1, 1, context + 1);
  auto loss_of = [&] {
    return torch::nn::functional::cross_entropy(net->forward(inputs).reshape({-1, vocab}),
                                                targets.reshape({-1}));
  };
  torch::optim::AdamW optimizer(net->parameters(), torch::optim::AdamWOptions(3e-3));
  net->train();
  for (int step = 0; step < 300; ++step) {
    optimizer.zero_grad();
    loss_of().backward();
    optimizer.step();
  }
  net->eval();
  torch::NoGradGuard no_grad;
  EXPECT_LT(loss_of().item<double>(), 0.1);
}

TEST(Models, GptChecksHeadsAndNeedsTokens) {
  GptConfig config = TinyGpt();
  config.heads = 3;
  try {
    BuildNetwork(config, Tokens(8, 16));
    FAIL() << "3 heads over width 32 were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.gpt.heads"), std::string::npos) << e.what();
  }
  try {
    BuildNetwork(TinyGpt(), Images(3, 32, 32, 10));
    FAIL() << "images were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.gpt: needs token data"), std::string::npos)
        << e.what();
  }
  GptConfig short_context = TinyGpt();
  short_context.context = 4;
  EXPECT_THROW(BuildNetwork(short_context, Tokens(8, 16)), std::invalid_argument);
}

// A TorchScript module made without Python: y = x.w, with a `training` flag like a
// Python module's, and a forward that doubles its output in training mode.
void SaveLinearModule(const std::string& path, bool doubles_in_training) {
  torch::jit::Module m("Linear");
  m.register_parameter("w", torch::randn({4, 3}), /*is_buffer=*/false);
  m.register_attribute("training", c10::BoolType::get(), true);
  m.define(doubles_in_training ? R"(
def forward(self, x):
    y = x.mm(self.w)
    if self.training:
        y = y * 2.0
    return y
)"
                               : R"(
def forward(self, x):
    return x.mm(self.w)
)");
  m.save(path);
}

TEST(Models, TorchScriptModelTrainsThroughTheScriptedModule) {
  torch::manual_seed(0);
  TempPath path(".pt");
  SaveLinearModule(path.str(), /*doubles_in_training=*/false);
  TorchScriptConfig config;
  config.path = path.str();
  config.loss = LossKind::kMse;
  auto net = BuildNetwork(config, DataShape{DataShape::Kind::kVector, {4}, 0, 0, {}});
  EXPECT_EQ(net->loss(), LossKind::kMse);
  EXPECT_EQ(net->ParameterCount(), 12);
  EXPECT_EQ(net->TrainingFlopsPerSample(), 6 * 12);

  const torch::Tensor w_true = torch::randn({4, 3});
  const torch::Tensor x = torch::randn({64, 4});
  const torch::Tensor y = x.mm(w_true);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
  net->train();
  auto loss_of = [&] { return torch::mse_loss(net->forward(x), y); };
  const double first = loss_of().item<double>();
  for (int step = 0; step < 50; ++step) {
    optimizer.zero_grad();
    loss_of().backward();
    optimizer.step();
  }
  EXPECT_LT(loss_of().item<double>(), 0.01 * first);

  // A checkpoint holds the trained weights: loaded into a fresh copy of the original
  // module, it computes the same.
  TempPath checkpoint(".ckpt");
  torch::save(net, checkpoint.str());
  auto restored = BuildNetwork(config, DataShape{DataShape::Kind::kVector, {4}, 0, 0, {}});
  torch::load(restored, checkpoint.str());
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(restored->forward(x), net->forward(x)));
}

TEST(Models, TorchScriptModelSwitchesTheScriptedModuleToEval) {
  TempPath path(".pt");
  SaveLinearModule(path.str(), /*doubles_in_training=*/true);
  TorchScriptConfig config;
  config.path = path.str();
  auto net = BuildNetwork(config, DataShape{});
  const torch::Tensor x = torch::randn({2, 4});
  torch::NoGradGuard no_grad;
  net->eval();
  const torch::Tensor in_eval = net->forward(x);
  net->train();
  EXPECT_TRUE(torch::allclose(net->forward(x), 2 * in_eval));
}

// Missing, it may yet appear (a file system not mounted yet), as a missing data file may:
// NOT_FOUND, which the engine retries. Its message names the field and the file.
TEST(Models, MissingTorchScriptFileNamesTheField) {
  TorchScriptConfig config;
  config.path = ::testing::TempDir() + "no_such_model.pt";
  try {
    BuildNetwork(config, DataShape{});
    FAIL() << "a missing file was accepted";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.code(), absl::StatusCode::kNotFound) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.torchscript.path: " + config.path + ": "),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace stoke::worker
