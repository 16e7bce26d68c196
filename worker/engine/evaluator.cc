#include "worker/engine/evaluator.h"

#include <torch/torch.h>

#include <cmath>

#include "worker/engine/step_math.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {

std::optional<EvalResult> Evaluate(Network& net, EvalSet& eval, DataShape::Kind data_kind,
                                   bool bf16, const std::atomic<bool>& cancel) {
  torch::NoGradGuard no_grad;
  net.eval();
  torch::Tensor loss_sum, correct;
  int64_t samples = 0, loss_terms = 0;
  for (int64_t i = 0; i < eval.batches(); ++i) {
    if (cancel.load(std::memory_order_relaxed)) {
      net.train();
      return std::nullopt;
    }
    Batch batch = eval.Get(i);
    if (net.loss() == LossKind::kModel) {
      // The model computes its own loss (a sample mean): weighted by samples.
      torch::Tensor loss;
      {
        compat::AutocastScope autocast(batch.inputs.device().type(), torch::kBFloat16, bf16);
        loss = TrainingLoss(net, batch.inputs, batch.targets).to(torch::kFloat64);
      }
      const int64_t terms = batch.inputs.size(0);
      loss = loss * static_cast<double>(terms);
      loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
      loss_terms += terms;
      samples += terms;
      continue;
    }
    torch::Tensor outputs;
    {
      compat::AutocastScope autocast(batch.inputs.device().type(), torch::kBFloat16, bf16);
      outputs = net.forward(batch.inputs);
    }
    // Weighted by what each batch holds (target elements for cross-entropy, samples for
    // MSE), so that a short last batch counts for no more than its share.
    const int64_t terms =
        net.loss() == LossKind::kMse ? batch.inputs.size(0) : batch.targets.numel();
    torch::Tensor loss =
        ComputeLoss(outputs, batch.targets, net.loss()) * static_cast<double>(terms);
    loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
    loss_terms += terms;
    samples += batch.inputs.size(0);
    if (net.loss() == LossKind::kCrossEntropy && data_kind != DataShape::Kind::kTokens) {
      torch::Tensor hits = (outputs.argmax(-1) == batch.targets).sum();
      correct = correct.defined() ? correct + hits : hits;
    }
  }
  net.train();
  EvalResult result;
  result.samples = static_cast<uint64_t>(samples);
  if (loss_terms == 0) return result;
  result.loss = loss_sum.item<double>() / static_cast<double>(loss_terms);
  if (correct.defined()) result.accuracy = correct.item<double>() / static_cast<double>(samples);
  if (data_kind == DataShape::Kind::kTokens) result.perplexity = std::exp(result.loss);
  return result;
}

}  // namespace stoke::worker
