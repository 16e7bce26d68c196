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

#include "worker/engine/fused_layer_norm.h"

namespace stoke::worker {
namespace {

class LayerNormGpuTest : public ::testing::TestWithParam<std::tuple<at::ScalarType, int64_t>> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    const torch::Tensor probe = torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA));
    if (!FusedLayerNormApplies(probe)) GTEST_SKIP() << "built without Stoke's CUDA kernels";
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
