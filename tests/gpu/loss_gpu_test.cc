// The softmax cross-entropy of bf16/fp16 logits on the GPU (Stoke's own kernels where the
// build has nvcc) against ATen's cross-entropy of the same logits in fp32: the loss, the
// gradient, a confident target's small gradient, and rows of every width the kernels
// treat differently (16-byte packs or not); the output layer and the loss in chunks, and
// in one node that writes the logits' gradient over them. Skips without CUDA.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "tests/support/own_kernels.h"
#include "tests/support/require_cuda.h"
#include "worker/ops/chunked_cross_entropy.h"
#include "worker/ops/linear_cross_entropy.h"
#include "worker/ops/softmax_cross_entropy.h"
#include "worker/runtime/devices.h"

namespace stoke::worker {
namespace {

class LossGpuTest : public ::testing::TestWithParam<std::tuple<at::ScalarType, int64_t>> {
 protected:
  void SetUp() override { STOKE_SKIP_WITHOUT_CUDA(); }
};

struct LossAndGrad {
  torch::Tensor loss;
  torch::Tensor grad;  // fp32
};

LossAndGrad Ours(const torch::Tensor& logits, const torch::Tensor& targets,
                 const torch::Tensor& incoming = {}) {
  torch::Tensor leaf = logits.detach().clone().requires_grad_(true);
  torch::Tensor loss = SoftmaxCrossEntropy(leaf, targets);
  if (incoming.defined()) {
    loss.backward(incoming);
  } else {
    loss.backward();
  }
  EXPECT_EQ(leaf.grad().scalar_type(), logits.scalar_type());
  return {loss.detach(), leaf.grad().to(torch::kFloat32)};
}

LossAndGrad Fp32Reference(const torch::Tensor& logits, const torch::Tensor& targets) {
  torch::Tensor leaf = logits.detach().to(torch::kFloat32).requires_grad_(true);
  torch::Tensor loss = torch::nn::functional::cross_entropy(leaf, targets);
  loss.backward();
  return {loss.detach(), leaf.grad()};
}

TEST_P(LossGpuTest, MatchesFp32CrossEntropyWithinOneRounding) {
  const auto [dtype, classes] = GetParam();
  torch::manual_seed(7);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const int64_t rows = 777;
  const torch::Tensor logits = (torch::randn({rows, classes}, cuda) * 4).to(dtype);
  const torch::Tensor targets = torch::randint(classes, {rows}, cuda.dtype(torch::kLong));

  const LossAndGrad ours = Ours(logits, targets);
  const LossAndGrad reference = Fp32Reference(logits, targets);
  EXPECT_EQ(ours.loss.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(ours.loss.item<double>(), reference.loss.item<double>(),
              1e-5 * reference.loss.item<double>());
  // One rounding to the logits' type: bf16 keeps 8 significant bits, fp16 11.
  const double rtol = dtype == torch::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
  const double atol = 1e-3 * reference.grad.abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(ours.grad, reference.grad, rtol, atol))
      << "largest difference " << (ours.grad - reference.grad).abs().max().item<double>();
}

INSTANTIATE_TEST_SUITE_P(
    Widths, LossGpuTest,
    ::testing::Combine(::testing::Values(torch::kBFloat16, torch::kHalf),
                       // GPT-2's vocabulary (packed), a class count of the MLPs, an odd one.
                       ::testing::Values(int64_t{50304}, int64_t{10}, int64_t{1001})),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == torch::kBFloat16 ? "Bf16" : "Fp16") +
             "Classes" + std::to_string(std::get<1>(info.param));
    });

TEST(LossGpu, AConfidentTargetKeepsItsSmallGradient) {
  STOKE_SKIP_WITHOUT_CUDA();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  // 1,000 logits of 0 and a target logit of 15: p = 0.99969, so d loss / d target = p - 1
  // = -3.06e-4. Computed from a rounded p it would be 0 or -3.9e-3.
  torch::Tensor logits = torch::zeros({4, 1001}, cuda);
  const torch::Tensor targets = torch::tensor({3, 500, 1000, 0}, cuda.dtype(torch::kLong));
  for (int64_t row = 0; row < 4; ++row) logits[row][targets[row].item<int64_t>()] = 15.0;
  const LossAndGrad ours = Ours(logits.to(torch::kBFloat16), targets);
  const LossAndGrad reference = Fp32Reference(logits, targets);
  for (int64_t row = 0; row < 4; ++row) {
    const int64_t target = targets[row].item<int64_t>();
    const double want = reference.grad[row][target].item<double>();
    EXPECT_NEAR(ours.grad[row][target].item<double>(), want, 0.01 * std::abs(want));
  }
  EXPECT_NEAR(ours.loss.item<double>(), reference.loss.item<double>(),
              0.01 * reference.loss.item<double>());
}

TEST(LossGpu, TheIncomingGradientScalesTheResultOnTheDevice) {
  STOKE_SKIP_WITHOUT_CUDA();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(3);
  const torch::Tensor logits = torch::randn({64, 512}, cuda).to(torch::kHalf);
  const torch::Tensor targets = torch::randint(512, {64}, cuda.dtype(torch::kLong));
  // An fp16 loss scale of 1024 arrives as the incoming gradient of the loss.
  const LossAndGrad scaled = Ours(logits, targets, torch::full({}, 1024.0, cuda));
  const LossAndGrad plain = Ours(logits, targets);
  EXPECT_TRUE(torch::allclose(scaled.grad / 1024, plain.grad, 1e-3, 1e-7));
}

