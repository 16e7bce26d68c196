// GPT: the transformer block, the model around it, GPT-2's initialisation and the
// PaLM-style FLOP count.
#include "worker/models/gpt.h"

#include <torch/nn/init.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/models/scripted_export.h"
#include "worker/ops/activation_checkpoint.h"
#include "worker/ops/chunked_cross_entropy.h"
#include "worker/ops/fused_layer_norm.h"
#include "worker/ops/half_linear.h"
#include "worker/ops/linear_cross_entropy.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

constexpr double kInitStd = 0.02;

torch::nn::Linear Linear(int64_t in, int64_t out, double std) {
  torch::nn::Linear linear(in, out);
  torch::nn::init::normal_(linear->weight, 0.0, std);
  torch::nn::init::zeros_(linear->bias);
  return linear;
}

// torch::nn::Linear's forward, given more than two dimensions, multiplies and then adds
// the bias in a separate broadcasting kernel (with a dtype cast under autocast: a large
// share of a GPT-2 step, BENCHMARKS.md). ATen's linear folds the leading dimensions into one matrix
// product whose epilogue adds the bias, as PyTorch's Python F.linear does; under autocast
// on a GPU, its bias gradient is summed by Stoke's kernel (half_linear.h).
torch::Tensor Dense(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return AutocastLinear(x, layer->weight, layer->bias);
}

// Under bf16/fp16 autocast on a GPU, the norm of the fp32 residual stream writes the
// low-precision input of the next matrix product itself (fused_layer_norm.h). Autocast
// runs ATen's layer norm in fp32 instead: an fp32 output cast to bf16 forward, and the
// bf16 gradient cast to fp32 backward, at every norm.
bool FusedNormApplies(const torch::nn::LayerNorm& norm, const torch::Tensor& x,
                      const compat::AutocastState& autocast) {
  return autocast.enabled && FusedLayerNormApplies(x) && norm->weight.defined() &&
         (autocast.dtype == torch::kBFloat16 || autocast.dtype == torch::kHalf);
}

torch::Tensor Norm(torch::nn::LayerNorm& norm, const torch::Tensor& x) {
  const compat::AutocastState autocast = compat::GetAutocast(x.device().type());
  if (FusedNormApplies(norm, x, autocast)) {
    return FusedLayerNorm(x, norm->weight, norm->bias, norm->options.eps(), autocast.dtype);
  }
  return norm->forward(x);
}

// (x + branch, the norm of that). Fused, the residual add, the norm, and backward's
// gradient sum and cast for the branch are one kernel each way instead of four.
std::pair<torch::Tensor, torch::Tensor> AddNorm(torch::nn::LayerNorm& norm, const torch::Tensor& x,
                                                const torch::Tensor& branch) {
  const compat::AutocastState autocast = compat::GetAutocast(x.device().type());
  if (FusedNormApplies(norm, x, autocast) && branch.scalar_type() == autocast.dtype &&
      branch.sizes() == x.sizes()) {
    return FusedAddLayerNorm(x, branch, norm->weight, norm->bias, norm->options.eps(),
                             autocast.dtype);
  }
  torch::Tensor sum = x + branch;
  torch::Tensor normed = Norm(norm, sum);
  return {std::move(sum), std::move(normed)};
}

void RequirePositive(int64_t value, const char* field) {
  if (value < 1) {
    throw std::invalid_argument(std::string("model.gpt.") + field + ": must be positive, not " +
                                std::to_string(value));
  }
}

}  // namespace

GptBlockImpl::GptBlockImpl(const GptConfig& config)
    : heads_(config.heads), dropout_(config.dropout) {
  const int64_t width = config.width;
  // GPT-2 scales the projections that add into the residual stream by 1/sqrt(2 * layers):
  // the stream is a sum of two of them per layer, and its variance should not grow with
  // depth.
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(config.layers));
  attention_norm_ =
      register_module("attention_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  qkv_ = register_module("qkv", Linear(width, 3 * width, kInitStd));
  attention_out_ = register_module("attention_out", Linear(width, width, residual_std));
  mlp_norm_ =
      register_module("mlp_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  mlp_in_ = register_module("mlp_in", Linear(width, 4 * width, kInitStd));
  mlp_out_ = register_module("mlp_out", Linear(4 * width, width, residual_std));
}

torch::Tensor GptBlockImpl::Dropout(const torch::Tensor& x) {
  return dropout_ > 0 ? torch::dropout(x, dropout_, is_training()) : x;
}

torch::Tensor GptBlockImpl::forward(const torch::Tensor& inputs) {
  const auto [x, branch] = ForwardLeavingLastAdd(inputs, torch::Tensor());
  return x + branch;
}

std::pair<torch::Tensor, torch::Tensor> GptBlockImpl::ForwardLeavingLastAdd(
    const torch::Tensor& stream, const torch::Tensor& pending) {
  torch::Tensor inputs = stream;
  torch::Tensor attention_in;
  if (pending.defined()) {
    std::tie(inputs, attention_in) = AddNorm(attention_norm_, stream, pending);
  } else {
    attention_in = Norm(attention_norm_, stream);
  }
  const int64_t batch = inputs.size(0), time = inputs.size(1), width = inputs.size(2);
  const int64_t head_dim = width / heads_;
  // One matrix product for queries, keys and values; then [B, T, H, Q] -> [B, H, T, Q].
  const std::vector<torch::Tensor> qkv = Dense(qkv_, attention_in).split(width, /*dim=*/-1);
  auto heads = [&](const torch::Tensor& t) {
    return t.view({batch, time, heads_, head_dim}).transpose(1, 2);
  };
  torch::Tensor attended = compat::CausalSelfAttention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                                       is_training() ? dropout_ : 0.0);
  attended = attended.transpose(1, 2).reshape({batch, time, width});
  const auto [x, normed] = AddNorm(mlp_norm_, inputs, Dropout(Dense(attention_out_, attended)));
  return {x, Dropout(AutocastGeluMlp(normed, mlp_in_->weight, mlp_in_->bias, mlp_out_->weight,
                                     mlp_out_->bias))};
}

