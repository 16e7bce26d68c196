// Stoke's max-pool kernels against torch::max_pool2d on the same bf16/fp16 channels-last
// input: the same output (exactly: a max is one of its inputs) and the same input
// gradient, for the ResNet stem's window, windows clipped at odd edges, windows that do
// not overlap, and stride 1 (every input in up to nine windows), with ties (values
// rounded to integers) where the choice of tap decides which input gets the gradient.
// Skips without CUDA or without the kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>
#include <tuple>

#include "tests/support/require_cuda.h"
#include "worker/ops/fused_max_pool.h"

namespace stoke::worker {
namespace {

struct Case {
  at::ScalarType dtype;
  int64_t batch, channels, height, width, kernel, stride, padding;
  bool ties;
};

class MaxPoolGpuTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    STOKE_SKIP_WITHOUT_CUDA();
    const torch::Tensor probe =
        torch::zeros({1, 8, 4, 4},
                     torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16))
            .contiguous(at::MemoryFormat::ChannelsLast);
    if (!MaxPoolUsesOwnKernels(probe, 3, 1)) GTEST_SKIP() << "built without Stoke's CUDA kernels";
  }
};

TEST_P(MaxPoolGpuTest, MatchesTorchsMaxPoolAndItsGradient) {
  const Case c = GetParam();
  torch::manual_seed(9);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::Tensor values = torch::randn({c.batch, c.channels, c.height, c.width}, cuda) * 3;
  if (c.ties) values = values.round();
  const torch::Tensor x = values.to(c.dtype).contiguous(at::MemoryFormat::ChannelsLast);
  ASSERT_TRUE(MaxPoolUsesOwnKernels(x, c.kernel, c.padding));

  const torch::Tensor x1 = x.clone().requires_grad_(true);
  const torch::Tensor y1 = MaxPool2d(x1, c.kernel, c.stride, c.padding);
  const torch::Tensor x2 = x.clone().requires_grad_(true);
  const torch::Tensor y2 = torch::max_pool2d(x2, c.kernel, c.stride, c.padding);
  ASSERT_EQ(y1.sizes(), y2.sizes());
  EXPECT_TRUE(y1.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(y1, y2)) << "outputs differ";

  const torch::Tensor dy = torch::randn(y2.sizes(), cuda).to(c.dtype);
  y1.backward(dy);
  y2.backward(dy);
  const torch::Tensor g1 = x1.grad().to(torch::kFloat32);
  const torch::Tensor g2 = x2.grad().to(torch::kFloat32);
  // The same outputs' gradients land on the same inputs; only the order of a sum of a few
  // of them, rounded once, may differ.
  const double largest = g2.abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(g1, g2, 1.0 / 128, largest / 256))
      << "largest difference " << (g1 - g2).abs().max().item<double>() << " of " << largest;
  EXPECT_EQ((g1 != 0).sum().item<int64_t>(), (g2 != 0).sum().item<int64_t>())
      << "the gradient reached other inputs";
}

INSTANTIATE_TEST_SUITE_P(Windows, MaxPoolGpuTest,
                         ::testing::Values(Case{torch::kBFloat16, 4, 64, 112, 112, 3, 2, 1, false},
                                           Case{torch::kBFloat16, 4, 64, 112, 112, 3, 2, 1, true},
                                           Case{torch::kBFloat16, 2, 16, 7, 9, 3, 2, 1, true},
                                           Case{torch::kBFloat16, 3, 24, 8, 8, 2, 2, 0, false},
                                           Case{torch::kHalf, 2, 8, 10, 10, 3, 1, 1, true},
                                           Case{torch::kHalf, 2, 32, 15, 13, 5, 3, 2, false}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(c.dtype == torch::kBFloat16 ? "Bf16" : "Fp16") + "_" +
                                  std::to_string(c.height) + "x" + std::to_string(c.width) + "_k" +
                                  std::to_string(c.kernel) + "s" + std::to_string(c.stride) + "p" +
                                  std::to_string(c.padding) + (c.ties ? "_ties" : "");
                         });

}  // namespace
}  // namespace stoke::worker
