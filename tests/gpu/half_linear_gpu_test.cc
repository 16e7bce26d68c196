// AutocastLinear (Stoke's bias-gradient kernel where the build has nvcc) against ATen's
// linear under the same autocast: the same output and input/weight gradients, and a bias
// gradient equal to the fp64 sum of the output gradient within fp32 rounding, for a
// GPT-shaped layers (bf16 input, 16-byte rows) and a classifier (fp32 input, 10 outputs:
// the kernel's path for widths that are no multiple of 8); the same with a GELU or a ReLU
// after the product (AutocastLinearGelu, AutocastLinearRelu). Skips without CUDA or kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/support/own_kernels.h"
#include "tests/support/require_cuda.h"
#include "worker/ops/half_linear.h"
#include "worker/ops/half_weights.h"
#include "worker/ops/step_context.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

struct Shape {
  std::vector<int64_t> input;
  int64_t out;
  at::ScalarType input_type;
};

class HalfLinearGpuTest : public ::testing::TestWithParam<std::tuple<at::ScalarType, int>> {
 protected:
  void SetUp() override {
    if (const std::string why = testing::WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
  }
  void TearDown() override { compat::SetAutocast(c10::DeviceType::CUDA, false, torch::kBFloat16); }
};

double MaxAbs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// A layer's input, parameters and output gradient, drawn on the GPU.
struct LayerCase {
  torch::Tensor x, weight, bias, dy;
  // Fresh copies of input, weight and bias that record their gradients.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Leaves() const {
    return {x.clone().requires_grad_(true), weight.clone().requires_grad_(true),
            bias.clone().requires_grad_(true)};
  }
};

LayerCase MakeLayerCase(const Shape& shape, at::ScalarType grad_type, double weight_std,
                        uint64_t seed) {
  torch::manual_seed(seed);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  LayerCase c;
  c.x = torch::randn(shape.input, cuda).to(shape.input_type);
  c.weight = torch::randn({shape.out, shape.input.back()}, cuda) * weight_std;
  // An offset in every column, so a sum kept in 16 bits would show its rounding.
  c.bias = torch::randn({shape.out}, cuda);
  std::vector<int64_t> out_sizes = shape.input;
  out_sizes.back() = shape.out;
  c.dy = (torch::randn(out_sizes, cuda) + 0.5).to(grad_type);
  return c;
}

// A layer with an activation after it: GPT-2's MLP input layer at a small batch; the
// same at the full batch; a layer whose width is no multiple of 8 (the scalar kernel).
Shape ActivationLayerShape(at::ScalarType dtype, int which) {
  return which == 0   ? Shape{{4, 333, 768}, 3072, dtype}
         : which == 1 ? Shape{{16, 1024, 768}, 3072, dtype}
                      : Shape{{512, 96}, 100, torch::kFloat32};
}

TEST_P(HalfLinearGpuTest, MatchesAutocastLinearWithAnExactBiasGradient) {
  const auto [dtype, which] = GetParam();
  // A GPT-2 block's first layer at a small batch; its output layer at the full batch
  // (16,384 rows: 256 slices of partial sums, more than the last pass has lanes); a
  // classifier on fp32 data.
  const Shape shape = which == 0   ? Shape{{4, 333, 768}, 2304, dtype}
                      : which == 1 ? Shape{{16, 1024, 3072}, 768, dtype}
                                   : Shape{{512, 1024}, 10, torch::kFloat32};
  const LayerCase layer = MakeLayerCase(shape, dtype, 0.02, 9);
  const torch::Tensor& x = layer.x;
  const torch::Tensor& dy = layer.dy;

  compat::SetAutocast(c10::DeviceType::CUDA, true, dtype);
  auto run = [&](bool ours) {
    auto [xl, wl, bl] = layer.Leaves();
    if (ours) {
      EXPECT_TRUE(AutocastLinearUsesOwnKernels(xl, bl));
    }
    torch::Tensor y = ours ? AutocastLinear(xl, wl, bl) : torch::linear(xl, wl, bl);
    y.backward(dy);
    return std::make_tuple(y.detach(), xl.grad(), wl.grad(), bl.grad());
  };
  const auto [y1, dx1, dw1, db1] = run(true);
  const auto [y2, dx2, dw2, db2] = run(false);
  compat::SetAutocast(c10::DeviceType::CUDA, false, dtype);

  EXPECT_EQ(y1.scalar_type(), y2.scalar_type());
  EXPECT_EQ(y1.sizes(), y2.sizes());
  // The same matrix product with the same bias epilogue.
  EXPECT_TRUE(torch::allclose(y1.to(torch::kFloat32), y2.to(torch::kFloat32), 1e-2, 1e-2))
      << "output: largest difference " << MaxAbs(y1.to(torch::kFloat32) - y2.to(torch::kFloat32));
  EXPECT_EQ(dx1.scalar_type(), x.scalar_type());
  EXPECT_TRUE(torch::allclose(dx1.to(torch::kFloat32), dx2.to(torch::kFloat32), 1e-2, 1e-3))
      << "dx: largest difference " << MaxAbs(dx1.to(torch::kFloat32) - dx2.to(torch::kFloat32));
  EXPECT_EQ(dw1.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::allclose(dw1, dw2, 1e-2, 1e-2 * MaxAbs(dw2)))
      << "dweight: largest difference " << MaxAbs(dw1 - dw2);
  EXPECT_EQ(db1.scalar_type(), torch::kFloat32);
  const torch::Tensor exact = dy.to(torch::kFloat64).reshape({-1, shape.out}).sum(0);
  EXPECT_TRUE(torch::allclose(db1.to(torch::kFloat64), exact, 1e-5, 1e-6 * MaxAbs(exact)))
      << "dbias: largest difference from the fp64 sum " << MaxAbs(db1.to(torch::kFloat64) - exact);
  // ATen's is the same sum, rounded once to 16 bits.
  const double rounding = dtype == torch::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
  EXPECT_TRUE(torch::allclose(db1, db2, rounding, 0)) << "dbias against ATen's";
}

