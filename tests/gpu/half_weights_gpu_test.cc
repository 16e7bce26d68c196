// The optimizer writes the 16-bit weight copies the next step multiplies with
// (half_weights.h, own_adamw.h): after steps run eagerly or replayed from a captured CUDA
// graph, the copies the next step (or an evaluation between steps) would read are
// exactly the updated weights in bf16, and that step casts none of them (a ResNet's
// channels-last convolution weights too, each copy in its weight's layout); a parameter changed
// between steps (as a loaded checkpoint would change it) reaches the copies, cast again, and a step
// whose optimizer wrote nothing has its copies cast. Skips without CUDA or the kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/own_kernels.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/step_graph.h"
#include "worker/engine/train_step.h"
#include "worker/models/mlp.h"
#include "worker/models/resnet.h"
#include "worker/ops/own_adamw.h"
#include "worker/ops/step_context.h"

namespace stoke::worker {
namespace {

const auto kCuda = torch::TensorOptions().device(torch::kCUDA);

class HalfWeightsGpuTest : public ::testing::TestWithParam<bool> {  // graph?
 protected:
  void SetUp() override {
    if (const std::string why = testing::WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
    if (GetParam() && !StepGraph::Supported()) GTEST_SKIP() << "this build has no CUDA graphs";
  }
};

// Each copy holds its parameter in bf16, bit for bit.
void ExpectCopiesAre(const std::vector<torch::Tensor>& copies,
                     const std::vector<torch::Tensor>& params, const std::string& when) {
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(copies[i], params[i].detach().to(torch::kBFloat16)))
        << when << ": the copy of parameter " << i << " is not the weight";
  }
}

// Steps of `net` as a job of one GPU runs them: bf16 autocast and AdamW on Stoke's kernel
// (which writes the copies), in a step context of its own, eager or graphed.
class JobSteps {
 public:
  JobSteps(Network* net, double lr, bool graph)
      : params_(net->parameters()), context_(/*own_kernels_allowed=*/true), scope_(&context_) {
    OptimizerConfig adamw;
    adamw.kind = AdamWConfig{0.9, 0.999, 1e-8, AdamWRoute::kFused};
    adamw.lr = lr;
    optimizer_ = MakeOptimizer(adamw, params_, torch::kCUDA);
    optimizer_->SetLearningRate(lr);
    StepParts parts;
    parts.net = net;
    parts.optimizer = optimizer_.get();
    parts.parameters = params_;
    parts.device = torch::Device(torch::kCUDA, 0);
    parts.autocast = true;
    parts.autocast_dtype = torch::kBFloat16;
    parts.context = &context_;
    runner_ = std::make_unique<StepRunner>(parts, graph,
                                           [this](const std::string& line) { last_log_ = line; });
  }
  void Run(const torch::Tensor& inputs, const torch::Tensor& labels) {
    runner_->Run({Batch{inputs, labels}});
  }
  bool Graphed() const { return runner_->graphed(); }
  const std::string& LastLog() const { return last_log_; }
  const std::vector<torch::Tensor>& Params() const { return params_; }
  HalfWeights& Table() { return context_.half_weights(); }

 private:
  std::vector<torch::Tensor> params_;
  StepContext context_;
  StepContextScope scope_;  // installed while the steps live: the layers find the context
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<StepRunner> runner_;
  std::string last_log_;
};

TEST_P(HalfWeightsGpuTest, TheOptimizerLeavesTheNextStepItsCopiesExactly) {
  const bool graph = GetParam();
  torch::manual_seed(11);
  MlpConfig config;
  config.input_dim = 64;
  config.hidden = {260, 64};  // 260: copies that do not end on 16 bytes
  config.num_classes = 10;
  Mlp net(config);
  net->to(torch::kCUDA);
  JobSteps steps(net.get(), 1e-2, graph);
  const std::vector<torch::Tensor>& params = steps.Params();
  const torch::Tensor labels = torch::randint(10, {128}, kCuda.dtype(torch::kLong));
  std::vector<torch::Tensor> before;
  before.reserve(params.size());
  for (const auto& p : params) before.push_back(p.detach().clone());
  for (int s = 0; s < StepRunner::kWarmupSteps + 4; ++s) {
    steps.Run(torch::randn({128, 64}, kCuda), labels);
  }
  ASSERT_EQ(steps.Graphed(), graph) << steps.LastLog();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_FALSE(torch::equal(params[i], before[i])) << "parameter " << i << " never updated";
  }