GptImpl::GptImpl(const GptConfig& config) : config_(config) {
  RequirePositive(config.layers, "layers");
  RequirePositive(config.heads, "heads");
  RequirePositive(config.width, "width");
  RequirePositive(config.context, "context");
  RequirePositive(config.vocab_size, "vocab_size");
  if (config.width % config.heads != 0) {
    throw std::invalid_argument("model.gpt.heads: " + std::to_string(config.heads) +
                                " heads do not divide the width " + std::to_string(config.width));
  }
  if (config.dropout < 0 || config.dropout >= 1) {
    throw std::invalid_argument("model.gpt.dropout: must be in [0, 1), not " +
                                std::to_string(config.dropout));
  }
  token_embedding_ =
      register_module("token_embedding", torch::nn::Embedding(config.vocab_size, config.width));
  position_embedding_ =
      register_module("position_embedding", torch::nn::Embedding(config.context, config.width));
  torch::nn::init::normal_(token_embedding_->weight, 0.0, kInitStd);
  torch::nn::init::normal_(position_embedding_->weight, 0.0, kInitStd);
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.layers; ++i) blocks_->push_back(GptBlock(config));
  final_norm_ = register_module("final_norm",
                                torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.width})));

  // Per token (Chowdhery et al. 2022, appendix B): 6 FLOPs per weight (2 forward, 4
  // backward), plus attention's q.k and weights.v products: 2 * T * width multiply-adds
  // per layer forward, 12 * T * width FLOPs with the backward pass (the causal mask's
  // skipped half is counted, as in that formula). The position embedding is a lookup, not
  // a product; the tied token embedding counts once, as the output layer.
  int64_t weights = 0;
  for (const auto& p : parameters()) weights += p.numel();
  weights -= position_embedding_->weight.numel();
  const int64_t t = config.context;
  flops_ = t * (6 * weights + 12 * config.layers * config.width * t);
}

torch::Tensor GptImpl::Trunk(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "GPT: expected token ids [batch, time], got ", tokens.sizes());
  const int64_t time = tokens.size(1);
  TORCH_CHECK(time <= config_.context, "GPT: ", time, " tokens exceed the context of ",
              config_.context);
  const torch::Tensor positions =
      torch::arange(time, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  torch::Tensor x = token_embedding_->forward(tokens) + position_embedding_->forward(positions);
  if (config_.dropout > 0) x = torch::dropout(x, config_.dropout, is_training());
  if (!checkpoint_blocks_) {
    // Each block's last residual add is done by the norm after it, in the next block or
    // the final one: with the fused norm, one kernel each way instead of an add forward
    // and, backward, a gradient sum and a cast to the branch's type.
    torch::Tensor pending;
    for (const auto& block : *blocks_) {
      std::tie(x, pending) = block->as<GptBlockImpl>()->ForwardLeavingLastAdd(x, pending);
    }
    return pending.defined() ? AddNorm(final_norm_, x, pending).second : Norm(final_norm_, x);
  }
  for (const auto& block : *blocks_) {
    // The lambda holds the block's shared pointer: backward calls it again, and the graph
    // keeps it alive for as long as that may happen.
    CheckpointOptions options;
    options.preserve_rng_state = config_.dropout > 0 && is_training();
    x = CheckpointedForward(
        [block](const torch::Tensor& in) { return block->as<GptBlockImpl>()->forward(in); }, x,
        std::move(options));
  }
  return Norm(final_norm_, x);
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  // Tied weights (Press & Wolf 2017): the output layer is the token embedding, which
  // saves vocab_size x width parameters and trains the embedding from every position.
  return torch::linear(Trunk(tokens), token_embedding_->weight);
}