// Linear + exact GELU with the GELU's backward and the bias gradient in one kernel,
// against ATen's linear and gelu under the same autocast: the same output, the same
// gradients of input and weight (through the same rounded GELU gradient), and a bias
// gradient equal to the fp64 sum of ATen's rounded GELU input gradient.
TEST_P(HalfLinearGpuTest, WithGeluMatchesAtensLinearAndGelu) {
  const auto [dtype, which] = GetParam();
  const Shape shape = ActivationLayerShape(dtype, which);
  const LayerCase layer = MakeLayerCase(shape, dtype, 0.05, 11);
  const torch::Tensor& dy = layer.dy;

  compat::SetAutocast(c10::DeviceType::CUDA, true, dtype);
  auto run = [&](bool ours) {
    auto [xl, wl, bl] = layer.Leaves();
    torch::Tensor pre;
    torch::Tensor y;
    if (ours) {
      y = AutocastLinearGelu(xl, wl, bl);
    } else {
      pre = torch::linear(xl, wl, bl);
      pre.retain_grad();
      y = torch::gelu(pre);
    }
    y.backward(dy);
    return std::make_tuple(y.detach(), xl.grad(), wl.grad(), bl.grad(),
                           ours ? torch::Tensor() : pre.grad());
  };
  const auto [y1, dx1, dw1, db1, unused] = run(true);
  const auto [y2, dx2, dw2, db2, dpre] = run(false);
  compat::SetAutocast(c10::DeviceType::CUDA, false, dtype);

  EXPECT_EQ(y1.scalar_type(), y2.scalar_type());
  EXPECT_EQ(y1.sizes(), y2.sizes());
  EXPECT_TRUE(torch::allclose(y1.to(torch::kFloat32), y2.to(torch::kFloat32), 1e-2, 1e-2))
      << "output: largest difference " << MaxAbs(y1.to(torch::kFloat32) - y2.to(torch::kFloat32));
  EXPECT_TRUE(torch::allclose(dx1.to(torch::kFloat32), dx2.to(torch::kFloat32), 2e-2, 2e-3))
      << "dx: largest difference " << MaxAbs(dx1.to(torch::kFloat32) - dx2.to(torch::kFloat32));
  EXPECT_TRUE(torch::allclose(dw1, dw2, 2e-2, 1e-2 * MaxAbs(dw2)))
      << "dweight: largest difference " << MaxAbs(dw1 - dw2);
  ASSERT_EQ(db1.scalar_type(), torch::kFloat32);
  const torch::Tensor exact = dpre.to(torch::kFloat64).reshape({-1, shape.out}).sum(0);
  // Our GELU gradient may round a value to the neighbouring 16-bit number where ATen's
  // erf differs in its last fp32 bit: allow that much per row, summed.
  const double ulp = dtype == torch::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
  const double rows = static_cast<double>(dpre.numel()) / static_cast<double>(shape.out);
  EXPECT_TRUE(torch::allclose(db1.to(torch::kFloat64), exact, 1e-4,
                              1e-3 * ulp * rows * MaxAbs(dpre.to(torch::kFloat64))))
      << "dbias: largest difference from the fp64 sum of ATen's GELU gradient "
      << MaxAbs(db1.to(torch::kFloat64) - exact);
}

