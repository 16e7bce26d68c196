// The multi-tensor AdamW against LibTorch's own, step for step: same parameters, same
// state, checkpoints that load into either. And what the loop sees of each optimizer
// through the Optimizer interface.
#include "worker/engine/multi_tensor_adamw.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

#include "worker/engine/optimizers.h"

namespace stoke::worker {
namespace {

std::vector<torch::Tensor> Parameters() {
  torch::manual_seed(11);
  return {torch::randn({8, 4}).requires_grad_(), torch::randn({4}).requires_grad_(),
          torch::randn({2, 3, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(),
          torch::randn({5}).requires_grad_()};
}

torch::optim::AdamWOptions Options() {
  return torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-6).weight_decay(0.1);
}

// Gives every parameter but the last (which skips steps 2 and 3, as an unused parameter
// would) a gradient drawn for `step`, then steps.
void Step(torch::optim::Optimizer& optimizer, std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor g = torch::randn_like(params[i]);
    const bool skipped = i + 1 == params.size() && (step == 2 || step == 3);
    params[i].mutable_grad() = skipped ? torch::Tensor() : g;
  }
  optimizer.step();
}

TEST(MultiTensorAdamW, MatchesLibTorchsAdamWStepForStep) {
  auto reference = Parameters();
  auto ours = Parameters();
  torch::optim::AdamW reference_optimizer(reference, Options());
  MultiTensorAdamW optimizer(ours, Options(), AdamWRoute::kForeach);
  EXPECT_EQ(optimizer.RouteFor(torch::kCPU), AdamWRoute::kForeach);
  for (int step = 1; step <= 6; ++step) {
    Step(reference_optimizer, reference, step);
    Step(optimizer, ours, step);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], reference[i], 1e-6, 1e-7))
          << "step " << step << ", parameter " << i << " differs by "
          << (ours[i] - reference[i]).abs().max().item<float>();
    }
  }
  // The update moved the parameters (the comparison is not of two idle optimizers).
  EXPECT_FALSE(torch::allclose(ours[0], Parameters()[0], 1e-3, 1e-3));
}

TEST(MultiTensorAdamW, CheckpointsLoadIntoLibTorchsAdamWAndContinueAlike) {
  auto ours = Parameters();
  MultiTensorAdamW optimizer(ours, Options(), AdamWRoute::kAuto);
  for (int step = 1; step <= 3; ++step) Step(optimizer, ours, step);
  std::stringstream saved;
  torch::save(optimizer, saved);

  auto reference = Parameters();
  for (size_t i = 0; i < ours.size(); ++i) {
    torch::NoGradGuard no_grad;
    reference[i].copy_(ours[i]);
  }
  torch::optim::AdamW reference_optimizer(reference, Options());
  torch::load(reference_optimizer, saved);
  for (int step = 4; step <= 5; ++step) {
    Step(reference_optimizer, reference, step);
    Step(optimizer, ours, step);
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ours[i], reference[i], 1e-6, 1e-7)) << "parameter " << i;
  }
}

// What a job of several ranks relies on (GradientReducer): stepping part by part gives
// the same parameters as one step, and before_part(k) runs once, in order, after the
// parts before k are updated and before part k is.
TEST(MultiTensorAdamW, StepInPartsUpdatesEachPartAfterItsCallAndMatchesOneStep) {
  auto whole = Parameters();
  auto parted = Parameters();
  MultiTensorAdamW whole_optimizer(whole, Options(), AdamWRoute::kForeach);
  MultiTensorAdamW parted_optimizer(parted, Options(), AdamWRoute::kForeach);
  // Parts in reverse registration order, as buckets are; parameter 0 in no part.
  const std::vector<std::vector<torch::Tensor>> parts = {{parted[3], parted[2]}, {parted[1]}};
  for (int step = 1; step <= 4; ++step) {
    Step(whole_optimizer, whole, step);
    torch::manual_seed(100 + step);  // the gradients Step draws
    for (size_t i = 0; i < parted.size(); ++i) {
      torch::Tensor g = torch::randn_like(parted[i]);
      const bool skipped = i + 1 == parted.size() && (step == 2 || step == 3);
      parted[i].mutable_grad() = skipped ? torch::Tensor() : g;
    }
    std::vector<torch::Tensor> before;
    for (const auto& p : parted) before.push_back(p.detach().clone());
    std::vector<size_t> calls;
    parted_optimizer.StepInParts(parts, [&](size_t k) {
      calls.push_back(k);
      // Part 0 (parameters 3 and 2) is updated before part 1's call, and nothing else is.
      const bool part0_updated = k == 1;
      EXPECT_EQ(!torch::equal(parted[2], before[2]), part0_updated) << "step " << step;
      EXPECT_TRUE(torch::equal(parted[1], before[1])) << "step " << step << ", call " << k;
      EXPECT_TRUE(torch::equal(parted[0], before[0])) << "step " << step << ", call " << k;
    });
    EXPECT_EQ(calls, (std::vector<size_t>{0, 1})) << "step " << step;
    for (size_t i = 0; i < parted.size(); ++i) {
      EXPECT_TRUE(torch::allclose(parted[i], whole[i], 1e-6, 1e-7))
          << "step " << step << ", parameter " << i;
    }
  }
  EXPECT_FALSE(torch::allclose(parted[0], Parameters()[0], 1e-3, 1e-3));
}

// SGD updates all at once: StepInParts lets every part's wait happen first, then steps,
// and the loop asks for no bucket-by-bucket update. Its rate is the one set last.
TEST(Optimizers, SgdWaitsForEveryPartThenStepsAtTheRateSetLast) {
  std::vector<torch::Tensor> params = Parameters();
  OptimizerConfig config;
  config.kind = SgdConfig{};
  const auto sgd = MakeOptimizer(config, params, torch::kCPU);
  EXPECT_EQ(sgd->name(), "SGD");
  EXPECT_FALSE(sgd->StepsInParts());
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  std::vector<torch::Tensor> before;
  for (const auto& p : params) before.push_back(p.detach().clone());
  sgd->SetLearningRate(0.5);
  std::vector<size_t> calls;
  sgd->StepInParts({{params[0]}, {params[1], params[2]}}, [&](size_t k) {
    calls.push_back(k);
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
  });
  EXPECT_EQ(calls, (std::vector<size_t>{0, 1}));
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i], before[i] - 0.5)) << "parameter " << i;
  }
  EXPECT_NE(sgd->WhyNotCapturable(/*learning_rate_changes=*/true, false), "");
  EXPECT_EQ(sgd->WhyNotCapturable(false, false), "");
  EXPECT_FALSE(sgd->SkipOnDeviceWhere(torch::zeros({1})));
}

// AdamW names its route; off a GPU's fused kernel it cannot be captured or skip a step on
// the device.
TEST(Optimizers, AdamWOnACpuIsForeachAndNotCapturable) {
  OptimizerConfig config;
  config.kind = AdamWConfig{};
  const auto adamw = MakeOptimizer(config, Parameters(), torch::kCPU);
  EXPECT_EQ(adamw->name(), "AdamW (foreach)");
  EXPECT_TRUE(adamw->StepsInParts());
  EXPECT_NE(adamw->WhyNotCapturable(false, false), "");
  EXPECT_FALSE(adamw->SkipOnDeviceWhere(torch::zeros({1})));
  EXPECT_NE(dynamic_cast<torch::optim::AdamW*>(&adamw->state()), nullptr)
      << "checkpoints keep LibTorch's AdamW state";
}

}  // namespace
}  // namespace stoke::worker