std::optional<torch::Tensor> GptImpl::ForwardLoss(const torch::Tensor& tokens,
                                                  const torch::Tensor& targets) {
  if (!is_training()) return std::nullopt;
  const compat::AutocastState autocast = compat::GetAutocast(tokens.device().type());
  const at::ScalarType dtype =
      autocast.enabled ? autocast.dtype : token_embedding_->weight.scalar_type();
  // Checkpointed blocks ask for the least memory: the chunked loss never holds the logits
  // whole. Otherwise the output layer and the loss in one node that overwrites the logits
  // with their gradient (linear_cross_entropy.h), where Stoke's kernels run.
  const bool whole = !checkpoint_blocks_ && LinearCrossEntropyApplies(tokens.device(), dtype);
  if (!checkpoint_blocks_ && !whole) return std::nullopt;
  const torch::Tensor hidden = Trunk(tokens);
  const torch::Tensor rows = hidden.reshape({-1, hidden.size(-1)});
  if (whole) {
    return LinearCrossEntropy(rows, token_embedding_->weight, targets.reshape({-1}), dtype);
  }
  return ChunkedLinearCrossEntropy(rows, token_embedding_->weight, targets.reshape({-1}),
                                   autocast.enabled ? autocast.dtype : hidden.scalar_type());
}

void GptImpl::WriteExports(const std::string& dir) {
  const std::string width = std::to_string(config_.width);
  const std::string heads = std::to_string(config_.heads);
  const std::string head_dim = std::to_string(config_.width / config_.heads);
  const std::string scale =
      ScriptFloat(1.0 / std::sqrt(static_cast<double>(config_.width / config_.heads)));
  const std::string eps = ScriptFloat(final_norm_->options.eps());
  auto norm = [&](const std::string& x, const std::string& weight, const std::string& bias) {
    return "torch.layer_norm(" + x + ", [" + width + "], " + weight + ", " + bias + ", " + eps +
           ", True)";
  };
  // One block as a method over its tensors, called once per block; causal attention
  // written out, as every PyTorch version runs it.
  std::string source =
      "def block(self, x, n1w, n1b, qkvw, qkvb, ow, ob, n2w, n2b, iw, ib, o2w, o2b):\n"
      "    b = x.size(0)\n"
      "    t = x.size(1)\n"
      "    qkv = torch.linear(" +
      norm("x", "n1w", "n1b") + ", qkvw, qkvb).split(" + width +
      ", -1)\n"
      "    q = qkv[0].view([b, t, " +
      heads + ", " + head_dim +
      "]).transpose(1, 2)\n"
      "    k = qkv[1].view([b, t, " +
      heads + ", " + head_dim +
      "]).transpose(1, 2)\n"
      "    v = qkv[2].view([b, t, " +
      heads + ", " + head_dim +
      "]).transpose(1, 2)\n"
      "    future = torch.full([t, t], float('-inf'), device=x.device).triu(1)\n"
      "    weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * " +
      scale +
      " + future, -1)\n"
      "    a = torch.matmul(weights, v).transpose(1, 2).reshape([b, t, " +
      width +
      "])\n"
      "    x = x + torch.linear(a, ow, ob)\n"
      "    return x + torch.linear(torch.gelu(torch.linear(" +
      norm("x", "n2w", "n2b") +
      ", iw, ib)), o2w, o2b)\n"
      "\n"
      "def forward(self, tokens):\n"
      "    positions = torch.arange(tokens.size(1), device=tokens.device)\n"
      "    x = torch.embedding(" +
      ScriptTensor("token_embedding.weight") + ", tokens) + " + "torch.embedding(" +
      ScriptTensor("position_embedding.weight") + ", positions)\n";
  for (size_t i = 0; i < blocks_->size(); ++i) {
    const std::string block = "blocks." + std::to_string(i) + ".";
    source += "    x = self.block(x";
    for (const char* tensor :
         {"attention_norm.weight", "attention_norm.bias", "qkv.weight", "qkv.bias",
          "attention_out.weight", "attention_out.bias", "mlp_norm.weight", "mlp_norm.bias",
          "mlp_in.weight", "mlp_in.bias", "mlp_out.weight", "mlp_out.bias"}) {
      source += ", " + ScriptTensor(block + tensor);
    }
    source += ")\n";
  }
  source +=
      "    x = " + norm("x", ScriptTensor("final_norm.weight"), ScriptTensor("final_norm.bias")) +
      "\n";
  source += "    return torch.linear(x, " + ScriptTensor("token_embedding.weight") + ")\n";
  SaveScriptedNetwork(*this, "Gpt", source, ScriptedExportPath(dir));
}

}  // namespace stoke::worker
