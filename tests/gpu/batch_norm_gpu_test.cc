// The fused batch norm (+ residual add + ReLU; Stoke's kernels where the build has nvcc)
// against torch's BatchNorm2d run in fp32 on the same values: output, running
// statistics, and the gradients of the input, the residual, weight and bias, for channel
// counts the kernels tile differently (one tile of 64, a tile not a power of two, a
// partial last tile, eight tiles of a ResNet's last stage) and with a per-channel offset
// that a one-pass variance would lose digits to. Skips without CUDA or the kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>
#include <tuple>

#include "tests/support/require_cuda.h"
#include "worker/ops/fused_batch_norm.h"

namespace stoke::worker {
namespace {

struct Shape {
  int64_t batch, channels, height, width;
};

class BatchNormGpuTest : public ::testing::TestWithParam<std::tuple<at::ScalarType, Shape>> {
 protected:
  void SetUp() override {
    STOKE_SKIP_WITHOUT_CUDA();
    torch::nn::BatchNorm2d probe(8);
    probe->to(torch::kCUDA);
    const torch::Tensor x =
        torch::zeros({2, 8, 2, 2},
                     torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16))
            .contiguous(at::MemoryFormat::ChannelsLast);
    if (!BatchNormActUsesOwnKernels(*probe, x, torch::Tensor())) {
      GTEST_SKIP() << "built without Stoke's CUDA kernels";
    }
  }
};

double MaxAbs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

torch::nn::BatchNorm2d NormWithParams(int64_t channels) {
  torch::nn::BatchNorm2d norm(channels);
  torch::NoGradGuard no_grad;
  norm->weight.copy_(torch::randn({channels}) * 0.5 + 1);
  norm->bias.copy_(torch::randn({channels}) * 0.2);
  norm->running_mean.copy_(torch::randn({channels}));
  norm->running_var.copy_(torch::rand({channels}) + 0.5);
  norm->to(torch::kCUDA);
  return norm;
}

void ExpectClose(const torch::Tensor& ours, const torch::Tensor& reference, double rtol,
                 const std::string& what) {
  const torch::Tensor a = ours.to(torch::kFloat32);
  const torch::Tensor b = reference.to(torch::kFloat32);
  EXPECT_TRUE(torch::allclose(a, b, rtol, rtol * MaxAbs(b)))
      << what << ": largest difference " << MaxAbs(a - b) << " against largest value " << MaxAbs(b);
}

TEST_P(BatchNormGpuTest, MatchesTorchsFp32BatchNormWithAddAndRelu) {
  const auto [dtype, shape] = GetParam();
  const int64_t c = shape.channels;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto sizes = std::vector<int64_t>{shape.batch, c, shape.height, shape.width};
  const double rtol = dtype == torch::kBFloat16 ? 1.0 / 64 : 1.0 / 256;

  for (const bool residual_on : {false, true}) {
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(std::string(residual_on ? "with" : "without") + " residual, " +
                   (relu ? "with" : "without") + " ReLU");
      torch::manual_seed(11);
      // Channels centred far from zero (offset 8 + c / 16), as a convolution's output may be.
      const torch::Tensor offset =
          (torch::arange(c, cuda).to(torch::kFloat32) / 16 + 8).view({1, c, 1, 1});
      const torch::Tensor x = (torch::randn(sizes, cuda) * 2 + offset)
                                  .to(dtype)
                                  .contiguous(at::MemoryFormat::ChannelsLast);
      const torch::Tensor residual =
          torch::randn(sizes, cuda).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
      const torch::Tensor dy =
          torch::randn(sizes, cuda).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);

      torch::nn::BatchNorm2d ours_norm = NormWithParams(c);
      torch::nn::BatchNorm2d reference_norm = NormWithParams(c);
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < ours_norm->parameters().size(); ++i) {
          reference_norm->parameters()[i].copy_(ours_norm->parameters()[i]);
        }
        for (size_t i = 0; i < ours_norm->buffers().size(); ++i) {
          reference_norm->buffers()[i].copy_(ours_norm->buffers()[i]);
        }
      }
      ASSERT_TRUE(
          BatchNormActUsesOwnKernels(*ours_norm, x, residual_on ? residual : torch::Tensor()));

      const torch::Tensor x1 = x.clone().requires_grad_(true);
      const torch::Tensor r1 = residual.clone().requires_grad_(true);
      const torch::Tensor y1 =
          BatchNormAct(*ours_norm, x1, residual_on ? r1 : torch::Tensor(), relu);
      y1.backward(dy);

      // The reference in fp32. Its ReLU mask is taken from our output: a value within
      // rounding of zero may fall either side, and the gradient checked is the one that
      // follows from the mask the forward pass chose.
      const torch::Tensor x2 = x.to(torch::kFloat32).requires_grad_(true);
      const torch::Tensor r2 = residual.to(torch::kFloat32).requires_grad_(true);
      torch::Tensor z2 = reference_norm->forward(x2);
      if (residual_on) z2 = z2 + r2;
      const torch::Tensor mask =
          relu ? (y1.detach() > 0).to(torch::kFloat32) : torch::ones_like(z2);
      const torch::Tensor y2 = relu ? torch::relu(z2) : z2;
      (z2 * mask * dy.to(torch::kFloat32)).sum().backward();

      ASSERT_EQ(y1.scalar_type(), dtype);
      ASSERT_EQ(y1.sizes(), x.sizes());
      EXPECT_TRUE(y1.is_contiguous(at::MemoryFormat::ChannelsLast));
      ExpectClose(y1, y2.detach(), rtol, "output");
      ExpectClose(ours_norm->running_mean, reference_norm->running_mean, 1e-4, "running mean");
      ExpectClose(ours_norm->running_var, reference_norm->running_var, 1e-3, "running variance");
      EXPECT_EQ(ours_norm->num_batches_tracked.item<int64_t>(), 1);
      ExpectClose(x1.grad(), x2.grad(), rtol, "input gradient");
      ExpectClose(ours_norm->weight.grad(), reference_norm->weight.grad(), 1e-3, "weight gradient");
      ExpectClose(ours_norm->bias.grad(), reference_norm->bias.grad(), 1e-3, "bias gradient");
      if (residual_on) {
        // The residual's gradient is dy through the mask: exact in any type.
        EXPECT_TRUE(torch::equal(r1.grad(), (dy * mask.to(dtype)).to(dtype)))
            << "residual gradient: largest difference "
            << MaxAbs(r1.grad().to(torch::kFloat32) - r2.grad());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ChannelTilings, BatchNormGpuTest,
                         ::testing::Values(std::make_tuple(torch::kBFloat16, Shape{8, 64, 56, 56}),
                                           std::make_tuple(torch::kBFloat16, Shape{4, 2048, 7, 7}),
                                           std::make_tuple(torch::kBFloat16, Shape{3, 24, 5, 3}),
                                           std::make_tuple(torch::kBFloat16, Shape{2, 520, 9, 9}),
                                           std::make_tuple(torch::kHalf, Shape{8, 256, 14, 14}),
                                           std::make_tuple(torch::kHalf, Shape{1, 8, 1, 3})),
                         [](const auto& info) {
                           const Shape s = std::get<1>(info.param);
                           return std::string(std::get<0>(info.param) == torch::kBFloat16
                                                  ? "Bf16"
                                                  : "Fp16") +
                                  "_" + std::to_string(s.batch) + "x" + std::to_string(s.channels) +
                                  "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
                         });

// Where the kernels do not apply, the same call is the module, the add and the ReLU.
TEST(BatchNormActFallbackTest, EvalModeAndFp32TakeTheModule) {
  STOKE_SKIP_WITHOUT_CUDA();
  torch::manual_seed(3);
  torch::nn::BatchNorm2d norm = NormWithParams(16);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor x =
      torch::randn({4, 16, 6, 6}, cuda).contiguous(at::MemoryFormat::ChannelsLast);
  const torch::Tensor residual = torch::randn({4, 16, 6, 6}, cuda);
  EXPECT_FALSE(BatchNormActUsesOwnKernels(*norm, x, residual)) << "fp32 input";
  norm->eval();
  const torch::Tensor x16 = x.to(torch::kBFloat16);
  EXPECT_FALSE(BatchNormActUsesOwnKernels(*norm, x16, torch::Tensor())) << "eval mode";
  const torch::Tensor ours = BatchNormAct(*norm, x16, residual.to(torch::kBFloat16), true);
  const torch::Tensor reference = torch::relu(norm->forward(x16) + residual.to(torch::kBFloat16));
  EXPECT_TRUE(torch::equal(ours, reference));
}

}  // namespace
}  // namespace stoke::worker
