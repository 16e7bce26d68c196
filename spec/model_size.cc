#include "spec/model_size.h"

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spec/job_defaults.h"

namespace stoke::spec {
namespace {

constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

// Parameters of the ResNet body (every block, without the stem and the classifier), by
// depth: He et al. 2016's networks as worker/models/resnet.cc builds them, exactly
// (tests/unit/model_size_match_test.cc counts the modules).
uint64_t ResNetBodyParameters(uint32_t depth) {
  switch (depth) {
    case 34:
      return 21'275'136;
    case 50:
      return 23'498'496;
    default:
      return 11'166'976;
  }
}

struct Layer {
  std::string field;  // what to change to shrink it
  std::string shape;  // for the message
  uint64_t parameters = 0;
  uint64_t count = 1;  // identical copies (a transformer's blocks)
};

struct Estimate {
  std::vector<Layer> layers;
  uint64_t activations_per_sample = 0;  // values one sample keeps alive, at the least
};

uint64_t Product(const std::vector<int64_t>& dims) {
  uint64_t p = 1;
  for (int64_t d : dims) p = SaturatingMul(p, static_cast<uint64_t>(d < 0 ? 0 : d));
  return p;
}

// in x out weights and out biases.
Layer Dense(std::string field, uint64_t in, uint64_t out) {
  return {std::move(field), absl::StrCat(in, " x ", out),
          SaturatingAdd(SaturatingMul(in, out), out)};
}

// The output layer's width: the classes, or for regression one output per target value.
uint64_t Classes(uint32_t configured, const DataFacts& data) {
  if (!data.regression.empty()) {
    uint64_t n = 1;
    for (int64_t d : data.regression) n = SaturatingMul(n, static_cast<uint64_t>(d));
    return n;
  }
  return configured ? configured : static_cast<uint64_t>(data.num_classes);
}

Estimate Mlp(const v1::MlpSpec& mlp, const DataFacts& data) {
  Estimate e;
  uint64_t in = mlp.input_dim() ? mlp.input_dim() : Product(data.sample);
  std::vector<std::pair<std::string, uint64_t>> widths;
  if (mlp.hidden_size() == 0) {
    widths.push_back({"model.mlp.hidden (default: 4 x input_dim)", defaults::DefaultMlpHidden(in)});
  }
  for (int i = 0; i < mlp.hidden_size(); ++i) {
    widths.push_back({absl::StrCat("model.mlp.hidden[", i, "]"), mlp.hidden(i)});
  }
  widths.push_back({"model.mlp.num_classes", Classes(mlp.num_classes(), data)});
  for (const auto& [field, out] : widths) {
    e.layers.push_back(Dense(field, in, out));
    e.activations_per_sample = SaturatingAdd(e.activations_per_sample, out);
    in = out;
  }
  return e;
}

Estimate Cnn(const v1::CnnSpec& cnn, const DataFacts& data) {
  Estimate e;
  uint64_t channels = static_cast<uint64_t>(data.sample[0]);
  uint64_t height = static_cast<uint64_t>(data.sample[1]);
  uint64_t width = static_cast<uint64_t>(data.sample[2]);
  std::vector<uint64_t> stages(cnn.channels().begin(), cnn.channels().end());
  if (stages.empty())
    stages.assign(std::begin(defaults::kCnnChannels), std::end(defaults::kCnnChannels));
  for (size_t i = 0; i < stages.size(); ++i) {
    const uint64_t out = stages[i];
    // A 3x3 convolution without bias, and its batch norm's scale and shift.
    e.layers.push_back({absl::StrCat("model.cnn.channels[", i, "]"),
                        absl::StrCat(channels, " x ", out, " x 3 x 3"),
                        SaturatingAdd(SaturatingMul(SaturatingMul(channels, out), 9), 2 * out)});
    // Its output, before pooling.
    e.activations_per_sample =
        SaturatingAdd(e.activations_per_sample, SaturatingMul(SaturatingMul(out, height), width));
    channels = out;
    height /= 2;
    width /= 2;
  }
  const uint64_t hidden = cnn.hidden() ? cnn.hidden() : defaults::kCnnHidden;
  const uint64_t flat = SaturatingMul(SaturatingMul(channels, height), width);
  e.layers.push_back(Dense("model.cnn.hidden", flat, hidden));
  e.layers.push_back(Dense("model.cnn.num_classes", hidden, Classes(cnn.num_classes(), data)));
  return e;
}

Estimate ResNet(const v1::ResNetSpec& resnet, const DataFacts& data) {
  Estimate e;
  const uint32_t depth = resnet.depth() ? resnet.depth() : defaults::kResNetDepth;
  const uint64_t channels = static_cast<uint64_t>(data.sample[0]);
  const uint64_t height = static_cast<uint64_t>(data.sample[1]);
  const uint64_t width = static_cast<uint64_t>(data.sample[2]);
  const bool small_stem =
      resnet.stem() == v1::RESNET_STEM_SMALL ||
      (resnet.stem() != v1::RESNET_STEM_IMAGENET && height <= 64 && width <= 64);
  const uint64_t kernel = small_stem ? 3 : 7;
  // A convolution without bias, and its batch norm's scale and shift.
  e.layers.push_back(
      {"model.resnet.stem", absl::StrCat(channels, " x 64 x ", kernel, " x ", kernel),
       SaturatingAdd(SaturatingMul(channels, 64 * kernel * kernel), uint64_t{2} * 64)});
  e.layers.push_back(
      {"model.resnet.depth", absl::StrCat("ResNet-", depth), ResNetBodyParameters(depth)});
  e.layers.push_back(Dense("model.resnet.num_classes", depth == 50 ? 2048 : 512,
                           Classes(resnet.num_classes(), data)));
  // The stem's output: 64 channels at full (small stem) or half resolution.
  const uint64_t stride = small_stem ? 1 : 2;
  e.activations_per_sample = SaturatingMul(
      64, SaturatingMul((height + stride - 1) / stride, (width + stride - 1) / stride));
  return e;
}

Estimate Gpt(const v1::GptSpec& gpt, const DataFacts& data) {
  Estimate e;
  const uint64_t width = gpt.width() ? gpt.width() : defaults::kGptWidth;
  const uint64_t layers = gpt.layers() ? gpt.layers() : defaults::kGptLayers;
  const uint64_t context = gpt.context() ? gpt.context() : static_cast<uint64_t>(data.sample[0]);
  const uint64_t vocab =
      gpt.vocab_size() ? gpt.vocab_size() : static_cast<uint64_t>(data.vocab_size);
  // One block: attention's qkv (3w^2 + 3w) and output (w^2 + w), the MLP (8w^2 + 5w), two
  // layer norms (4w).
  const uint64_t block =
      SaturatingAdd(SaturatingMul(12, SaturatingMul(width, width)), SaturatingMul(13, width));
  e.layers.push_back(
      {"model.gpt.width", absl::StrCat("one block of width ", width), block, layers});
  // The layer norm after the last block; the output layer is the token embedding (tied).
  e.layers.push_back({"model.gpt.width", absl::StrCat("the final layer norm of width ", width),
                      SaturatingMul(2, width)});
  e.layers.push_back({"model.gpt.vocab_size", absl::StrCat(vocab, " x ", width, " embedding"),
                      SaturatingMul(vocab, width)});
  e.layers.push_back({"model.gpt.context", absl::StrCat(context, " x ", width, " positions"),
                      SaturatingMul(context, width)});
  // Each block's output over the context.
  e.activations_per_sample = SaturatingMul(SaturatingMul(context, width), layers);
  return e;
}

// fp32 weights and gradients, and the optimizer's state per parameter.
uint64_t BytesPerParameter(const v1::OptimizerSpec& opt) {
  if (opt.has_sgd()) return opt.sgd().momentum() > 0 ? 12 : 8;
  return 16;  // AdamW (the default): two moments
}

std::string Bytes(uint64_t bytes) {
  if (bytes == kSaturated) return "more than 16 EiB";
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

std::string Cap() {
  return absl::StrCat("a job may take at most ", Bytes(kMaxStepBytes),
                      " (weights, gradients, optimizer state and one step's batch, per rank)");
}

bool BreakDown(const v1::JobSpec& spec, const DataFacts& data, Estimate* out) {
  switch (spec.model().kind_case()) {
    case v1::ModelSpec::kMlp:
      *out = Mlp(spec.model().mlp(), data);
      return true;
    case v1::ModelSpec::kCnn:
      *out = Cnn(spec.model().cnn(), data);
      return true;
    case v1::ModelSpec::kResnet:
      *out = ResNet(spec.model().resnet(), data);
      return true;
    case v1::ModelSpec::kGpt:
      *out = Gpt(spec.model().gpt(), data);
      return true;
    default:
      return false;  // TorchScript: the file decides, and the worker reports what it needs
  }
}

uint64_t BatchSize(const v1::TrainingSpec& t) {
  if (t.batch_size_auto()) return 1;  // the search starts small
  return t.batch_size() ? t.batch_size() : defaults::kBatchSize;
}

}  // namespace

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}

ModelSize EstimateModelSize(const v1::JobSpec& spec, const DataFacts& data) {
  ModelSize size;
  Estimate e;
  if (!BreakDown(spec, data, &e)) return size;
  for (const Layer& layer : e.layers)
    size.parameters = SaturatingAdd(size.parameters, SaturatingMul(layer.parameters, layer.count));
  size.state_bytes = SaturatingMul(size.parameters, BytesPerParameter(spec.optimizer()));
  // Inputs as fp32 values (token ids as int64), activations as fp32.
  const uint64_t input_bytes =
      SaturatingMul(Product(data.sample), data.kind == DataFacts::Kind::kTokens ? 8 : 4);
  const uint64_t per_sample =
      SaturatingAdd(input_bytes, SaturatingMul(e.activations_per_sample, 4));
  size.step_bytes = SaturatingMul(per_sample, BatchSize(spec.training()));
  return size;
}

absl::Status CheckModelSize(const v1::JobSpec& spec, const DataFacts& data) {
  auto invalid = [](const std::string& field, const std::string& problem) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
  };
  const v1::ModelSpec& model = spec.model();
  if (model.has_mlp() && model.mlp().input_dim() == 0 && Product(data.sample) > kMaxMlpInputs) {
    return invalid("model.mlp",
                   absl::StrCat("the samples of ", data.source, " hold ", Product(data.sample),
                                " values; an MLP takes at most ", kMaxMlpInputs,
                                " inputs (use model.cnn or model.resnet for large images)"));
  }
  if (model.has_cnn()) {
    // Each stage halves the image; the worker cannot build a stage on a 1-pixel image.
    int64_t height = data.sample[1], width = data.sample[2];
    const int stages = model.cnn().channels_size()
                           ? model.cnn().channels_size()
                           : static_cast<int>(std::size(defaults::kCnnChannels));
    for (int i = 0; i < stages; ++i, height /= 2, width /= 2) {
      if (height < 2 || width < 2) {
        return invalid("model.cnn.channels",
                       absl::StrCat(stages, " stages are too many for ", data.sample[1], "x",
                                    data.sample[2], " images (each halves the size)"));
      }
    }
  }
  Estimate e;
  if (!BreakDown(spec, data, &e)) return absl::OkStatus();
  const uint64_t per_parameter = BytesPerParameter(spec.optimizer());
  for (const Layer& layer : e.layers) {
    const uint64_t bytes = SaturatingMul(layer.parameters, per_parameter);
    if (bytes > kMaxStepBytes) {
      return invalid(
          layer.field,
          absl::StrCat(layer.shape, " holds ", layer.parameters, " parameters, ", Bytes(bytes),
                       " with their gradients and optimizer state; ", Cap()));
    }
  }
  const ModelSize size = EstimateModelSize(spec, data);
  if (size.state_bytes > kMaxStepBytes) {
    const auto* kind = v1::ModelSpec::descriptor()->FindFieldByNumber(model.kind_case());
    return invalid(absl::StrCat("model.", kind ? kind->name() : "kind"),
                   absl::StrCat(size.parameters, " parameters need ", Bytes(size.state_bytes),
                                " with their gradients and optimizer state; ", Cap()));
  }
  if (SaturatingAdd(size.state_bytes, size.step_bytes) > kMaxStepBytes) {
    return invalid("training.batch_size",
                   absl::StrCat("a batch of ", BatchSize(spec.training()), " samples of ",
                                data.source, " takes at least ", Bytes(size.step_bytes),
                                " in inputs and activations, beside ", Bytes(size.state_bytes),
                                " of model state; ", Cap()));
  }
  return absl::OkStatus();
}

}  // namespace stoke::spec