  // Between steps (an evaluation), the copies the optimizer wrote are handed out.
  HalfWeights& table = steps.Table();
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor copy = table.Find(params[i], torch::kBFloat16);
    ASSERT_TRUE(copy.defined()) << "no copy of parameter " << i << " between steps";
    EXPECT_TRUE(torch::equal(copy, params[i].detach().to(torch::kBFloat16))) << i;
  }

  // The next step would cast nothing, and read exactly the weights.
  EXPECT_EQ(table.Refresh(params), 0) << "the optimizer left copies to cast";
  std::vector<torch::Tensor> copies;  // views of where the copies live, step after step
  copies.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    copies.push_back(table.Find(params[i], torch::kBFloat16));
    ASSERT_TRUE(copies.back().defined()) << "no copy of parameter " << i;
  }
  ExpectCopiesAre(copies, params, "after the steps");
  table.Release(params);

  // Changed between steps (as a loaded checkpoint would be): a graph's copies are cast
  // again before it replays; an eager step's Refresh casts them.
  {
    const torch::NoGradGuard no_grad;
    params[0].mul_(0.5);
  }
  if (graph) {
    EXPECT_TRUE(table.RecastChanged(params));
    ExpectCopiesAre(copies, params, "after a change between replays");
    EXPECT_FALSE(table.RecastChanged(params)) << "cast twice for one change";
  }
  steps.Run(torch::randn({128, 64}, kCuda), labels);
  ExpectCopiesAre(copies, params, "after one more step");

  // Between steps, a copy is handed out while its parameter is unchanged, not after.
  EXPECT_TRUE(table.Find(params[1], torch::kBFloat16).defined());
  {
    const torch::NoGradGuard no_grad;
    params[1].mul_(2);
  }
  EXPECT_FALSE(table.Find(params[1], torch::kBFloat16).defined()) << "handed out, though changed";

  // Changed, or not written by an optimizer since the last Refresh: every copy is cast.
  EXPECT_EQ(table.Refresh(params), static_cast<int>(params.size()));
  ExpectCopiesAre(copies, params, "cast");
  table.Release(params);
}

// A ResNet's convolutions multiply with the step's copies too (half_conv.h): their weights
// are channels-last, and so are the copies the optimizer writes, element for element.
TEST_P(HalfWeightsGpuTest, ChannelsLastConvolutionWeightsGetCopiesInTheirLayout) {
  const bool graph = GetParam();
  torch::manual_seed(12);
  ResNetConfig config;
  config.depth = 18;
  config.small_stem = true;
  ResNet net(config, std::vector<int64_t>{3, 16, 16}, 10);
  net->to(torch::kCUDA);
  {
    const torch::NoGradGuard no_grad;  // as the training run lays a CNN out
    for (auto& p : net->parameters()) {
      if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  JobSteps steps(net.get(), 1e-3, graph);
  const std::vector<torch::Tensor>& params = steps.Params();
  const torch::Tensor labels = torch::randint(10, {16}, kCuda.dtype(torch::kLong));
  for (int s = 0; s < StepRunner::kWarmupSteps + 3; ++s) {
    steps.Run(torch::randn({16, 3, 16, 16}, kCuda).contiguous(at::MemoryFormat::ChannelsLast),
              labels);
  }
  ASSERT_EQ(steps.Graphed(), graph) << steps.LastLog();

  HalfWeights& table = steps.Table();
  EXPECT_EQ(table.Refresh(params), 0) << "the optimizer left copies to cast";
  int convolutions = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].dim() != 4) continue;
    ++convolutions;
    const torch::Tensor copy = table.Find(params[i], torch::kBFloat16);
    ASSERT_TRUE(copy.defined()) << "no copy of convolution weight " << i;
    EXPECT_EQ(copy.strides(), params[i].strides()) << "weight " << i << ": not channels-last";
    EXPECT_TRUE(torch::equal(copy, params[i].detach().to(torch::kBFloat16)))
        << "the copy of weight " << i << " is not the weight";
  }
  EXPECT_EQ(convolutions, 20);  // ResNet-18: the stem, 16 in blocks, 3 projections
  table.Release(params);
}

INSTANTIATE_TEST_SUITE_P(EagerAndGraphed, HalfWeightsGpuTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Graphed" : "Eager"; });

}  // namespace
}  // namespace stoke::worker