// A transformer's MLP (linear, exact GELU, linear) as one function against ATen's three
// operations under the same autocast: the same output and gradients, and less held from
// forward to backward by about the GELU's output, which backward computes again.
TEST_P(HalfLinearGpuTest, GeluMlpMatchesAtensLayersAndHoldsLessForBackward) {
  const auto [dtype, which] = GetParam();
  if (which == 2) GTEST_SKIP() << "GPT shapes only";
  const Shape shape = ActivationLayerShape(dtype, which);
  const LayerCase first = MakeLayerCase(shape, dtype, 0.05, 17);
  const int64_t width = shape.input.back();
  const LayerCase second = MakeLayerCase(Shape{{1, shape.out}, width, dtype}, dtype, 0.02, 19);
  const torch::Tensor dy =
      (torch::randn(shape.input, first.x.options().dtype(torch::kFloat32)) + 0.5).to(dtype);
  const DeviceRef gpu{DeviceKind::kCuda, 0};

  compat::SetAutocast(c10::DeviceType::CUDA, true, dtype);
  auto run = [&](bool ours) {
    auto [x, w1, b1] = first.Leaves();
    auto [unused, w2, b2] = second.Leaves();
    const uint64_t before = ReadAllocatorStats(gpu).allocated_bytes;
    torch::Tensor y = ours ? AutocastGeluMlp(x, w1, b1, w2, b2)
                           : torch::linear(torch::gelu(torch::linear(x, w1, b1)), w2, b2);
    const uint64_t held = ReadAllocatorStats(gpu).allocated_bytes - before;
    y.backward(dy);
    return std::make_tuple(y.detach(), x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad(), held);
  };
  // Once each first, so that what the first product of the process allocates (cuBLAS's
  // workspace, from the caching allocator) counts for neither.
  run(true);
  run(false);
  const auto [y1, dx1, dw11, db11, dw21, db21, held1] = run(true);
  const auto [y2, dx2, dw12, db12, dw22, db22, held2] = run(false);
  compat::SetAutocast(c10::DeviceType::CUDA, false, dtype);

  auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
  EXPECT_EQ(y1.scalar_type(), y2.scalar_type());
  EXPECT_TRUE(torch::allclose(f32(y1), f32(y2), 2e-2, 2e-2))
      << "output: largest difference " << MaxAbs(f32(y1) - f32(y2));
  EXPECT_TRUE(torch::allclose(f32(dx1), f32(dx2), 3e-2, 3e-3))
      << "dx: largest difference " << MaxAbs(f32(dx1) - f32(dx2));
  for (const auto& [ours, atens, name] :
       {std::make_tuple(dw11, dw12, "dw1"), std::make_tuple(dw21, dw22, "dw2"),
        std::make_tuple(db11, db12, "db1"), std::make_tuple(db21, db22, "db2")}) {
    EXPECT_EQ(ours.scalar_type(), torch::kFloat32) << name;
    // ATen's bias gradients are rounded to 16 bits once; ours stay fp32.
    EXPECT_TRUE(torch::allclose(ours, f32(atens), 3e-2, 2e-2 * MaxAbs(f32(atens))))
        << name << ": largest difference " << MaxAbs(ours - f32(atens));
  }
  const int64_t rows = first.x.numel() / width;
  const auto gelu_output_bytes = static_cast<uint64_t>(rows * shape.out * 2);
  // Within the caching allocator's rounding of block sizes (to 2 MB above 1 MB).
  EXPECT_LE(held1 + gelu_output_bytes * 3 / 4, held2)
      << "held from forward to backward: " << held1 << " bytes against ATen's " << held2;
}

