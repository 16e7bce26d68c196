// The low-precision-logits cross-entropy (worker/ops/softmax_cross_entropy.h) gives the
// loss of ATen's cross-entropy of the logits cast to fp32, and its gradient rounded once
// to the logits' dtype, confident targets included; ComputeLoss takes it for bf16 logits.
#include "worker/ops/softmax_cross_entropy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/engine/step_math.h"

namespace stoke::worker {
namespace {

struct Result {
  torch::Tensor loss, grad;
};

// What the fused function replaces: fp32 cross-entropy of the cast logits, whose fp32
// gradient is rounded to the logits' dtype as the cast's backward does.
Result Reference(const torch::Tensor& logits, const torch::Tensor& targets, double upstream) {
  const torch::Tensor x = logits.detach().requires_grad_();
  const torch::Tensor loss =
      torch::nn::functional::cross_entropy(x.to(torch::kFloat32), targets) * upstream;
  loss.backward();
  return {loss.detach(), x.grad()};
}

Result Fused(const torch::Tensor& logits, const torch::Tensor& targets, double upstream) {
  const torch::Tensor x = logits.detach().requires_grad_();
  const torch::Tensor loss = SoftmaxCrossEntropy(x, targets) * upstream;
  loss.backward();
  return {loss.detach(), x.grad()};
}

// At most one rounding apart in bf16 (8 bits of mantissa) or fp16 (11).
void ExpectGradientsClose(const torch::Tensor& got, const torch::Tensor& want, double ulp) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type());
  const torch::Tensor g = got.to(torch::kFloat32), w = want.to(torch::kFloat32);
  const torch::Tensor allowed = w.abs() * ulp + 1e-12;
  EXPECT_TRUE(((g - w).abs() <= allowed).all().item<bool>())
      << "largest difference " << (g - w).abs().max().item<float>();
}

TEST(SoftmaxCrossEntropy, MatchesFp32CrossEntropyOfBf16Logits) {
  torch::manual_seed(5);
  const torch::Tensor logits = (torch::randn({64, 1000}) * 3).to(torch::kBFloat16);
  const torch::Tensor targets = torch::randint(1000, {64});
  for (double upstream : {1.0, 0.25}) {
    const Result want = Reference(logits, targets, upstream);
    const Result got = Fused(logits, targets, upstream);
    EXPECT_EQ(got.loss.scalar_type(), torch::kFloat32);
    EXPECT_NEAR(got.loss.item<float>(), want.loss.item<float>(), 1e-5 * want.loss.item<float>());
    ExpectGradientsClose(got.grad, want.grad, 1.0 / 128);
  }
}

TEST(SoftmaxCrossEntropy, KeepsTheGradientOfAConfidentTarget) {
  // p(target) = 0.9996: in bf16, p rounds to 1 and p - 1 to 0; computed in fp32 first,
  // the target's gradient stays about -0.0004 / N.
  torch::Tensor logits = torch::zeros({4, 8});
  logits.index_put_({torch::indexing::Slice(), 3}, 10.0);
  const torch::Tensor low = logits.to(torch::kBFloat16);
  const torch::Tensor targets = torch::full({4}, 3, torch::kLong);
  const Result want = Reference(low, targets, 1.0);
  const Result got = Fused(low, targets, 1.0);
  const float target_grad = got.grad.index({0, 3}).item<float>();
  EXPECT_LT(target_grad, 0.0f);
  EXPECT_NEAR(target_grad, want.grad.index({0, 3}).item<float>(), 1e-2 * std::abs(target_grad));
  ExpectGradientsClose(got.grad, want.grad, 1.0 / 128);
}

TEST(SoftmaxCrossEntropy, WorksForFp16Logits) {
  torch::manual_seed(6);
  const torch::Tensor logits = torch::randn({16, 50}).to(torch::kHalf);
  const torch::Tensor targets = torch::randint(50, {16});
  const Result want = Reference(logits, targets, 1.0);
  const Result got = Fused(logits, targets, 1.0);
  EXPECT_NEAR(got.loss.item<float>(), want.loss.item<float>(), 1e-5 * want.loss.item<float>());
  ExpectGradientsClose(got.grad, want.grad, 1.0 / 1024);
}

TEST(SoftmaxCrossEntropy, ComputeLossTakesItForLanguageModelLogitsInBf16) {
  torch::manual_seed(7);
  const torch::Tensor logits = torch::randn({2, 5, 30}).to(torch::kBFloat16).requires_grad_();
  const torch::Tensor targets = torch::randint(30, {2, 5});
  const torch::Tensor loss = ComputeLoss(logits, targets, LossKind::kCrossEntropy);
  loss.backward();
  const Result want = Reference(logits.reshape({10, 30}), targets.reshape({10}), 1.0);
  EXPECT_NEAR(loss.item<float>(), want.loss.item<float>(), 1e-5 * want.loss.item<float>());
  ExpectGradientsClose(logits.grad().reshape({10, 30}), want.grad, 1.0 / 128);
  // The backward node is the fused function's, not a cast's.
  EXPECT_NE(loss.grad_fn()->name().find("SoftmaxCrossEntropy"), std::string::npos)
      << loss.grad_fn()->name();
}

TEST(SoftmaxCrossEntropy, NamesBadShapes) {
  const torch::Tensor logits = torch::randn({4, 3}).to(torch::kBFloat16);
  try {
    SoftmaxCrossEntropy(logits, torch::zeros({5}, torch::kLong));
    FAIL() << "accepted 5 targets for 4 rows";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected logits [N, C] and targets [N]"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace stoke::worker
