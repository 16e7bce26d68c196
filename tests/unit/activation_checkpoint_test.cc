// Activation checkpointing on CPU: a model trained with it takes the same step as without
// it (loss, every gradient, batch norm's statistics, the random numbers drawn next), with
// dropout and under bf16 autocast; its autograd graph keeps none of the blocks'
// activations; and a checkpointed block runs a second time, in backward.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "worker/models/model_factory.h"
#include "worker/ops/activation_checkpoint.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

// On CPU the checkpointed step has matched the plain one bit for bit, in fp32 and bf16. A
// recompute outside autocast would be off by 2e-3 to 1e-2 in bf16 (measured on this test's
// models), hence a bf16 bound well below that.
constexpr double kFp32Tolerance = 1e-6;
constexpr double kBf16Tolerance = 1e-4;

// max |actual - expected| over max |expected|: one number per tensor, so that elements
// near zero are judged at the scale of the tensor they belong to.
double RelativeError(const torch::Tensor& actual, const torch::Tensor& expected) {
  const double scale = expected.abs().max().item<double>();
  const double error =
      (actual.to(torch::kDouble) - expected.to(torch::kDouble)).abs().max().item<double>();
  return error / std::max(scale, 1e-30);
}

// What one training step leaves behind.
struct Step {
  torch::Tensor loss;
  std::vector<std::string> names;
  std::vector<torch::Tensor> grads;
  std::vector<torch::Tensor> buffers;
  torch::Tensor next_random;  // drawn after backward
};

Step TrainStep(Network& net, const torch::Tensor& inputs, const torch::Tensor& targets, bool bf16) {
  net.train();
  torch::manual_seed(7);  // the same dropout masks for both models
  torch::Tensor loss;
  {
    compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16, bf16);
    const torch::Tensor logits = net.forward(inputs);
    loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                targets.reshape({-1}));
  }
  loss.backward();
  Step step;
  step.loss = loss.detach();
  for (const auto& p : net.named_parameters()) {
    step.names.push_back(p.key());
    step.grads.push_back(p.value().grad());
  }
  for (const auto& b : net.buffers()) step.buffers.push_back(b.clone());
  step.next_random = torch::rand({8});
  return step;
}

// Two copies of a model with the same weights, the second checkpointed; one step each on
// the same batch.
void ExpectSameStep(const ModelConfig& config, const DataShape& data, const torch::Tensor& inputs,
                    const torch::Tensor& targets, bool bf16, double tolerance) {
  torch::manual_seed(0);
  std::shared_ptr<Network> plain = BuildNetwork(config, data);
  torch::manual_seed(0);
  std::shared_ptr<Network> checkpointed = BuildNetwork(config, data);
  checkpointed->SetActivationCheckpointing(true);

  const Step expected = TrainStep(*plain, inputs, targets, bf16);
  const Step actual = TrainStep(*checkpointed, inputs, targets, bf16);
  EXPECT_LE(RelativeError(actual.loss, expected.loss), tolerance)
      << actual.loss.item<double>() << " vs " << expected.loss.item<double>();
  ASSERT_EQ(actual.grads.size(), expected.grads.size());
  for (size_t i = 0; i < expected.grads.size(); ++i) {
    ASSERT_TRUE(expected.grads[i].defined()) << expected.names[i];
    ASSERT_TRUE(actual.grads[i].defined()) << actual.names[i] << " got no gradient";
    EXPECT_LE(RelativeError(actual.grads[i], expected.grads[i]), tolerance) << actual.names[i];
  }
  ASSERT_EQ(actual.buffers.size(), expected.buffers.size());
  for (size_t i = 0; i < expected.buffers.size(); ++i) {
    EXPECT_TRUE(torch::equal(actual.buffers[i], expected.buffers[i])) << "buffer " << i;
  }
  EXPECT_TRUE(torch::equal(actual.next_random, expected.next_random))
      << "the step left the random number generator elsewhere";
}

// The parameters whose gradient accumulators the loss's autograd graph reaches. A block
// whose parameters are not among them holds no activations in that graph: every node of
// its forward pass would lead to them.
std::unordered_set<const void*> ParametersInGraph(const torch::Tensor& loss) {
  std::unordered_set<const void*> found;
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> pending = {loss.grad_fn().get()};
  while (!pending.empty()) {
    torch::autograd::Node* node = pending.back();
    pending.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (auto* accumulate = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      found.insert(accumulate->variable.unsafeGetTensorImpl());
    }
    for (const auto& edge : node->next_edges()) pending.push_back(edge.function.get());
  }
  return found;
}