// Linear + ReLU with bias and ReLU in the matrix product's epilogue (_addmm_activation)
// and the ReLU's backward taken with the bias gradient in one kernel, against ATen's
// linear and relu under the same autocast. The output matches; the gradients are checked
// against ATen's linear backward given the ReLU gradient our output implies (dy where the
// output is positive): two matrix-product algorithms may round a value near zero to
// opposite signs, and that is not what this test is about; how many do is bounded instead.
TEST_P(HalfLinearGpuTest, WithReluMatchesAtensLinearAndRelu) {
  const auto [dtype, which] = GetParam();
  const Shape shape = ActivationLayerShape(dtype, which);
  const LayerCase layer = MakeLayerCase(shape, dtype, 0.05, 13);

  compat::SetAutocast(c10::DeviceType::CUDA, true, dtype);
  auto [x1, w1, b1] = layer.Leaves();
  ASSERT_TRUE(AutocastLinearUsesOwnKernels(x1, b1));
  const torch::Tensor y1 = AutocastLinearRelu(x1, w1, b1);
  y1.backward(layer.dy);
  auto [x2, w2, b2] = layer.Leaves();
  const torch::Tensor pre = torch::linear(x2, w2, b2);
  const torch::Tensor y2 = torch::relu(pre);
  const torch::Tensor dpre = layer.dy * (y1.detach() > 0).to(layer.dy.scalar_type());
  pre.backward(dpre);
  compat::SetAutocast(c10::DeviceType::CUDA, false, dtype);

  EXPECT_EQ(y1.scalar_type(), y2.scalar_type());
  EXPECT_EQ(y1.sizes(), y2.sizes());
  EXPECT_TRUE(torch::allclose(y1.to(torch::kFloat32), y2.to(torch::kFloat32), 1e-2, 1e-2))
      << "output: largest difference " << MaxAbs(y1.to(torch::kFloat32) - y2.to(torch::kFloat32));
  // Half the outputs are positive; a sign that differs is a rounding of a value near zero.
  const double flipped = ((y1 > 0) != (y2 > 0)).sum().item<double>() / y1.numel();
  EXPECT_LT(flipped, 1e-3) << "share of outputs whose sign differs from ATen's";
  EXPECT_EQ(x1.grad().scalar_type(), layer.x.scalar_type());
  EXPECT_TRUE(
      torch::allclose(x1.grad().to(torch::kFloat32), x2.grad().to(torch::kFloat32), 1e-2, 1e-3))
      << "dx: largest difference "
      << MaxAbs(x1.grad().to(torch::kFloat32) - x2.grad().to(torch::kFloat32));
  EXPECT_TRUE(torch::allclose(w1.grad(), w2.grad(), 1e-2, 1e-2 * MaxAbs(w2.grad())))
      << "dweight: largest difference " << MaxAbs(w1.grad() - w2.grad());
  ASSERT_EQ(b1.grad().scalar_type(), torch::kFloat32);
  // The ReLU's gradient is dy or zero, exactly: the bias gradient is its sum to fp32.
  const torch::Tensor exact = dpre.to(torch::kFloat64).reshape({-1, shape.out}).sum(0);
  EXPECT_TRUE(torch::allclose(b1.grad().to(torch::kFloat64), exact, 1e-5, 1e-6 * MaxAbs(exact)))
      << "dbias: largest difference from the fp64 sum "
      << MaxAbs(b1.grad().to(torch::kFloat64) - exact);
}

