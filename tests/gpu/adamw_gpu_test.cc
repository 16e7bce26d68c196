// Stoke's AdamW kernel (own_adamw.h) against ATen's fused AdamW, which torch.optim's
// fused=True runs: the same parameters and moments after several steps of changing
// learning rate, for tensors that take the 16-byte path and for those that cannot (odd
// sizes, a view one element into a buffer, channels-last weights); nothing changes on a
// step whose gradients overflowed; tensors laid out unlike their parameter are refused.
// Skips without CUDA or the kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "tests/support/own_kernels.h"
#include "worker/ops/own_adamw.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

const auto kCuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);

class AdamWGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
  }
};

// Parameters of many shapes, with gradients and moments laid out as they are.
OwnAdamWTensors MakeState(uint64_t seed) {
  torch::manual_seed(seed);
  OwnAdamWTensors t;
  const torch::Tensor buffer = torch::randn({4099}, kCuda);
  std::vector<torch::Tensor> params = {
      torch::randn({1024, 256}, kCuda),  // the 16-byte path, many blocks
      torch::randn({262147}, kCuda),     // a scalar tail
      torch::randn({10}, kCuda),         // smaller than a vector round
      buffer.narrow(0, 1, 4097),         // misaligned: the scalar path throughout
      torch::randn({64, 32, 3, 3}, kCuda).contiguous(torch::MemoryFormat::ChannelsLast),
      // One input channel: channels-last and contiguous differ only in the stride of a
      // dimension of size 1 (a weight made channels-last keeps (9, 9, 3, 1); cuDNN gives
      // its gradient (9, 1, 3, 1)).
      torch::randn({32, 1, 3, 3}, kCuda),
  };
  for (const torch::Tensor& p : params) {
    t.params.push_back(p);
    const bool one_channel = p.dim() == 4 && p.size(1) == 1;
    t.grads.push_back(one_channel
                          ? torch::empty_strided({32, 1, 3, 3}, {9, 1, 3, 1}, kCuda).normal_()
                          : torch::randn_like(p));
    t.exp_avgs.push_back(torch::randn_like(p).abs_() * 0.1);
    t.exp_avg_sqs.push_back(torch::randn_like(p).square_() * 0.01);
  }
  return t;
}

OwnAdamWTensors Clone(const OwnAdamWTensors& t) {
  auto copy = [](const std::vector<torch::Tensor>& v) {
    std::vector<torch::Tensor> out;
    out.reserve(v.size());
    for (const auto& x : v) out.push_back(x.clone(torch::MemoryFormat::Preserve));
    return out;
  };
  return {copy(t.params), copy(t.grads), copy(t.exp_avgs), copy(t.exp_avg_sqs), {}};
}

[[maybe_unused]] void ExpectClose(const std::vector<torch::Tensor>& ours,
                                  const std::vector<torch::Tensor>& atens, const char* what) {
  for (size_t i = 0; i < ours.size(); ++i) {
    const double scale = atens[i].abs().max().item<double>();
    const double diff = (ours[i] - atens[i]).abs().max().item<double>();
    EXPECT_LE(diff, 2e-6 * scale + 1e-9) << what << " " << i << ": largest difference " << diff;
  }
}