// With checkpointing, the loss's graph reaches exactly the parameters outside the blocks
// (whose names start with one of `blocks`); without it, every parameter.
void ExpectBlocksKeepNoActivations(const ModelConfig& config, const DataShape& data,
                                   const torch::Tensor& inputs,
                                   const std::vector<std::string>& blocks) {
  std::shared_ptr<Network> net = BuildNetwork(config, data);
  net->train();
  for (bool on : {false, true}) {
    net->SetActivationCheckpointing(on);
    const std::unordered_set<const void*> reached = ParametersInGraph(net->forward(inputs).sum());
    int outside_blocks = 0;
    for (const auto& p : net->named_parameters()) {
      const bool in_block = std::any_of(blocks.begin(), blocks.end(), [&](const std::string& b) {
        return p.key().rfind(b, 0) == 0;
      });
      outside_blocks += in_block ? 0 : 1;
      const bool expected = !on || !in_block;
      EXPECT_EQ(reached.count(p.value().unsafeGetTensorImpl()) == 1, expected)
          << p.key() << (on ? " with" : " without") << " checkpointing";
    }
    EXPECT_GT(outside_blocks, 0);
  }
}

DataShape Tokens(int64_t context, int64_t vocab_size) {
  return DataShape{DataShape::Kind::kTokens, {context}, 0, vocab_size, {}};
}

DataShape Images(int64_t c, int64_t h, int64_t w, int64_t classes) {
  return DataShape{DataShape::Kind::kImage, {c, h, w}, classes, 0, {}};
}

DataShape Vectors(int64_t features, int64_t classes) {
  return DataShape{DataShape::Kind::kVector, {features}, classes, 0, {}};
}

GptConfig TinyGpt() {
  GptConfig config;
  config.layers = 2;
  config.heads = 2;
  config.width = 32;
  config.dropout = 0.1;  // the recompute must draw the same masks
  return config;
}

MlpConfig SmallMlp() {
  MlpConfig config;
  config.hidden = {32, 32};
  config.dropout = 0.2;
  return config;
}

struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

Batch TokenBatch() {
  torch::manual_seed(1);
  const torch::Tensor sequences = torch::randint(16, {3, 9}, torch::kLong);
  return {sequences.slice(1, 0, 8), sequences.slice(1, 1, 9)};
}

Batch ImageBatch() {
  torch::manual_seed(1);
  return {torch::randn({4, 3, 16, 16}), torch::randint(10, {4}, torch::kLong)};
}

Batch VectorBatch() {
  torch::manual_seed(1);
  return {torch::randn({6, 20}), torch::randint(5, {6}, torch::kLong)};
}

TEST(ActivationCheckpoint, GptTakesTheSameStepWithDropout) {
  const Batch batch = TokenBatch();
  ExpectSameStep(TinyGpt(), Tokens(8, 16), batch.inputs, batch.targets, /*bf16=*/false,
                 kFp32Tolerance);
}

TEST(ActivationCheckpoint, GptTakesTheSameStepUnderBf16Autocast) {
  const Batch batch = TokenBatch();
  ExpectSameStep(TinyGpt(), Tokens(8, 16), batch.inputs, batch.targets, /*bf16=*/true,
                 kBf16Tolerance);
}

TEST(ActivationCheckpoint, ResNet18TakesTheSameStepAndUpdatesBatchNormOnce) {
  const Batch batch = ImageBatch();
  ExpectSameStep(ResNetConfig{}, Images(3, 16, 16, 10), batch.inputs, batch.targets,
                 /*bf16=*/false, kFp32Tolerance);
}

TEST(ActivationCheckpoint, ResNet18TakesTheSameStepUnderBf16Autocast) {
  const Batch batch = ImageBatch();
  ExpectSameStep(ResNetConfig{}, Images(3, 16, 16, 10), batch.inputs, batch.targets,
                 /*bf16=*/true, kBf16Tolerance);
}

TEST(ActivationCheckpoint, MlpTakesTheSameStepWithDropout) {
  const Batch batch = VectorBatch();
  ExpectSameStep(SmallMlp(), Vectors(20, 5), batch.inputs, batch.targets, /*bf16=*/false,
                 kFp32Tolerance);
}

TEST(ActivationCheckpoint, MlpTakesTheSameStepUnderBf16Autocast) {
  const Batch batch = VectorBatch();
  ExpectSameStep(SmallMlp(), Vectors(20, 5), batch.inputs, batch.targets, /*bf16=*/true,
                 kBf16Tolerance);
}

TEST(ActivationCheckpoint, CheckpointedBlocksKeepNoActivationsInTheGraph) {
  ExpectBlocksKeepNoActivations(TinyGpt(), Tokens(8, 16), TokenBatch().inputs, {"blocks."});
  ExpectBlocksKeepNoActivations(ResNetConfig{}, Images(3, 16, 16, 10), ImageBatch().inputs,
                                {"blocks."});
  // The hidden layers; the last one (index 2) is the classifier.
  ExpectBlocksKeepNoActivations(SmallMlp(), Vectors(20, 5), VectorBatch().inputs,
                                {"layers.0.", "layers.1."});
}