TEST(LossGpu, TheChunkedOutputLayerGivesTheLossAndGradientsOfTheWholeOne) {
  STOKE_SKIP_WITHOUT_CUDA();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(11);
  const torch::Tensor hidden = torch::randn({1000, 64}, cuda);
  const torch::Tensor weight = torch::randn({4096, 64}, cuda) * 0.2;
  const torch::Tensor targets = torch::randint(4096, {1000}, cuda.dtype(torch::kLong));
  auto run = [&](bool chunked) {
    torch::Tensor h = hidden.clone().requires_grad_(true);
    torch::Tensor w = weight.clone().requires_grad_(true);
    torch::Tensor loss;
    if (chunked) {  // 3 full chunks of 300 rows and one of 100
      loss = ChunkedLinearCrossEntropy(h, w, targets, torch::kBFloat16, 300);
    } else {
      loss = SoftmaxCrossEntropy(torch::matmul(h.to(torch::kBFloat16), w.to(torch::kBFloat16).t()),
                                 targets);
    }
    loss.backward();
    return std::make_tuple(loss.item<double>(), h.grad(), w.grad());
  };
  const auto [chunked_loss, chunked_h, chunked_w] = run(true);
  const auto [whole_loss, whole_h, whole_w] = run(false);
  EXPECT_NEAR(chunked_loss, whole_loss, 1e-5 * whole_loss);
  EXPECT_TRUE(torch::allclose(chunked_h, whole_h, 1e-2, 1e-2 * whole_h.abs().max().item<double>()));
  EXPECT_TRUE(torch::allclose(chunked_w, whole_w, 1e-2, 1e-2 * whole_w.abs().max().item<double>()));
}

// The output layer and loss in one node (linear_cross_entropy.h) against the same two as
// separate nodes (the bf16 product, then Stoke's loss): the same loss and gradients, and
// in backward no second [tokens, vocabulary] tensor beside the logits. The gradient of
// the fp32 weight comes in fp32; a second backward through a retained graph is refused.
TEST(LossGpu, TheOutputLayerAndLossAsOneNodeOverwriteTheLogitsWithTheirGradient) {
  if (const std::string why = testing::WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  constexpr int64_t kRows = 4096;
  constexpr int64_t kVocab = 8192;  // bf16 logits: 64 MiB
  torch::manual_seed(13);
  const torch::Tensor hidden = torch::randn({kRows, 128}, cuda).to(torch::kBFloat16);
  const torch::Tensor weight = torch::randn({kVocab, 128}, cuda) * 0.2;
  const torch::Tensor targets = torch::randint(kVocab, {kRows}, cuda.dtype(torch::kLong));
  const DeviceRef gpu{DeviceKind::kCuda, 0};
  auto run = [&](bool one_node) {
    torch::Tensor h = hidden.clone().requires_grad_(true);
    torch::Tensor w = weight.clone().requires_grad_(true);
    torch::Tensor loss =
        one_node ? LinearCrossEntropy(h, w, targets, torch::kBFloat16)
                 : SoftmaxCrossEntropy(torch::matmul(h, w.to(torch::kBFloat16).t()), targets);
    torch::cuda::synchronize();
    const uint64_t before = ReadAllocatorStats(gpu).allocated_bytes;
    ResetPeakMemoryStats(gpu);
    loss.backward();
    torch::cuda::synchronize();
    const uint64_t added = ReadAllocatorStats(gpu).peak_allocated_bytes - before;
    return std::make_tuple(loss.item<double>(), h.grad(), w.grad(), added);
  };
  run(true);  // cuBLAS's workspace, allocated by the first products, counts for neither
  run(false);
  const auto [loss, dh, dw, added] = run(true);
  const auto [ref_loss, ref_dh, ref_dw, ref_added] = run(false);
  EXPECT_NEAR(loss, ref_loss, 1e-5 * ref_loss);
  EXPECT_EQ(dh.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(dw.scalar_type(), torch::kFloat32);
  const torch::Tensor dh32 = dh.to(torch::kFloat32);
  const torch::Tensor ref_dh32 = ref_dh.to(torch::kFloat32);
  EXPECT_TRUE(torch::allclose(dh32, ref_dh32, 2e-2, 2e-2 * ref_dh32.abs().max().item<double>()))
      << "dh: largest difference " << (dh32 - ref_dh32).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(dw, ref_dw, 2e-2, 2e-2 * ref_dw.abs().max().item<double>()))
      << "dw: largest difference " << (dw - ref_dw).abs().max().item<double>();
  const uint64_t logits_bytes = kRows * kVocab * 2;
  EXPECT_GE(ref_added, logits_bytes) << "two nodes made no second logits-sized tensor";
  EXPECT_LT(added, logits_bytes / 2) << "backward allocated " << added << " bytes";

  torch::Tensor h = hidden.clone().requires_grad_(true);
  torch::Tensor retained = LinearCrossEntropy(h, weight, targets, torch::kBFloat16);
  retained.backward({}, /*retain_graph=*/true);
  EXPECT_THROW(retained.backward(), c10::Error);
}

}  // namespace
}  // namespace stoke::worker
