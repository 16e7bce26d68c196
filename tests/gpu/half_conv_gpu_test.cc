// AutocastConv2d against the module's convolution under the same autocast: the same
// output and input and weight gradients (each gradient in its input's type and layout,
// channels-last included) for a ResNet's strided 3x3 and 1x1 projection; inside a step's
// context it multiplies with the step's 16-bit copy of the weight, not a cast of its own;
// outside autocast, or for a convolution it does not cover, it is the module's forward.
// Skips without CUDA or Stoke's kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "tests/support/own_kernels.h"
#include "worker/ops/half_conv.h"
#include "worker/ops/half_weights.h"
#include "worker/ops/step_context.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast;

class HalfConvGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
  }
  void TearDown() override { compat::SetAutocast(c10::DeviceType::CUDA, false, torch::kBFloat16); }
};

torch::nn::Conv2d ChannelsLastConv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  torch::nn::Conv2d conv(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
  conv->to(torch::kCUDA);
  const torch::NoGradGuard no_grad;
  conv->weight.set_data(conv->weight.data().contiguous(kChannelsLast));
  return conv;
}

struct Gradients {
  torch::Tensor y, dx, dweight;
};

// The convolution of x (a fresh leaf) under bf16 autocast, by AutocastConv2d or the
// module, and the gradients dy gives.
Gradients Convolve(torch::nn::Conv2d& conv, const torch::Tensor& x_value, const torch::Tensor& dy,
                   bool ours) {
  conv->zero_grad();
  const torch::Tensor x = x_value.clone(kChannelsLast).requires_grad_(true);
  compat::SetAutocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
  const torch::Tensor y = ours ? AutocastConv2d(*conv, x) : conv->forward(x);
  compat::SetAutocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
  y.backward(dy);
  return {y.detach(), x.grad(), conv->weight.grad().clone()};
}

void ExpectSame(const torch::Tensor& ours, const torch::Tensor& reference, const char* what) {
  EXPECT_EQ(ours.scalar_type(), reference.scalar_type()) << what;
  EXPECT_EQ(ours.sizes(), reference.sizes()) << what;
  EXPECT_EQ(ours.strides(), reference.strides()) << what << ": not in the reference's layout";
  const double scale = reference.abs().max().item<double>();
  const double error =
      (ours.to(torch::kFloat64) - reference.to(torch::kFloat64)).abs().max().item<double>();
  // The same cuDNN convolution on the same bf16 operands: equal but for the algorithm
  // cuDNN may pick, which sums in another order.
  EXPECT_LE(error, 2e-3 * scale) << what << ": max |ours - ATen's| " << error << " of " << scale;
}

TEST_F(HalfConvGpuTest, MatchesTheModulesConvolutionUnderAutocast) {
  torch::manual_seed(5);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  struct Case {
    int64_t in, out, kernel, stride, size;
  };
  // A basic block's strided 3x3, and the 1x1 projection beside it, at 16x16.
  for (const Case& c : {Case{64, 128, 3, 2, 16}, Case{64, 128, 1, 2, 16}}) {
    SCOPED_TRACE(std::to_string(c.kernel) + "x" + std::to_string(c.kernel));
    torch::nn::Conv2d conv = ChannelsLastConv(c.in, c.out, c.kernel, c.stride);
    // The input as a ReLU's output in bf16 would be in a network; the gradient in bf16.
    const torch::Tensor x =
        torch::randn({8, c.in, c.size, c.size}, cuda).relu().to(torch::kBFloat16);
    const int64_t out_size = c.size / c.stride;
    const torch::Tensor dy = torch::randn({8, c.out, out_size, out_size}, cuda)
                                 .to(torch::kBFloat16)
                                 .contiguous(kChannelsLast);
    const Gradients reference = Convolve(conv, x, dy, /*ours=*/false);
    const Gradients ours = Convolve(conv, x, dy, /*ours=*/true);
    ExpectSame(ours.y, reference.y, "output");
    ExpectSame(ours.dx, reference.dx, "input gradient");
    ExpectSame(ours.dweight, reference.dweight, "weight gradient");
    EXPECT_EQ(ours.dweight.scalar_type(), torch::kFloat32);
  }
}

TEST_F(HalfConvGpuTest, InAStepItMultipliesWithTheStepsCopyOfTheWeight) {
  torch::manual_seed(6);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::nn::Conv2d conv = ChannelsLastConv(16, 32, 3, 1);
  const std::vector<torch::Tensor> parameters = {conv->weight};
  StepContext context(/*own_kernels_allowed=*/true);
  const StepContextScope scope(&context);
  HalfWeights& table = context.half_weights();
  const torch::Tensor x =
      torch::randn({2, 16, 8, 8}, cuda).to(torch::kBFloat16).contiguous(kChannelsLast);

  // The first step casts for itself and asks for a copy from then on.
  compat::SetAutocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
  const torch::Tensor first = AutocastConv2d(*conv, x);
  compat::SetAutocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
  ASSERT_EQ(table.Refresh(parameters), 1) << "the convolution asked for no copy of its weight";
  const torch::Tensor copy = table.Find(conv->weight, torch::kBFloat16);
  ASSERT_TRUE(copy.defined());
  EXPECT_EQ(copy.strides(), conv->weight.strides()) << "the copy is not in the weight's layout";
  EXPECT_TRUE(torch::equal(copy, conv->weight.detach().to(torch::kBFloat16)));

  // A copy that differs from the weight shows which one the convolution read.
  copy.zero_();
  compat::SetAutocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
  const torch::Tensor second = AutocastConv2d(*conv, x);
  compat::SetAutocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
  EXPECT_EQ(second.abs().max().item<float>(), 0.f) << "the convolution cast the weight again";
  EXPECT_GT(first.abs().max().item<float>(), 0.f);
  table.Release(parameters);
}

TEST_F(HalfConvGpuTest, OutsideAutocastOrWithABiasItIsTheModulesForward) {
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::nn::Conv2d plain = ChannelsLastConv(8, 8, 3, 1);
  torch::nn::Conv2d with_bias(torch::nn::Conv2dOptions(8, 8, 3).padding(1));
  with_bias->to(torch::kCUDA);
  const torch::Tensor x = torch::randn({2, 8, 6, 6}, cuda);
  EXPECT_FALSE(AutocastConv2dUsesStepCopies(*plain, x)) << "outside autocast";
  EXPECT_TRUE(torch::equal(AutocastConv2d(*plain, x), plain->forward(x)));
  compat::SetAutocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
  EXPECT_TRUE(AutocastConv2dUsesStepCopies(*plain, x));
  EXPECT_FALSE(AutocastConv2dUsesStepCopies(*with_bias, x)) << "a bias is not covered";
  const torch::Tensor ours = AutocastConv2d(*with_bias, x);
  const torch::Tensor reference = with_bias->forward(x);
  compat::SetAutocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
  EXPECT_TRUE(torch::equal(ours, reference));
}

}  // namespace
}  // namespace stoke::worker