// The step's 16-bit copies of the weights (half_weights.h): a layer uses the copy while
// it is its parameter's value, exactly as if it had cast the parameter itself, and never
// after the parameter changes in place or the step releases the copies.
TEST(HalfLinearGpu, StepCopiesOfTheWeightsServeOnlyWhileCurrent) {
  if (const std::string why = testing::WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({64, 96}, cuda).to(torch::kBFloat16);
  // Odd sizes: the copies' 16-byte starts leave gaps in the step's buffer.
  torch::Tensor weight = (torch::randn({130, 96}, cuda) * 0.1).requires_grad_(true);
  torch::Tensor bias = torch::randn({130}, cuda).requires_grad_(true);
  const std::vector<torch::Tensor> parameters{weight, bias};
  // The layers find the table through the step context a run installs.
  StepContext context(/*own_kernels_allowed=*/true);
  const StepContextScope scope(&context);
  HalfWeights& table = context.half_weights();
  auto expected = [&] {
    return torch::addmm(bias.detach().to(torch::kBFloat16), x,
                        weight.detach().to(torch::kBFloat16).t());
  };
  compat::SetAutocast(c10::DeviceType::CUDA, true, torch::kBFloat16);

  // The first call casts for itself and asks for copies from then on.
  EXPECT_TRUE(torch::equal(AutocastLinear(x, weight, bias).detach(), expected()));
  table.Refresh(parameters);
  const torch::Tensor copy = table.Find(weight, torch::kBFloat16);
  ASSERT_TRUE(copy.defined()) << "Refresh made no copy of a weight a layer had cast";
  EXPECT_TRUE(torch::equal(copy, weight.detach().to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(table.Find(bias, torch::kBFloat16), bias.detach().to(torch::kBFloat16)));
  EXPECT_FALSE(table.Find(weight, torch::kHalf).defined());
  torch::Tensor y = AutocastLinear(x, weight, bias);
  EXPECT_TRUE(torch::equal(y.detach(), expected()));
  // Gradients still reach the fp32 parameters.
  y.sum().backward();
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_EQ(weight.grad().scalar_type(), torch::kFloat32);

  // Changed in place (as an optimizer step does): the copy is retired.
  {
    const torch::NoGradGuard no_grad;
    weight.mul_(2);
  }
  EXPECT_FALSE(table.Find(weight, torch::kBFloat16).defined());
  EXPECT_TRUE(torch::equal(AutocastLinear(x, weight, bias).detach(), expected()));
  // Released at the step's end: none is handed out, though the bias did not change.
  table.Release(parameters);
  EXPECT_FALSE(table.Find(bias, torch::kBFloat16).defined());
  table.Forget(parameters);
  table.Refresh(parameters);
  EXPECT_FALSE(table.Find(bias, torch::kBFloat16).defined()) << "forgotten, yet copied";
  compat::SetAutocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
}

// Evaluation (no gradients, under autocast) through a stack of layers: the same outputs
// as ATen's linear, without holding a 16-bit cast of every weight until autocast ends, as
// ATen's autocast cache does (a second copy of the model's weights at an MLP's
// evaluation, the peak of a training run whose step is a CUDA graph).
TEST(HalfLinearGpu, WithoutGradientsItMatchesAtenAndKeepsNoCastOfEachWeight) {
  if (const std::string why = testing::WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  constexpr int kLayers = 6;
  constexpr int64_t kWidth = 2048;  // a bf16 cast of each weight is 8 MiB
  torch::manual_seed(5);
  std::vector<torch::Tensor> weights, biases;
  for (int i = 0; i < kLayers; ++i) {
    weights.push_back((torch::randn({kWidth, kWidth}, cuda) * 0.02).requires_grad_(true));
    biases.push_back(torch::randn({kWidth}, cuda).requires_grad_(true));
  }
  const torch::Tensor x = torch::randn({64, kWidth}, cuda);
  const DeviceRef gpu{DeviceKind::kCuda, 0};
  auto evaluate = [&](bool ours) {
    const torch::NoGradGuard no_grad;
    torch::Tensor y = x;
    uint64_t most = 0;
    {
      const compat::AutocastScope autocast(c10::DeviceType::CUDA, torch::kBFloat16, true);
      const uint64_t before = ReadAllocatorStats(gpu).allocated_bytes;
      for (int i = 0; i < kLayers; ++i) {
        y = ours ? AutocastLinear(y, weights[i], biases[i])
                 : torch::linear(y, weights[i], biases[i]);
        most = std::max(most, ReadAllocatorStats(gpu).allocated_bytes - before);
      }
    }
    return std::make_pair(y.to(torch::kFloat32), most);
  };
  evaluate(true);  // cuBLAS's workspace, allocated by the first product, counts for neither
  const auto [ours, held_ours] = evaluate(true);
  const auto [atens, held_atens] = evaluate(false);
  EXPECT_TRUE(torch::allclose(ours, atens, 2e-2, 2e-2))
      << "largest difference " << MaxAbs(ours - atens);
  const uint64_t cast_bytes = kWidth * kWidth * 2;
  EXPECT_GE(held_atens, cast_bytes * kLayers) << "ATen's autocast kept fewer casts than thought";
  EXPECT_LE(held_ours, cast_bytes * 2) << "held between layers: " << held_ours << " bytes";
}

TEST(HalfLinearGpu, OutsideAutocastOrWithoutABiasItIsAtensLinear) {
  STOKE_SKIP_WITHOUT_CUDA();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor x = torch::randn({8, 16}, cuda);
  const torch::Tensor w = torch::randn({4, 16}, cuda);
  const torch::Tensor b = torch::randn({4}, cuda);
  EXPECT_FALSE(AutocastLinearUsesOwnKernels(x, b));
  EXPECT_TRUE(torch::equal(AutocastLinear(x, w, b), torch::linear(x, w, b)));
  compat::SetAutocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
  EXPECT_FALSE(AutocastLinearUsesOwnKernels(x, torch::Tensor()));
  compat::SetAutocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
}

INSTANTIATE_TEST_SUITE_P(Layers, HalfLinearGpuTest,
                         ::testing::Combine(::testing::Values(torch::kBFloat16, torch::kHalf),
                                            ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           const int which = std::get<1>(info.param);
                           return std::string(std::get<0>(info.param) == torch::kBFloat16
                                                  ? "Bf16"
                                                  : "Fp16") +
                                  (which == 0   ? "GptLayerSmallBatch"
                                   : which == 1 ? "GptLayerFullBatch"
                                                : "NarrowLayerFp32Input");
                         });

}  // namespace
}  // namespace stoke::worker
