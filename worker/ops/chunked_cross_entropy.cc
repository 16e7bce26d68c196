#include "worker/ops/chunked_cross_entropy.h"

#include <torch/torch.h>

#include <algorithm>

#include "worker/ops/fused_cross_entropy.h"

namespace stoke::worker {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t RowsPerChunk(int64_t requested, int64_t vocab) {
  if (requested > 0) return requested;
  constexpr int64_t kChunkLogitBytes = int64_t{256} << 20;
  return std::max<int64_t>(1, kChunkLogitBytes / (4 * std::max<int64_t>(1, vocab)));
}

// fp32 logits of rows [begin, end).
torch::Tensor ChunkLogits(const torch::Tensor& hidden, const torch::Tensor& weight_t, int64_t begin,
                          int64_t end) {
  return torch::matmul(hidden.slice(0, begin, end), weight_t).to(torch::kFloat32);
}

class ChunkedCrossEntropyFunction : public torch::autograd::Function<ChunkedCrossEntropyFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
      const torch::Tensor& targets, at::ScalarType compute_dtype, int64_t chunk_rows) {
    // compute_dtype is autocast's when it is on, so forward (under autocast) and backward
    // (not) multiply in the same precision.
    const int64_t rows = hidden.size(0);
    const int64_t chunk = RowsPerChunk(chunk_rows, weight.size(0));
    const torch::Tensor h = hidden.to(compute_dtype);
    const torch::Tensor w_t = weight.to(compute_dtype).t();
    torch::Tensor lse = torch::empty({rows}, hidden.options().dtype(torch::kFloat32));
    const bool fused = FusedCrossEntropyApplies(h);
    // Fused: per-row losses, summed once at the end; otherwise a running sum per chunk.
    torch::Tensor row_loss = fused ? torch::empty_like(lse) : torch::Tensor();
    torch::Tensor total =
        fused ? torch::Tensor() : torch::zeros({}, hidden.options().dtype(torch::kFloat32));
    for (int64_t begin = 0; begin < rows; begin += chunk) {
      const int64_t end = std::min(rows, begin + chunk);
      if (fused) {  // the chunk's logits stay in compute_dtype: no fp32 copy
        torch::Tensor chunk_loss = row_loss.slice(0, begin, end);
        torch::Tensor chunk_lse = lse.slice(0, begin, end);
        FusedCrossEntropyRows(torch::matmul(h.slice(0, begin, end), w_t),
                              targets.slice(0, begin, end), chunk_loss, chunk_lse);
        continue;
      }
      const torch::Tensor logits = ChunkLogits(h, w_t, begin, end);
      const torch::Tensor chunk_lse = torch::logsumexp(logits, 1);
      const torch::Tensor picked =
          logits.gather(1, targets.slice(0, begin, end).unsqueeze(1)).squeeze(1);
      total.add_((chunk_lse - picked).sum());
      lse.slice(0, begin, end).copy_(chunk_lse);
    }
    if (fused) total = row_loss.sum();
    ctx->save_for_backward({hidden, weight, targets, lse});
    ctx->saved_data["compute_dtype"] = static_cast<int64_t>(compute_dtype);
    ctx->saved_data["chunk"] = chunk;
    return total / static_cast<double>(rows);
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& targets = saved[2];
    const torch::Tensor& lse = saved[3];
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["compute_dtype"].toInt());
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const int64_t rows = hidden.size(0);
    const torch::Tensor h = hidden.to(dtype);
    const torch::Tensor w = weight.to(dtype);
    const torch::Tensor w_t = w.t();
    // d(mean loss)/d(logits) = (softmax - one_hot) * grad / rows; a device scalar, so no
    // host read.
    const torch::Tensor scale = grad_outputs[0].to(torch::kFloat32) / static_cast<double>(rows);
    torch::Tensor grad_hidden = torch::empty_like(hidden);
    torch::Tensor grad_weight =
        torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32));
    const bool fused = FusedCrossEntropyApplies(h);
    for (int64_t begin = 0; begin < rows; begin += chunk) {
      const int64_t end = std::min(rows, begin + chunk);
      if (fused) {
        const torch::Tensor g = FusedCrossEntropyGrad(
            torch::matmul(h.slice(0, begin, end), w_t), targets.slice(0, begin, end),
            lse.slice(0, begin, end), grad_outputs[0], 1.0 / static_cast<double>(rows));
        grad_hidden.slice(0, begin, end).copy_(torch::matmul(g, w));
        grad_weight.add_(torch::matmul(g.t(), h.slice(0, begin, end)).to(torch::kFloat32));
        continue;
      }
      torch::Tensor probs =
          (ChunkLogits(h, w_t, begin, end) - lse.slice(0, begin, end).unsqueeze(1)).exp_();
      probs.scatter_add_(1, targets.slice(0, begin, end).unsqueeze(1),
                         torch::full({end - begin, 1}, -1.0, probs.options()));
      probs.mul_(scale);
      const torch::Tensor g = probs.to(dtype);
      grad_hidden.slice(0, begin, end).copy_(torch::matmul(g, w));
      grad_weight.add_(torch::matmul(g.t(), h.slice(0, begin, end)).to(torch::kFloat32));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ChunkedLinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& targets, at::ScalarType compute_dtype,
                                        int64_t chunk_rows) {
  return ChunkedCrossEntropyFunction::apply(hidden, weight, targets, compute_dtype, chunk_rows);
}

}  // namespace stoke::worker
