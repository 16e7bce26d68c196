// A decoder-only transformer language model in the GPT-2 style: token and learned position
// embeddings, pre-norm blocks of causal self-attention and a GELU MLP, a final layer norm,
// and logits from the token embedding itself (tied input and output weights).
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <string>
#include <utility>

#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker {

// x + attention(norm(x)), then x + mlp(norm(x)).
class GptBlockImpl : public torch::nn::Module {
 public:
  explicit GptBlockImpl(const GptConfig& config);
  // [B, T, width] -> [B, T, width].
  torch::Tensor forward(const torch::Tensor& inputs);
  // The block with the residual adds that meet a norm done by that norm (AddNorm): given
  // the stream and the branch the block before left to add (undefined: none), returns the
  // stream before this block's MLP branch is added, and that branch. The caller adds it,
  // through the next block's first norm or the final one.
  std::pair<torch::Tensor, torch::Tensor> ForwardLeavingLastAdd(const torch::Tensor& stream,
                                                                const torch::Tensor& pending);

 private:
  torch::Tensor Dropout(const torch::Tensor& x);

  int64_t heads_;
  double dropout_;
  torch::nn::LayerNorm attention_norm_{nullptr};
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear attention_out_{nullptr};
  torch::nn::LayerNorm mlp_norm_{nullptr};
  torch::nn::Linear mlp_in_{nullptr};
  torch::nn::Linear mlp_out_{nullptr};
};

TORCH_MODULE(GptBlock);

class GptImpl : public Network {
 public:
  // `config.context` and `config.vocab_size` must be set (the factory fills them from the
  // data). Throws std::invalid_argument naming the field that is out of range.
  explicit GptImpl(const GptConfig& config);
  // int64 token ids [B, T], T <= context -> logits [B, T, vocab_size].
  torch::Tensor forward(const torch::Tensor& tokens) override;
  // In training, the output layer and cross-entropy as one node: with activation
  // checkpointing on, in chunks that never hold all the logits (chunked_cross_entropy.h):
  // the logits, not the blocks, are most of what a small GPT keeps for backward; else,
  // where Stoke's kernels run, whole, with their gradient written over them
  // (linear_cross_entropy.h). nullopt: forward() and the usual loss.
  std::optional<torch::Tensor> ForwardLoss(const torch::Tensor& tokens,
                                           const torch::Tensor& targets) override;
  int64_t TrainingFlopsPerSample() const override { return flops_; }
  // Per transformer block.
  bool SupportsActivationCheckpointing() const override { return true; }

  // model.torchscript.pt: the eval-mode forward with the trained weights (scripted_export.h).
  void WriteExports(const std::string& dir) override;

  // The one [vocab_size, width] matrix: the input embedding and the output layer.
  const torch::Tensor& token_embedding() const { return token_embedding_->weight; }

 private:
  // Embeddings, blocks and the final norm: [B, T] ids -> [B, T, width].
  torch::Tensor Trunk(const torch::Tensor& tokens);

  GptConfig config_;
  torch::nn::Embedding token_embedding_{nullptr};
  torch::nn::Embedding position_embedding_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm final_norm_{nullptr};
  int64_t flops_ = 0;
};

TORCH_MODULE(Gpt);

}  // namespace stoke::worker
