// The step context (worker/ops/step_context.h): a run's settings and tables reach the
// layers through a scope on the thread that steps the run, never through process-wide
// state: they end with the scope, stay off other threads, and still reach a checkpointed
// block's recompute when backward runs on a thread of its own, as autograd's CUDA
// threads do.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>
#include <vector>

#include "worker/ops/activation_checkpoint.h"
#include "worker/ops/step_context.h"

namespace stoke::worker {
namespace {

TEST(StepContext, ASettingLastsAsLongAsItsScope) {
  EXPECT_EQ(StepContext::Current(), nullptr);
  EXPECT_TRUE(OwnKernelsAllowed()) << "outside any run, a job's default applies";
  StepContext aten_only(/*own_kernels_allowed=*/false);
  {
    const StepContextScope scope(&aten_only);
    EXPECT_EQ(StepContext::Current(), &aten_only);
    EXPECT_FALSE(OwnKernelsAllowed());
    StepContext inner(/*own_kernels_allowed=*/true);
    {
      const StepContextScope nested(&inner);
      EXPECT_TRUE(OwnKernelsAllowed());
    }
    EXPECT_FALSE(OwnKernelsAllowed()) << "the outer run's setting is back";
  }
  EXPECT_EQ(StepContext::Current(), nullptr);
  EXPECT_TRUE(OwnKernelsAllowed());
}

TEST(StepContext, AnotherThreadDoesNotSeeARunsContext) {
  StepContext aten_only(/*own_kernels_allowed=*/false);
  const StepContextScope scope(&aten_only);
  StepContext* seen = &aten_only;
  bool allowed = false;
  std::thread other([&] {
    seen = StepContext::Current();
    allowed = OwnKernelsAllowed();
  });
  other.join();
  EXPECT_EQ(seen, nullptr);
  EXPECT_TRUE(allowed);
}

TEST(StepContext, ARecomputeInBackwardOnAnotherThreadSeesTheForwardPassContext) {
  StepContext run(/*own_kernels_allowed=*/false);
  std::vector<StepContext*> seen;  // at each run of the block: forward, then the recompute
  const CheckpointedBlock block = [&seen](const torch::Tensor& x) {
    seen.push_back(StepContext::Current());
    return (x * x).sum();
  };
  const torch::Tensor x = torch::randn({16}).requires_grad_(true);
  torch::Tensor loss;
  {
    const StepContextScope scope(&run);
    loss = CheckpointedForward(block, x);
  }
  // Backward with no scope installed, on a thread of its own.
  std::thread backward([&] { loss.backward(); });
  backward.join();
  ASSERT_EQ(seen.size(), 2u) << "the block ran in forward and again in backward";
  EXPECT_EQ(seen[0], &run);
  EXPECT_EQ(seen[1], &run) << "the recompute chose as the forward pass did";
  EXPECT_TRUE(torch::allclose(x.grad(), 2 * x.detach()));
  EXPECT_EQ(StepContext::Current(), nullptr);
}

}  // namespace
}  // namespace stoke::worker
