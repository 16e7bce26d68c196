// The step's table of 16-bit weight copies (worker/ops/half_weights.h) on what a CPU
// can check: it never keeps a parameter alive (a batch search's trial network must free
// its memory), and it hands out no copy that no step made. Copies themselves need
// Stoke's CUDA kernels: tests/gpu/half_linear_gpu_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "worker/ops/half_weights.h"

namespace stoke::worker {
namespace {

TEST(HalfWeights, AWantedParameterIsFreedWithItsNetwork) {
  HalfWeights table;
  torch::Tensor weight = torch::randn({64, 32}).requires_grad_(true);
  const c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> watch(
      weight.getIntrusivePtr());
  table.Want(weight, torch::kBFloat16);
  weight.reset();
  EXPECT_TRUE(watch.expired()) << "the table kept a parameter alive";

  // A later tensor, wherever it lands, is not taken for the dead one.
  torch::Tensor next = torch::randn({64, 32});
  EXPECT_FALSE(table.Find(next, torch::kBFloat16).defined());
  table.Forget({next});
}

TEST(HalfWeights, NoCopyIsHandedOutThatNoStepMade) {
  HalfWeights table;
  const torch::Tensor weight = torch::randn({8, 8});
  EXPECT_FALSE(table.Find(weight, torch::kBFloat16).defined());
  table.Want(weight, torch::kBFloat16);
  EXPECT_FALSE(table.Find(weight, torch::kBFloat16).defined());
  // On a CPU tensor (or in a build without Stoke's kernels) Refresh makes none either.
  table.Refresh({weight});
  EXPECT_FALSE(table.Find(weight, torch::kBFloat16).defined());
  table.Forget({weight});
}

}  // namespace
}  // namespace stoke::worker
