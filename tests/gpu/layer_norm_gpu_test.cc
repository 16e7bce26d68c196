// The fused layer norm (fp32 stream in, bf16/fp16 out; Stoke's kernels where the build
// has nvcc) against ATen's fp32 layer norm followed by the cast autocast would make:
// output, input gradient and both parameter gradients, for widths the kernels treat
// differently (a multiple of the warp, not one, wider than many warps). Skips without
// CUDA or without the kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>
#include <tuple>

#include "tests/support/own_kernels.h"
#include "worker/ops/fused_layer_norm.h"

namespace stoke::worker {
namespace {

class LayerNormGpuTest : public ::testing::TestWithParam<std::tuple<at::ScalarType, int64_t>> {
 protected:
  void SetUp() override {
    if (const std::string why = testing::WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
  }
};

double MaxAbs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

TEST_P(LayerNormGpuTest, MatchesAtensFp32LayerNormAndItsGradients) {
  const auto [dtype, width] = GetParam();
  torch::manual_seed(5);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  // A residual stream with an offset, so a one-pass variance would lose digits.
  const torch::Tensor x = torch::randn({3, 333, width}, cuda) * 2 + 5;
  const torch::Tensor weight = torch::randn({width}, cuda) * 0.5 + 1;
  const torch::Tensor bias = torch::randn({width}, cuda) * 0.1;
  const torch::Tensor dy = torch::randn({3, 333, width}, cuda).to(dtype);

  auto leaves = [&] {
    return std::make_tuple(x.clone().requires_grad_(true), weight.clone().requires_grad_(true),
                           bias.clone().requires_grad_(true));
  };
  auto [x1, w1, b1] = leaves();
  const torch::Tensor ours = FusedLayerNorm(x1, w1, b1, 1e-5, dtype);
  ours.backward(dy);
  auto [x2, w2, b2] = leaves();
  const torch::Tensor reference = torch::layer_norm(x2, {width}, w2, b2, 1e-5);
  reference.backward(dy.to(torch::kFloat32));

  ASSERT_EQ(ours.scalar_type(), dtype);
  ASSERT_EQ(ours.sizes(), x.sizes());
  // The output: the fp32 result rounded once to `dtype`.
  const double rtol = dtype == torch::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
  EXPECT_TRUE(
      torch::allclose(ours.to(torch::kFloat32), reference.detach(), rtol, 1e-3 * MaxAbs(reference)))
      << "largest difference " << MaxAbs(ours.to(torch::kFloat32) - reference);
  // Gradients: the same fp32 arithmetic, in another order.
  EXPECT_EQ(x1.grad().scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::allclose(x1.grad(), x2.grad(), 1e-3, 1e-4 * MaxAbs(x2.grad())))
      << "dx: largest difference " << MaxAbs(x1.grad() - x2.grad());
  EXPECT_TRUE(torch::allclose(w1.grad(), w2.grad(), 1e-3, 1e-4 * MaxAbs(w2.grad())))
      << "dgamma: largest difference " << MaxAbs(w1.grad() - w2.grad());
  EXPECT_TRUE(torch::allclose(b1.grad(), b2.grad(), 1e-3, 1e-4 * MaxAbs(b2.grad())))
      << "dbeta: largest difference " << MaxAbs(b1.grad() - b2.grad());
}

// The residual add fused in: (x + branch, norm(x + branch)) against ATen's add (the bf16
// branch promoted to fp32) and fp32 layer norm, with gradients arriving at both outputs
// (the stream's from further on, the norm's from the next matrix product) or only at the
// norm's.
TEST_P(LayerNormGpuTest, AddAndNormMatchAtensAddThenLayerNorm) {
  const auto [dtype, width] = GetParam();
  torch::manual_seed(6);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor x = torch::randn({2, 129, width}, cuda) * 2 + 3;
  const torch::Tensor branch = torch::randn({2, 129, width}, cuda).to(dtype);
  const torch::Tensor weight = torch::randn({width}, cuda) * 0.5 + 1;
  const torch::Tensor bias = torch::randn({width}, cuda) * 0.1;
  const torch::Tensor dy = torch::randn({2, 129, width}, cuda).to(dtype);
  const torch::Tensor dsum = torch::randn({2, 129, width}, cuda);

  for (const bool stream_gradient : {true, false}) {
    SCOPED_TRACE(stream_gradient ? "gradients at both outputs" : "gradient at the norm only");
    auto leaves = [&] {
      return std::make_tuple(x.clone().requires_grad_(true), branch.clone().requires_grad_(true),
                             weight.clone().requires_grad_(true),
                             bias.clone().requires_grad_(true));
    };
    auto [x1, r1, w1, b1] = leaves();
    const auto [sum1, y1] = FusedAddLayerNorm(x1, r1, w1, b1, 1e-5, dtype);
    torch::Tensor loss1 = (y1.to(torch::kFloat32) * dy.to(torch::kFloat32)).sum();
    if (stream_gradient) loss1 = loss1 + (sum1 * dsum).sum();
    loss1.backward();
    auto [x2, r2, w2, b2] = leaves();
    const torch::Tensor sum2 = x2 + r2;
    const torch::Tensor y2 = torch::layer_norm(sum2, {width}, w2, b2, 1e-5);
    torch::Tensor loss2 = (y2 * dy.to(torch::kFloat32)).sum();
    if (stream_gradient) loss2 = loss2 + (sum2 * dsum).sum();
    loss2.backward();

    ASSERT_EQ(sum1.scalar_type(), torch::kFloat32);
    ASSERT_EQ(y1.scalar_type(), dtype);
    EXPECT_TRUE(torch::allclose(sum1, sum2, 1e-6, 1e-6)) << "the stream's new value";
    const double rtol = dtype == torch::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    EXPECT_TRUE(
        torch::allclose(y1.to(torch::kFloat32), y2.detach(), rtol, 1e-3 * MaxAbs(y2.detach())))
        << "norm: largest difference " << MaxAbs(y1.to(torch::kFloat32) - y2);
    EXPECT_EQ(x1.grad().scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::allclose(x1.grad(), x2.grad(), 1e-3, 1e-4 * MaxAbs(x2.grad())))
        << "stream gradient: largest difference " << MaxAbs(x1.grad() - x2.grad());
    // The branch's gradient is the stream's, rounded once to the branch's type.
    EXPECT_EQ(r1.grad().scalar_type(), dtype);
    EXPECT_TRUE(torch::allclose(r1.grad().to(torch::kFloat32), r2.grad().to(torch::kFloat32), rtol,
                                1e-3 * MaxAbs(x2.grad())))
        << "branch gradient: largest difference "
        << MaxAbs(r1.grad().to(torch::kFloat32) - r2.grad().to(torch::kFloat32));
    EXPECT_TRUE(torch::allclose(w1.grad(), w2.grad(), 1e-3, 1e-4 * MaxAbs(w2.grad())))
        << "dgamma: largest difference " << MaxAbs(w1.grad() - w2.grad());
    EXPECT_TRUE(torch::allclose(b1.grad(), b2.grad(), 1e-3, 1e-4 * MaxAbs(b2.grad())))
        << "dbeta: largest difference " << MaxAbs(b1.grad() - b2.grad());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Widths, LayerNormGpuTest,
    ::testing::Combine(::testing::Values(torch::kBFloat16, torch::kHalf),
                       // GPT-2's width, one that is no multiple of 32, a wide one.
                       ::testing::Values(int64_t{768}, int64_t{100}, int64_t{5000})),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == torch::kBFloat16 ? "Bf16" : "Fp16") + "Width" +
             std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace stoke::worker