TEST_F(AdamWGpuTest, FollowsAtensFusedAdamWStepForStep) {
#if STOKE_TORCH_AT_LEAST(2, 2) && STOKE_WITH_CUDA
  OwnAdamWTensors ours = MakeState(5);
  OwnAdamWTensors atens = Clone(ours);
  const torch::Tensor step = torch::zeros({}, kCuda);
  const torch::Tensor lr = torch::zeros({}, kCuda);
  const double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  for (int s = 1; s <= 6; ++s) {
    step.fill_(s);
    lr.fill_(1e-3 * s);
    for (auto* state : {&ours, &atens}) {  // new gradients each step, the same for both
      torch::manual_seed(100 + s);
      for (auto& g : state->grads) g.normal_();
    }
    ASSERT_TRUE(TryOwnAdamWStep(ours, lr, step, std::nullopt, beta1, beta2, eps, weight_decay));
    const std::vector<torch::Tensor> steps(atens.params.size(), step);
    at::_fused_adamw_(atens.params, atens.grads, atens.exp_avgs, atens.exp_avg_sqs, {}, steps, lr,
                      beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false,
                      std::nullopt, std::nullopt);
  }
  ExpectClose(ours.params, atens.params, "parameter");
  ExpectClose(ours.exp_avgs, atens.exp_avgs, "first moment");
  ExpectClose(ours.exp_avg_sqs, atens.exp_avg_sqs, "second moment");
  // Channels-last stays channels-last.
  EXPECT_TRUE(ours.params[4].is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_NE(ours.grads[5].strides(), ours.params[5].strides()) << "the case is not exercised";
#else
  GTEST_SKIP() << "ATen's fused AdamW with a device learning rate needs torch 2.2 and CUDA";
#endif
}

TEST_F(AdamWGpuTest, AnOverflowedStepChangesNothing) {
  OwnAdamWTensors state = MakeState(7);
  const OwnAdamWTensors before = Clone(state);
  const torch::Tensor found_inf = torch::ones({}, kCuda);
  ASSERT_TRUE(TryOwnAdamWStep(state, torch::full({}, 1e-2, kCuda), torch::ones({}, kCuda),
                              found_inf, 0.9, 0.999, 1e-8, 0.1));
  for (size_t i = 0; i < state.params.size(); ++i) {
    EXPECT_TRUE(torch::equal(state.params[i], before.params[i])) << i;
    EXPECT_TRUE(torch::equal(state.exp_avgs[i], before.exp_avgs[i])) << i;
    EXPECT_TRUE(torch::equal(state.exp_avg_sqs[i], before.exp_avg_sqs[i])) << i;
  }
}

TEST_F(AdamWGpuTest, TensorsLaidOutUnlikeTheirParameterAreRefused) {
  const torch::Tensor p =
      torch::randn({8, 4, 3, 3}, kCuda).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor contiguous = torch::zeros({8, 4, 3, 3}, kCuda);
  EXPECT_FALSE(
      OwnAdamWApplies({{p}, {contiguous}, {torch::zeros_like(p)}, {torch::zeros_like(p)}, {}}));
  EXPECT_FALSE(OwnAdamWApplies({{p.to(torch::kBFloat16)},
                                {contiguous.to(torch::kBFloat16)},
                                {contiguous},
                                {contiguous},
                                {}}));
  EXPECT_TRUE(OwnAdamWApplies(
      {{p}, {torch::zeros_like(p)}, {torch::zeros_like(p)}, {torch::zeros_like(p)}, {}}));
  // Strides of dimensions of size 1 do not matter; a gradient transposed does.
  const torch::Tensor one =
      torch::randn({16, 1, 3, 3}, kCuda).contiguous(torch::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(OwnAdamWApplies({{one},
                               {torch::zeros({16, 1, 3, 3}, kCuda)},
                               {torch::zeros_like(one)},
                               {torch::zeros_like(one)},
                               {}}));
  const torch::Tensor square = torch::randn({6, 6}, kCuda);
  EXPECT_FALSE(OwnAdamWApplies({{square},
                                {torch::zeros({6, 6}, kCuda).t()},
                                {torch::zeros_like(square)},
                                {torch::zeros_like(square)},
                                {}}));
  // A 16-bit copy is written in the parameter's memory order: a channels-last weight has
  // none, nor does a copy of another size or type.
  const torch::Tensor q = torch::randn({8, 36}, kCuda);
  auto with_copy = [](const torch::Tensor& param, const torch::Tensor& copy) {
    return OwnAdamWTensors{{param},
                           {torch::zeros_like(param)},
                           {torch::zeros_like(param)},
                           {torch::zeros_like(param)},
                           {copy}};
  };
  EXPECT_TRUE(OwnAdamWApplies(with_copy(q, torch::empty({8, 36}, kCuda.dtype(torch::kBFloat16)))));
  EXPECT_TRUE(OwnAdamWApplies(with_copy(q, torch::Tensor())));
  EXPECT_FALSE(OwnAdamWApplies(with_copy(p, torch::empty({288}, kCuda.dtype(torch::kBFloat16)))));
  EXPECT_FALSE(OwnAdamWApplies(with_copy(q, torch::empty({287}, kCuda.dtype(torch::kBFloat16)))));
  EXPECT_FALSE(OwnAdamWApplies(with_copy(q, torch::empty({8, 36}, kCuda))));
}

// The 16-bit copy a segment names is the updated parameter cast to nearest even, in
// bf16 or fp16, on the 16-byte path and off it (a copy one element into its buffer, a
// misaligned parameter, a scalar tail); a step whose gradients overflowed writes none.
TEST_F(AdamWGpuTest, WritesEachParametersSixteenBitCopyAsItUpdates) {
  OwnAdamWTensors state = MakeState(9);
  for (int k = 0; k < 2; ++k) {  // the channels-last weights: a copy would be another order
    state.params.pop_back();
    state.grads.pop_back();
    state.exp_avgs.pop_back();
    state.exp_avg_sqs.pop_back();
  }
  const torch::Tensor spare = torch::zeros({4100}, kCuda.dtype(torch::kBFloat16));
  state.half_copies = {
      torch::zeros({1024, 256}, kCuda.dtype(torch::kBFloat16)),
      torch::zeros({262147}, kCuda.dtype(torch::kHalf)),
      torch::Tensor(),  // none for this one
      spare.narrow(0, 1, 4097),
  };
  const torch::Tensor untouched = state.params[2].clone();
  for (int s = 1; s <= 3; ++s) {
    ASSERT_TRUE(TryOwnAdamWStep(state, torch::full({}, 1e-2, kCuda), torch::full({}, s, kCuda),
                                std::nullopt, 0.9, 0.999, 1e-8, 0.1));
  }
  EXPECT_FALSE(torch::equal(state.params[2], untouched)) << "the parameter was not updated";
  for (size_t i : {0, 1, 3}) {
    const torch::Tensor& copy = state.half_copies[i];
    EXPECT_TRUE(torch::equal(copy, state.params[i].to(copy.scalar_type()))) << "copy " << i;
  }
  EXPECT_EQ(spare[0].item<float>(), 0) << "written outside the copy";

  const torch::Tensor before = state.half_copies[0].clone();
  state.grads[0].fill_(1);
  ASSERT_TRUE(TryOwnAdamWStep(state, torch::full({}, 1e-2, kCuda), torch::full({}, 4, kCuda),
                              torch::ones({}, kCuda), 0.9, 0.999, 1e-8, 0.1));
  EXPECT_TRUE(torch::equal(state.half_copies[0], before)) << "an overflowed step wrote a copy";
}

}  // namespace
}  // namespace stoke::worker