// A block that counts its forward passes.
struct CountedBlock {
  torch::nn::Linear linear{8, 8};
  int forwards = 0;
  torch::Tensor operator()(const torch::Tensor& x) {
    ++forwards;
    return torch::tanh(linear->forward(x));
  }
};

TEST(ActivationCheckpoint, BlockRunsAgainInBackwardAndItsParameterHooksFireOnce) {
  torch::manual_seed(0);
  CountedBlock block;
  int hook_calls = 0;
  block.linear->weight.register_hook([&](const torch::Tensor&) { ++hook_calls; });
  const torch::Tensor data = torch::randn({4, 8});
  const torch::Tensor input = data.clone().requires_grad_();

  const torch::Tensor output =
      CheckpointedForward([&](const torch::Tensor& x) { return block(x); }, input);
  EXPECT_EQ(block.forwards, 1);
  ASSERT_TRUE(output.requires_grad());
  output.pow(2).sum().backward();
  EXPECT_EQ(block.forwards, 2);
  EXPECT_EQ(hook_calls, 1);
  const torch::Tensor input_grad = input.grad().clone();
  const torch::Tensor weight_grad = block.linear->weight.grad().clone();

  // Without checkpointing: one forward pass, the same gradients.
  block.linear->weight.mutable_grad() = torch::Tensor();
  const torch::Tensor plain_input = data.clone().requires_grad_();
  block(plain_input).pow(2).sum().backward();
  EXPECT_EQ(block.forwards, 3);
  EXPECT_LE(RelativeError(input_grad, plain_input.grad()), kFp32Tolerance);
  EXPECT_LE(RelativeError(weight_grad, block.linear->weight.grad()), kFp32Tolerance);
}

TEST(ActivationCheckpoint, BlockOnDataThatNeedsNoGradientStillTrains) {
  CountedBlock block;
  const torch::Tensor output =
      CheckpointedForward([&](const torch::Tensor& x) { return block(x); }, torch::randn({4, 8}));
  ASSERT_TRUE(output.requires_grad());
  output.sum().backward();
  EXPECT_EQ(block.forwards, 2);
  EXPECT_TRUE(block.linear->weight.grad().defined());
  EXPECT_TRUE(block.linear->bias.grad().defined());
}

TEST(ActivationCheckpoint, WithoutGradModeTheBlockRunsOnce) {
  CountedBlock block;
  const torch::Tensor input = torch::randn({4, 8});
  torch::NoGradGuard no_grad;
  const torch::Tensor output =
      CheckpointedForward([&](const torch::Tensor& x) { return block(x); }, input);
  EXPECT_EQ(block.forwards, 1);
  EXPECT_FALSE(output.requires_grad());
  EXPECT_TRUE(torch::equal(output, block(input)));
}

// Autocast keeps the bf16 copy of a weight for the rest of the autocast region. A copy made
// in the block's no-grad forward has no history: a later use of the weight outside the
// block, reusing it, would get no gradient.
TEST(ActivationCheckpoint, WeightAlsoUsedOutsideTheBlockGetsBothGradientsUnderAutocast) {
  torch::manual_seed(0);
  // A leaf used as is (not as a transposed view, as Linear passes its weight), so that
  // autocast caches its cast on every version.
  const torch::Tensor weight = torch::randn({8, 8}).requires_grad_();
  const torch::Tensor data = torch::randn({4, 8});
  auto weight_grad = [&](bool checkpoint) {
    weight.mutable_grad() = torch::Tensor();
    auto block = [&](const torch::Tensor& x) { return torch::tanh(torch::mm(x, weight)); };
    torch::Tensor loss;
    {
      compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16, true);
      const torch::Tensor hidden = checkpoint ? CheckpointedForward(block, data) : block(data);
      loss = torch::mm(hidden, weight).to(torch::kFloat).pow(2).sum();
    }
    loss.backward();
    return weight.grad().clone();
  };
  // Without checkpointing both uses share one cached cast, whose two gradients are summed
  // in bf16; with it each use has its own cast and the sum is in fp32: they differ by bf16
  // rounding (1.5e-3 here). A lost gradient would be off by tens of percent.
  const torch::Tensor expected = weight_grad(false);
  EXPECT_LE(RelativeError(weight_grad(true), expected), 1e-2);
}

TEST(ActivationCheckpoint, ModelsWithoutBlocksRefuseIt) {
  CnnConfig config;
  config.channels = {4};
  config.hidden = 8;
  std::shared_ptr<Network> net = BuildNetwork(config, Images(1, 8, 8, 3));
  EXPECT_FALSE(net->SupportsActivationCheckpointing());
  EXPECT_THROW(net->SetActivationCheckpointing(true), std::invalid_argument);
  EXPECT_NO_THROW(net->SetActivationCheckpointing(false));
}

}  // namespace
}  // namespace stoke::worker
