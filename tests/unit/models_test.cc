// Each model on CPU: forward gives the expected shape, backward reaches every parameter,
// and the FLOP count is what the architecture implies.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/models/model_factory.h"

namespace stoke::worker {
namespace {

DataShape Images(int64_t c, int64_t h, int64_t w, int64_t classes) {
  return DataShape{DataShape::Kind::kImage, {c, h, w}, classes, 0};
}

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
  ExpectTrainable(*net, torch::randn({5, 1, 28, 28}).flatten(1), {5, 10});
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
  DataShape tokens{DataShape::Kind::kTokens, {64}, 0, 256};
  EXPECT_THROW(BuildNetwork(MlpConfig{}, tokens), std::invalid_argument);
  EXPECT_THROW(BuildNetwork(CnnConfig{}, DataShape{DataShape::Kind::kVector, {16}, 4, 0}),
               std::invalid_argument);
  CnnConfig deep;
  deep.channels = {8, 8, 8, 8, 8, 8};
  EXPECT_THROW(BuildNetwork(deep, Images(1, 28, 28, 10)), std::invalid_argument);
}

}  // namespace
}  // namespace stoke::worker
