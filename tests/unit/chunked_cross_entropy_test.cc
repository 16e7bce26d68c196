// The chunked output layer and cross-entropy (worker/ops/chunked_cross_entropy.h) give
// the loss and gradients of the plain logits-then-cross-entropy, whatever the chunking;
// GPT with activation checkpointing trains through it with the same step as without.
#include "worker/ops/chunked_cross_entropy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/engine/step_math.h"
#include "worker/models/gpt.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

struct Result {
  torch::Tensor loss, grad_hidden, grad_weight;
};

Result Plain(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& t) {
  const torch::Tensor hidden = h.detach().requires_grad_();
  const torch::Tensor weight = w.detach().requires_grad_();
  const torch::Tensor loss =
      torch::nn::functional::cross_entropy(torch::matmul(hidden, weight.t()), t);
  loss.backward();
  return {loss.detach(), hidden.grad(), weight.grad()};
}

Result Chunked(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& t,
               int64_t chunk) {
  const torch::Tensor hidden = h.detach().requires_grad_();
  const torch::Tensor weight = w.detach().requires_grad_();
  const torch::Tensor loss = ChunkedLinearCrossEntropy(hidden, weight, t, torch::kFloat32, chunk);
  loss.backward();
  return {loss.detach(), hidden.grad(), weight.grad()};
}

TEST(ChunkedCrossEntropy, MatchesLogitsThenCrossEntropyForAnyChunking) {
  torch::manual_seed(2);
  const torch::Tensor h = torch::randn({37, 16});
  const torch::Tensor w = torch::randn({50, 16}) * 0.5;
  const torch::Tensor t = torch::randint(50, {37});
  const Result plain = Plain(h, w, t);
  for (int64_t chunk : {1, 5, 37, 64, 0}) {
    const Result c = Chunked(h, w, t, chunk);
    EXPECT_TRUE(torch::allclose(c.loss, plain.loss, 1e-5, 1e-6)) << "chunk " << chunk;
    EXPECT_TRUE(torch::allclose(c.grad_hidden, plain.grad_hidden, 1e-4, 1e-6)) << "chunk " << chunk;
    EXPECT_TRUE(torch::allclose(c.grad_weight, plain.grad_weight, 1e-4, 1e-6)) << "chunk " << chunk;
  }
}

TEST(ChunkedCrossEntropy, ScalesByTheIncomingGradient) {
  torch::manual_seed(3);
  const torch::Tensor h = torch::randn({8, 4}).requires_grad_();
  const torch::Tensor w = torch::randn({6, 4});
  const torch::Tensor t = torch::randint(6, {8});
  const torch::Tensor loss = ChunkedLinearCrossEntropy(h, w, t, torch::kFloat32, 3);
  (loss * 3.0).backward();
  const Result plain = Plain(h, w, t);
  EXPECT_TRUE(torch::allclose(h.grad(), plain.grad_hidden * 3.0, 1e-4, 1e-6));
}

GptConfig TinyGpt() {
  GptConfig c;
  c.layers = 2;
  c.heads = 2;
  c.width = 16;
  c.context = 12;
  c.vocab_size = 40;
  return c;
}

// One training loss and its gradients, through TrainingLoss as the step takes it.
std::pair<torch::Tensor, std::vector<torch::Tensor>> Step(bool checkpoint, bool bf16) {
  torch::manual_seed(7);
  Gpt net(TinyGpt());
  net->SetActivationCheckpointing(checkpoint);
  net->train();
  const torch::Tensor tokens = torch::randint(40, {3, 12});
  const torch::Tensor targets = torch::randint(40, {3, 12});
  torch::Tensor loss;
  {
    compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16, bf16);
    // Checkpointed GPTs take the chunked route; plain ones logits-then-loss.
    EXPECT_EQ(net->ForwardLoss(tokens, targets).has_value(), checkpoint);
    loss = TrainingLoss(*net, tokens, targets);
  }
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : net->parameters()) grads.push_back(p.grad().clone());
  return {loss.detach(), grads};
}

TEST(ChunkedCrossEntropy, GptWithCheckpointingTakesTheSameStep) {
  for (bool bf16 : {false, true}) {
    const auto [plain_loss, plain_grads] = Step(false, bf16);
    const auto [loss, grads] = Step(true, bf16);
    const double tol = bf16 ? 2e-2 : 1e-5;
    EXPECT_NEAR(loss.item<double>(), plain_loss.item<double>(), tol) << "bf16 " << bf16;
    ASSERT_EQ(grads.size(), plain_grads.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const double scale = plain_grads[i].abs().max().item<double>() + 1e-12;
      EXPECT_LE((grads[i] - plain_grads[i]).abs().max().item<double>() / scale, bf16 ? 5e-2 : 1e-4)
          << "parameter " << i << ", bf16 " << bf16;
    }
  }
}

}  // namespace
}  // namespace stoke::worker
