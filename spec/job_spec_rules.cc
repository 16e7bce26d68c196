#include "spec/job_spec_rules.h"

#include <cctype>
#include <cmath>
#include <numeric>
#include <utility>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/stoke/v1/limits.h"
#include "spec/job_defaults.h"
#include "spec/model_size.h"

namespace stoke::spec {
namespace {

constexpr uint32_t kMaxBatchSize = 1u << 20;
constexpr uint32_t kMaxAccumSteps = 4096;
constexpr uint32_t kMaxDevices = 4096;
constexpr uint32_t kMaxRestarts = 100;
constexpr uint32_t kMaxCollectiveTimeoutSeconds = 3600;
constexpr uint32_t kMaxBucketMb = 1024;
constexpr uint32_t kMaxLayerWidth = 1u << 20;
constexpr uint32_t kMaxVocab = 1u << 16;  // token files hold uint16 ids
// Checkpoints one job may keep: more fills a shared disk for no resume anyone needs.
constexpr uint32_t kMaxCheckpointsKept = 100;
constexpr uint32_t kMaxCheckpointIntervalSeconds = 7 * 24 * 3600;
// A shuffle buffer holds sample ids only, yet a larger one stops being a stream.
constexpr uint32_t kMaxShuffleBuffer = 10000000;
// A text sample's ids: a model's sequence, not a document.
constexpr uint32_t kMaxTextLength = 1u << 20;
constexpr size_t kMaxNameLength = 200;
// command.grace_seconds: an hour to checkpoint is already more than any preemption waits.
constexpr uint32_t kMaxGraceSeconds = 3600;
// model.python.args: keyword arguments, not data.
constexpr size_t kMaxPythonArgsBytes = 16 * 1024;
constexpr uint32_t kDefaultBatchSize = defaults::kBatchSize;
// Samples per optimizer step across all ranks (batch_size: auto); 16M, beyond any
// published large-batch run.
constexpr uint32_t kMaxEffectiveBatchSize = 1u << 24;
// Ranges of the optimizer's numbers: far beyond what trains, short of what overflows fp32
// updates into inf and NaN at the first step (lr: 1e308 used to be queued and retried).
constexpr double kMaxLearningRate = 10;
constexpr double kMaxWeightDecay = 10;
constexpr double kMaxGradClipNorm = 1e6;
// fp16's loss scale: 2^32 at most (the default is 2^16); more overflows fp16 gradients at
// every step, so that no step is ever taken.
constexpr double kMaxLossScale = 4294967296.0;

// Every problem a check finds: checks go on after one, so that a user fixes them all at
// once. A spec with thousands of bad entries is told of the first kMaxProblems.
class Problems {
 public:
  static constexpr size_t kMaxProblems = 100;
  void Add(absl::Status status) {
    if (!status.ok() && found_.size() < kMaxProblems) found_.push_back(std::move(status));
  }
  std::vector<absl::Status> Take() { return std::move(found_); }

 private:
  std::vector<absl::Status> found_;
};

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

// In [0, max]; NaN and infinities are not.
absl::Status InRange(absl::string_view field, double value, double max) {
  if (!(value >= 0 && value <= max)) {
    return Invalid(field, absl::StrCat(value, " is out of range: from 0 to ", max));
  }
  return absl::OkStatus();
}

// The image fields data.images and data.shards share, under `prefix`.
void CheckImageFields(const std::string& prefix, uint32_t size, uint32_t channels,
                      bool has_min_crop_area, double min_crop_area, Problems& problems) {
  if (size != 0 && (size < 8 || size > 4096)) {
    problems.Add(Invalid(absl::StrCat(prefix, ".size"), "from 8 to 4096 pixels"));
  }
  if (channels != 0 && channels != 1 && channels != 3) {
    problems.Add(Invalid(absl::StrCat(prefix, ".channels"), "1 (grey) or 3 (RGB)"));
  }
  if (has_min_crop_area && !(min_crop_area > 0 && min_crop_area <= 1)) {
    problems.Add(Invalid(absl::StrCat(prefix, ".min_crop_area"), "more than 0, at most 1"));
  }
  return;
}

void ValidateData(const v1::DataSpec& data, Problems& problems) {
  switch (data.kind_case()) {
    case v1::DataSpec::kSynthetic: {
      const auto& s = data.synthetic();
      if (s.features() > kMaxLayerWidth) {
        problems.Add(Invalid("data.synthetic.features", absl::StrCat("at most ", kMaxLayerWidth)));
      }
      if (s.num_classes() == 1)
        problems.Add(Invalid("data.synthetic.num_classes", "must be at least 2"));
      if (s.num_classes() > kMaxLayerWidth) {
        problems.Add(
            Invalid("data.synthetic.num_classes", absl::StrCat("at most ", kMaxLayerWidth)));
      }
      if (s.image_shape_size() != 0 && s.image_shape_size() != 3) {
        problems.Add(Invalid("data.synthetic.image_shape", "must be [channels, height, width]"));
      }
      for (uint32_t d : s.image_shape()) {
        if (d == 0 || d > 4096)
          problems.Add(Invalid("data.synthetic.image_shape", "sizes from 1 to 4096"));
      }
      if (s.vocab_size() > kMaxVocab) {
        problems.Add(Invalid("data.synthetic.vocab_size", absl::StrCat("at most ", kMaxVocab)));
      }
      if (s.vocab_size() > 0 && s.image_shape_size() > 0) {
        problems.Add(
            Invalid("data.synthetic.vocab_size", "set either image_shape or vocab_size, not both"));
      }
      if (s.context() > 0 && s.vocab_size() == 0) {
        problems.Add(Invalid("data.synthetic.context", "needs vocab_size (token sequences)"));
      }
      break;
    }
    case v1::DataSpec::kMnist:
    case v1::DataSpec::kCifar10:
    case v1::DataSpec::kArrays:
      break;  // paths: data_checks.cc
    case v1::DataSpec::kImages: {
      const auto& i = data.images();
      CheckImageFields("data.images", i.size(), i.channels(), i.has_min_crop_area(),
                       i.min_crop_area(), problems);
      break;  // paths: data_checks.cc
    }
    case v1::DataSpec::kShards: {
      const auto& shards = data.shards();
      if (shards.urls().empty())
        problems.Add(Invalid("data.shards.urls", "required: a shard pattern"));
      CheckImageFields("data.shards", shards.size(), shards.channels(), shards.has_min_crop_area(),
                       shards.min_crop_area(), problems);
      if (shards.shuffle_buffer() > kMaxShuffleBuffer) {
        problems.Add(
            Invalid("data.shards.shuffle_buffer", absl::StrCat("at most ", kMaxShuffleBuffer)));
      }
      if (shards.text_length() > kMaxTextLength) {
        problems.Add(Invalid("data.shards.text_length", absl::StrCat("at most ", kMaxTextLength)));
      }
      break;  // patterns and files: data_checks.cc
    }
    case v1::DataSpec::kTokens:
      if (data.tokens().vocab_size() > kMaxVocab) {
        problems.Add(Invalid("data.tokens.vocab_size",
                             absl::StrCat("at most ", kMaxVocab, " (token ids are uint16)")));
      }
      if (data.tokens().context() > 1u << 16)
        problems.Add(Invalid("data.tokens.context", "at most 65536"));
      break;
    default:
      problems.Add(Invalid(
          "data",
          "required: set one of synthetic, mnist, cifar10, tokens, arrays, images, shards"));
  }
  if (data.has_max_bad_fraction() &&
      !(data.max_bad_fraction() >= 0 && data.max_bad_fraction() < 1)) {
    problems.Add(Invalid("data.max_bad_fraction", "at least 0, below 1"));
  }
  if (data.loader().threads() > 256) problems.Add(Invalid("data.loader.threads", "at most 256"));
  if (data.loader().prefetch() > 64) problems.Add(Invalid("data.loader.prefetch", "at most 64"));
  if (data.augment().crop_padding() > 64)
    problems.Add(Invalid("data.augment.crop_padding", "at most 64"));
  return;
}

// A dotted name of Python identifiers ("build_model", "models.vit").
bool IsDottedName(const std::string& text) {
  if (text.empty()) return false;
  bool start = true;
  for (char c : text) {
    if (c == '.') {
      if (start) return false;
      start = true;
      continue;
    }
    const bool letter = std::isalpha(static_cast<unsigned char>(c)) || c == '_';
    if (!letter && (start || !std::isdigit(static_cast<unsigned char>(c)))) return false;
    start = false;
  }
  return !start;
}

void ValidatePythonModel(const v1::PythonModelSpec& python, Problems& problems) {
  if (!python.module().empty() && !IsDottedName(python.module())) {
    problems.Add(
        Invalid("model.python.module", "a Python module name (\"model\", \"models.vit\")"));
  }
  if (!python.factory().empty() && !IsDottedName(python.factory())) {
    problems.Add(Invalid("model.python.factory", "a Python name in the module (\"build_model\")"));
  }
  if (python.args().ByteSizeLong() > kMaxPythonArgsBytes) {
    problems.Add(
        Invalid("model.python.args", absl::StrCat("at most ", kMaxPythonArgsBytes, " bytes")));
  }
  for (const auto& [field, dims] :
       {std::pair{"model.python.input_shape", &python.input_shape()},
        std::pair{"model.python.target_shape", &python.target_shape()}}) {
    for (uint32_t d : *dims) {
      if (d == 0 || d > kMaxLayerWidth) {
        problems.Add(Invalid(field, absl::StrCat("sizes from 1 to ", kMaxLayerWidth)));
      }
    }
  }
  return;
}

void ValidateModel(const v1::ModelSpec& model, Problems& problems) {
  switch (model.kind_case()) {
    case v1::ModelSpec::kMlp: {
      const auto& mlp = model.mlp();
      for (int i = 0; i < mlp.hidden_size(); ++i) {
        if (mlp.hidden(i) == 0 || mlp.hidden(i) > kMaxLayerWidth) {
          problems.Add(Invalid(absl::StrCat("model.mlp.hidden[", i, "]"),
                               absl::StrCat("must be between 1 and ", kMaxLayerWidth)));
        }
      }
      if (!(mlp.dropout() >= 0.0f && mlp.dropout() < 1.0f)) {
        problems.Add(Invalid("model.mlp.dropout", "must be in [0, 1)"));
      }
      return;
    }
    case v1::ModelSpec::kCnn: {
      const auto& cnn = model.cnn();
      for (int i = 0; i < cnn.channels_size(); ++i) {
        if (cnn.channels(i) == 0 || cnn.channels(i) > 65536) {
          problems.Add(
              Invalid(absl::StrCat("model.cnn.channels[", i, "]"), "must be between 1 and 65536"));
        }
      }
      if (cnn.channels_size() > 8) problems.Add(Invalid("model.cnn.channels", "at most 8 stages"));
      if (!(cnn.dropout() >= 0.0f && cnn.dropout() < 1.0f)) {
        problems.Add(Invalid("model.cnn.dropout", "must be in [0, 1)"));
      }
      return;
    }
    case v1::ModelSpec::kResnet: {
      const uint32_t depth = model.resnet().depth();
      if (depth != 0 && depth != 18 && depth != 34 && depth != 50) {
        problems.Add(Invalid("model.resnet.depth", "must be 18, 34 or 50"));
      }
      return;
    }
    case v1::ModelSpec::kGpt: {
      const auto& gpt = model.gpt();
      const uint32_t width = gpt.width() ? gpt.width() : 384;
      const uint32_t heads = gpt.heads() ? gpt.heads() : 6;
      if (gpt.layers() > 512) problems.Add(Invalid("model.gpt.layers", "at most 512"));
      if (width > 65536) problems.Add(Invalid("model.gpt.width", "at most 65536"));
      if (width % heads != 0) {
        problems.Add(
            Invalid("model.gpt.heads", absl::StrCat(heads, " does not divide the width ", width)));
      }
      if (!(gpt.dropout() >= 0.0f && gpt.dropout() < 1.0f)) {
        problems.Add(Invalid("model.gpt.dropout", "must be in [0, 1)"));
      }
      return;
    }
    case v1::ModelSpec::kTorchscript:
      if (model.torchscript().path().empty())
        problems.Add(Invalid("model.torchscript.path", "required"));
      if (model.torchscript().loss() == v1::LOSS_MODEL) {
        problems.Add(Invalid("model.torchscript.loss", "model applies to model.python only"));
      }
      return;
    case v1::ModelSpec::kPython: {
      ValidatePythonModel(model.python(), problems);
      return;
    }
    default:
      problems.Add(
          Invalid("model", "required: set one of mlp, cnn, resnet, gpt, torchscript, python"));
  }
}

void ValidateOptimizer(const v1::OptimizerSpec& opt, Problems& problems) {
  problems.Add(InRange("optimizer.lr", opt.lr(), kMaxLearningRate));
  problems.Add(InRange("optimizer.weight_decay", opt.weight_decay(), kMaxWeightDecay));
  problems.Add(InRange("optimizer.grad_clip_norm", opt.grad_clip_norm(), kMaxGradClipNorm));
  if (opt.has_min_lr_ratio() && !(opt.min_lr_ratio() >= 0 && opt.min_lr_ratio() <= 1)) {
    problems.Add(Invalid("optimizer.min_lr_ratio", "must be in [0, 1]"));
  }
  if (opt.has_adamw()) {
    const auto& a = opt.adamw();
    if (a.has_beta1() && !(a.beta1() >= 0 && a.beta1() < 1)) {
      problems.Add(Invalid("optimizer.adamw.beta1", "must be in [0, 1)"));
    }
    if (a.has_beta2() && !(a.beta2() >= 0 && a.beta2() < 1)) {
      problems.Add(Invalid("optimizer.adamw.beta2", "must be in [0, 1)"));
    }
    if (a.has_eps() && !(a.eps() > 0 && std::isfinite(a.eps()))) {
      problems.Add(Invalid("optimizer.adamw.eps", "must be a positive number"));
    }
    if (!v1::AdamWImplementation_IsValid(a.implementation())) {
      problems.Add(Invalid("optimizer.adamw.implementation", "unknown value"));
    }
  }
  if (opt.has_sgd()) {
    if (!(opt.sgd().momentum() >= 0 && opt.sgd().momentum() < 1)) {
      problems.Add(Invalid("optimizer.sgd.momentum", "must be in [0, 1)"));
    }
    if (opt.sgd().nesterov() && opt.sgd().momentum() == 0) {
      problems.Add(Invalid("optimizer.sgd.nesterov", "needs a momentum above 0"));
    }
  }
  return;
}

void ValidateTraining(const v1::TrainingSpec& t, Problems& problems) {
  switch (t.length_case()) {
    case v1::TrainingSpec::kSteps:
      if (t.steps() == 0) problems.Add(Invalid("training.steps", "must be at least 1"));
      break;
    case v1::TrainingSpec::kEpochs:
      if (t.epochs() == 0) problems.Add(Invalid("training.epochs", "must be at least 1"));
      break;
    default:
      problems.Add(Invalid("training", "set steps or epochs"));
  }
  if (t.batch_size() > kMaxBatchSize) {
    problems.Add(Invalid("training.batch_size", absl::StrCat("at most ", kMaxBatchSize)));
  }
  if (t.grad_accum_steps() > kMaxAccumSteps) {
    problems.Add(Invalid("training.grad_accum_steps", absl::StrCat("at most ", kMaxAccumSteps)));
  }
  if (!v1::Precision_IsValid(t.precision())) {
    problems.Add(Invalid("training.precision", "unknown value"));
  }
  if (t.batch_size_auto() && t.batch_size() != 0) {
    problems.Add(Invalid("training.batch_size", "set a number or auto, not both"));
  }
  if (t.effective_batch_size() > kMaxEffectiveBatchSize) {
    problems.Add(
        Invalid("training.effective_batch_size", absl::StrCat("at most ", kMaxEffectiveBatchSize)));
  }
  if (t.effective_batch_size() != 0 && !t.batch_size_auto()) {
    problems.Add(Invalid("training.effective_batch_size",
                         "needs batch_size: auto (with a fixed batch, set grad_accum_steps)"));
  }
  if (t.effective_batch_size() != 0 && t.grad_accum_steps() > 1) {
    problems.Add(Invalid("training.grad_accum_steps",
                         "is chosen from effective_batch_size; set only one of them"));
  }
  const std::pair<const char*, v1::Switch> switches[] = {
      {"training.cuda_graph", t.cuda_graph()},
      {"training.activation_checkpointing", t.activation_checkpointing()},
      {"training.tf32", t.tf32()},
      {"training.channels_last", t.channels_last()},
      {"training.cudnn_benchmark", t.cudnn_benchmark()},
      {"training.fused_kernels", t.fused_kernels()},
  };
  for (const auto& [field, value] : switches) {
    if (!v1::Switch_IsValid(value)) problems.Add(Invalid(field, "unknown value"));
  }
  if (t.has_loss_scale()) {
    if (t.precision() != v1::PRECISION_FP16) {
      problems.Add(Invalid("training.loss_scale", "applies to precision fp16 only"));
    }
    const double initial = t.loss_scale().initial();
    problems.Add(InRange("training.loss_scale.initial", initial, kMaxLossScale));
  }
  return;
}

int64_t Product(const std::vector<int64_t>& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

void MatchClasses(absl::string_view field, uint32_t configured, const DataFacts& data,
                  Problems& problems) {
  if (!data.regression.empty() && !absl::StartsWith(field, "model.mlp")) {
    problems.Add(
        Invalid(field.substr(0, field.rfind('.')),
                absl::StrCat("classifies, and ", data.source,
                             " has floating (regression) targets; model.mlp or model.python "
                             "regress")));
  }
  if (!data.regression.empty()) return;  // an MLP's outputs: the targets'
  if (configured != 0 && configured != data.num_classes) {
    problems.Add(Invalid(
        field, absl::StrCat(configured, " does not match the ", data.num_classes, " classes of ",
                            data.source, " (leave it out to take it from the data)")));
  }
  return;
}

// Whether the model can take the data at all (a status naming why not), with the
// problems of a model that can: input width, classes, vocabulary, context.
absl::Status ModelTakesData(const v1::ModelSpec& model, const DataFacts& data, Problems& problems) {
  const bool tokens = data.kind == DataFacts::Kind::kTokens;
  const bool images = data.kind == DataFacts::Kind::kImage;
  switch (model.kind_case()) {
    case v1::ModelSpec::kMlp: {
      if (tokens) {
        return Invalid("model.mlp", absl::StrCat("cannot take the token data of ", data.source,
                                                 "; use model.gpt"));
      }
      const int64_t inputs = Product(data.sample);
      if (model.mlp().input_dim() != 0 && model.mlp().input_dim() != inputs) {
        problems.Add(Invalid("model.mlp.input_dim",
                             absl::StrCat(model.mlp().input_dim(), " does not match the ", inputs,
                                          " input values of ", data.source,
                                          " (leave it out to take it from the data)")));
      }
      MatchClasses("model.mlp.num_classes", model.mlp().num_classes(), data, problems);
      break;
    }
    case v1::ModelSpec::kCnn:
      if (!images) {
        return Invalid("model.cnn", absl::StrCat("needs images; ", data.source, " holds none"));
      }
      MatchClasses("model.cnn.num_classes", model.cnn().num_classes(), data, problems);
      break;
    case v1::ModelSpec::kResnet:
      if (!images) {
        return Invalid("model.resnet", absl::StrCat("needs images; ", data.source, " holds none"));
      }
      MatchClasses("model.resnet.num_classes", model.resnet().num_classes(), data, problems);
      break;
    case v1::ModelSpec::kGpt: {
      if (!tokens) {
        return Invalid("model.gpt",
                       absl::StrCat("needs token data (data.tokens, or data.synthetic with "
                                    "vocab_size); ",
                                    data.source, " holds none"));
      }
      const auto& gpt = model.gpt();
      if (gpt.vocab_size() != 0 && gpt.vocab_size() < data.vocab_size) {
        problems.Add(Invalid("model.gpt.vocab_size",
                             absl::StrCat(gpt.vocab_size(), " is below the data's vocabulary of ",
                                          data.vocab_size)));
      }
      if (gpt.context() != 0 && gpt.context() < data.sample[0]) {
        problems.Add(Invalid("model.gpt.context",
                             absl::StrCat(gpt.context(), " is shorter than the data's context of ",
                                          data.sample[0])));
      }
      break;
    }
    default:
      break;
  }
  return absl::OkStatus();
}

// Rules every field shares, by reflection so that a field added to the .proto is covered:
// an enum holds a value the .proto names (proto3 keeps unknown numbers, and 999 would
// otherwise run as some default), a string at most kMaxPathBytes, a list at most
// kMaxRepeatedElements entries.
void CheckEveryField(const google::protobuf::Message& message, const std::string& prefix,
                     Problems& problems) {
  using google::protobuf::FieldDescriptor;
  const auto* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string path =
        prefix.empty() ? field->name() : absl::StrCat(prefix, ".", field->name());
    if (field->is_repeated()) {
      const int n = reflection->FieldSize(message, field);
      if (n > v1::kMaxRepeatedElements) {
        problems.Add(
            Invalid(path, absl::StrCat(n, " entries; at most ", v1::kMaxRepeatedElements)));
      }
      for (int i = 0; i < n; ++i) {
        const std::string element = absl::StrCat(path, "[", i, "]");
        switch (field->cpp_type()) {
          case FieldDescriptor::CPPTYPE_ENUM: {
            const int v = reflection->GetRepeatedEnumValue(message, field, i);
            if (!field->enum_type()->FindValueByNumber(v)) {
              problems.Add(Invalid(element, absl::StrCat("unknown value ", v)));
            }
            break;
          }
          case FieldDescriptor::CPPTYPE_STRING:
            if (reflection->GetRepeatedString(message, field, i).size() > v1::kMaxPathBytes) {
              problems.Add(Invalid(element, absl::StrCat("at most ", v1::kMaxPathBytes, " bytes")));
            }
            break;
          case FieldDescriptor::CPPTYPE_MESSAGE:
            CheckEveryField(reflection->GetRepeatedMessage(message, field, i), element, problems);
            break;
          default:
            break;
        }
      }
      continue;
    }
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_ENUM: {
        const int v = reflection->GetEnumValue(message, field);
        if (!field->enum_type()->FindValueByNumber(v)) {
          problems.Add(Invalid(path, absl::StrCat("unknown value ", v)));
        }
        break;
      }
      case FieldDescriptor::CPPTYPE_STRING:
        if (reflection->GetString(message, field).size() > v1::kMaxPathBytes) {
          problems.Add(Invalid(path, absl::StrCat("at most ", v1::kMaxPathBytes, " bytes")));
        }
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        CheckEveryField(reflection->GetMessage(message, field), path, problems);
        break;
      default:
        break;
    }
  }
  return;
}

// Where and how often the job runs, for model and script jobs alike.
void ValidateJobResources(const v1::JobSpec& spec, Problems& problems) {
  if (spec.resources().gpus() > kMaxDevices) {
    problems.Add(Invalid("resources.gpus", absl::StrCat("at most ", kMaxDevices)));
  }
  if (!v1::DeviceKind_IsValid(spec.resources().device())) {
    problems.Add(Invalid("resources.device", "unknown value"));
  }
  if (spec.max_restarts() > kMaxRestarts) {
    problems.Add(Invalid("max_restarts", absl::StrCat("at most ", kMaxRestarts)));
  }
  if (spec.distributed().timeout_seconds() > kMaxCollectiveTimeoutSeconds) {
    problems.Add(Invalid("distributed.timeout_seconds",
                         absl::StrCat("at most ", kMaxCollectiveTimeoutSeconds, " (one hour)")));
  }
  if (spec.distributed().bucket_mb() > kMaxBucketMb) {
    problems.Add(Invalid("distributed.bucket_mb", absl::StrCat("at most ", kMaxBucketMb)));
  }
  return;
}

// What the worker sets for a script job's program: the user's env may not change them.
bool SetByStoke(absl::string_view name) {
  for (const char* taken : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                            "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "GROUP_RANK", "ROLE_RANK"}) {
    if (name == taken) return true;
  }
  return absl::StartsWith(name, "STOKE_") || absl::StartsWith(name, "TORCHELASTIC_");
}

bool IsEnvironmentName(absl::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// A script job: its program, and none of what only Stoke's own loop reads.
void ValidateCommandJob(const v1::JobSpec& spec, Problems& problems) {
  // An empty section ("data: {}") says nothing, and passes.
  for (const auto& [field, section] :
       {std::pair<const char*, const google::protobuf::Message*>{"model", &spec.model()},
        {"data", &spec.data()},
        {"optimizer", &spec.optimizer()},
        {"training", &spec.training()},
        {"eval", &spec.eval()},
        {"checkpoint", &spec.checkpoint()},
        {"metrics", &spec.metrics()}}) {
    if (section->ByteSizeLong() > 0) {
      problems.Add(
          Invalid(field,
                  "a script job (command) takes none: its program builds its own model, "
                  "data and loop; leave it out, or leave out command to train with Stoke's "
                  "loop"));
    }
  }
  const v1::CommandSpec& command = spec.command();
  if (command.argv_size() == 0 || command.argv(0).empty()) {
    problems.Add(
        Invalid("command.argv", "required: the program and its arguments ([python, train.py])"));
  }
  for (int i = 0; i < command.argv_size(); ++i) {
    if (command.argv(i).find('\0') != std::string::npos) {
      problems.Add(Invalid(absl::StrCat("command.argv[", i, "]"), "must not contain a NUL byte"));
    }
  }
  for (int i = 0; i < command.env_size(); ++i) {
    const std::string field = absl::StrCat("command.env[", i, "]");
    const std::string& entry = command.env(i);
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || !IsEnvironmentName(entry.substr(0, equals)) ||
        entry.find('\0') != std::string::npos) {
      problems.Add(
          Invalid(field, absl::StrCat("\"", absl::CEscape(entry.substr(0, 64)),
                                      "\": expected NAME=VALUE, NAME of letters, digits and _")));
    }
    if (SetByStoke(entry.substr(0, equals))) {
      problems.Add(Invalid(field, absl::StrCat(entry.substr(0, equals),
                                               " is set by Stoke for every rank (torchrun's "
                                               "variables, CUDA_VISIBLE_DEVICES, STOKE_*)")));
    }
  }
  if (!command.python().empty() && command.python()[0] != '/') {
    problems.Add(Invalid("command.python",
                         "an absolute path on the worker hosts: an interpreter "
                         "(/usr/bin/python3) or a virtual environment's folder"));
  }
  if (command.grace_seconds() > kMaxGraceSeconds) {
    problems.Add(Invalid("command.grace_seconds", absl::StrCat("at most ", kMaxGraceSeconds)));
  }
  return;
}

}  // namespace

std::vector<absl::Status> CheckJobSpec(const v1::JobSpec& spec) {
  Problems problems;
  if (spec.name().size() > kMaxNameLength) {
    problems.Add(Invalid("name", absl::StrCat("at most ", kMaxNameLength, " characters")));
  }
  CheckEveryField(spec, "", problems);
  if (spec.has_command()) {
    ValidateCommandJob(spec, problems);
    ValidateJobResources(spec, problems);
    return problems.Take();
  }
  ValidateData(spec.data(), problems);
  ValidateModel(spec.model(), problems);
  ValidateOptimizer(spec.optimizer(), problems);
  ValidateTraining(spec.training(), problems);
  if (spec.checkpoint().keep() > kMaxCheckpointsKept) {
    problems.Add(Invalid("checkpoint.keep",
                         absl::StrCat("at most ", kMaxCheckpointsKept,
                                      " (each is a copy of the model and its optimizer state, on "
                                      "storage every job shares)")));
  }
  if (spec.checkpoint().min_interval_seconds() > kMaxCheckpointIntervalSeconds) {
    problems.Add(Invalid("checkpoint.min_interval_seconds",
                         absl::StrCat("at most ", kMaxCheckpointIntervalSeconds, " (a week)")));
  }
  const v1::Compile compile = spec.training().compile();
  if ((compile == v1::COMPILE_ON || compile == v1::COMPILE_MAX_AUTOTUNE) &&
      !spec.model().has_python()) {
    problems.Add(Invalid("training.compile",
                         "applies to model.python only (Stoke's own models need no compiling)"));
  }
  ValidateJobResources(spec, problems);
  return problems.Take();
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) { return JoinProblems(CheckJobSpec(spec)); }

std::vector<absl::Status> CheckAgainstData(const v1::JobSpec& spec, const DataFacts& data) {
  Problems problems;
  // A model that cannot take this data at all: nothing else about it is worth saying.
  if (auto s = ModelTakesData(spec.model(), data, problems); !s.ok()) return {s};
  problems.Add(CheckModelSize(spec, data));
  const uint32_t batch = spec.training().batch_size_auto() ? 1
                         : spec.training().batch_size()    ? spec.training().batch_size()
                                                           : kDefaultBatchSize;
  const int64_t per_rank = data.train_samples / std::max<uint32_t>(1, spec.resources().gpus());
  if (batch > per_rank) {
    problems.Add(Invalid(
        "training.batch_size",
        absl::StrCat(batch, " is larger than the ", per_rank, " training samples ",
                     spec.resources().gpus() > 1 ? "each rank gets from " : "in ", data.source)));
  }
  return problems.Take();
}

absl::Status ValidateAgainstData(const v1::JobSpec& spec, const DataFacts& data) {
  return JoinProblems(CheckAgainstData(spec, data));
}

absl::Status JoinProblems(const std::vector<absl::Status>& problems) {
  if (problems.empty()) return absl::OkStatus();
  if (problems.size() == 1) return problems.front();
  std::vector<std::string> lines;
  lines.reserve(problems.size());
  for (const absl::Status& p : problems) lines.emplace_back(p.message());
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

void ApplyCommandDefaults(v1::JobSpec& spec) {
  auto* command = spec.mutable_command();
  if (!command->grace_seconds()) command->set_grace_seconds(defaults::kGraceSeconds);
  auto* r = spec.mutable_resources();
  if (!r->gpus()) r->set_gpus(defaults::kGpus);
  if (!spec.has_max_restarts()) spec.set_max_restarts(defaults::kMaxRestarts);
  if (r->gpus() > 1 && !spec.distributed().timeout_seconds()) {
    spec.mutable_distributed()->set_timeout_seconds(defaults::kDistributedTimeoutSeconds);
  }
}

void ApplyJobSpecDefaults(v1::JobSpec& spec, const DataFacts& data) {
  if (spec.data().has_synthetic()) {
    auto* s = spec.mutable_data()->mutable_synthetic();
    if (!s->samples_per_epoch())
      s->set_samples_per_epoch(static_cast<uint64_t>(data.train_samples));
    if (data.kind == DataFacts::Kind::kTokens) {
      if (!s->context()) s->set_context(static_cast<uint32_t>(data.sample[0]));
    } else {
      if (!s->num_classes()) s->set_num_classes(static_cast<uint32_t>(data.num_classes));
      if (data.kind == DataFacts::Kind::kVector && !s->features()) {
        s->set_features(static_cast<uint32_t>(data.sample[0]));
      }
    }
  }
  if (spec.data().has_tokens()) {
    auto* t = spec.mutable_data()->mutable_tokens();
    if (!t->vocab_size()) t->set_vocab_size(static_cast<uint32_t>(data.vocab_size));
    if (!t->context()) t->set_context(static_cast<uint32_t>(data.sample[0]));
  }
  auto* loader = spec.mutable_data()->mutable_loader();
  if (!loader->prefetch()) loader->set_prefetch(defaults::kLoaderPrefetch);
  if (!loader->has_pin_memory()) loader->set_pin_memory(defaults::kPinMemory);
  if (!loader->has_shuffle()) loader->set_shuffle(defaults::kShuffle);
  if (!spec.data().augment().has_normalize())
    spec.mutable_data()->mutable_augment()->set_normalize(defaults::kNormalize);

  auto* model = spec.mutable_model();
  const uint32_t classes = static_cast<uint32_t>(data.num_classes);
  if (model->has_mlp()) {
    auto* mlp = model->mutable_mlp();
    if (!mlp->input_dim()) mlp->set_input_dim(static_cast<uint32_t>(Product(data.sample)));
    if (!mlp->num_classes()) mlp->set_num_classes(classes);
    if (mlp->hidden_size() == 0) {
      mlp->add_hidden(static_cast<uint32_t>(defaults::DefaultMlpHidden(mlp->input_dim())));
    }
    if (mlp->activation() == v1::ACTIVATION_UNSPECIFIED) mlp->set_activation(v1::ACTIVATION_GELU);
  } else if (model->has_cnn()) {
    auto* cnn = model->mutable_cnn();
    if (cnn->channels_size() == 0) {
      for (int64_t c : defaults::kCnnChannels) cnn->add_channels(static_cast<uint32_t>(c));
    }
    if (!cnn->hidden()) cnn->set_hidden(defaults::kCnnHidden);
    if (!cnn->num_classes()) cnn->set_num_classes(classes);
  } else if (model->has_resnet()) {
    auto* resnet = model->mutable_resnet();
    if (!resnet->depth()) resnet->set_depth(defaults::kResNetDepth);
    if (resnet->stem() == v1::RESNET_STEM_UNSPECIFIED) resnet->set_stem(v1::RESNET_STEM_AUTO);
    if (!resnet->num_classes()) resnet->set_num_classes(classes);
  } else if (model->has_gpt()) {
    auto* gpt = model->mutable_gpt();
    if (!gpt->layers()) gpt->set_layers(defaults::kGptLayers);
    if (!gpt->heads()) gpt->set_heads(defaults::kGptHeads);
    if (!gpt->width()) gpt->set_width(defaults::kGptWidth);
    if (!gpt->context()) gpt->set_context(static_cast<uint32_t>(data.sample[0]));
    if (!gpt->vocab_size()) gpt->set_vocab_size(static_cast<uint32_t>(data.vocab_size));
  } else if (model->has_torchscript()) {
    auto* ts = model->mutable_torchscript();
    if (ts->loss() == v1::LOSS_UNSPECIFIED) ts->set_loss(v1::LOSS_CROSS_ENTROPY);
  } else if (model->has_python()) {
    auto* py = model->mutable_python();
    if (py->loss() == v1::LOSS_UNSPECIFIED) py->set_loss(v1::LOSS_CROSS_ENTROPY);
    if (py->factory().empty()) py->set_factory("build_model");
  }
  if (spec.name().empty()) {
    const auto* field = v1::ModelSpec::descriptor()->FindFieldByNumber(model->kind_case());
    spec.set_name(field ? field->name() : "job");
  }

  auto* opt = spec.mutable_optimizer();
  if (opt->kind_case() == v1::OptimizerSpec::KIND_NOT_SET) opt->mutable_adamw();
  if (opt->lr() == 0) opt->set_lr(defaults::kLearningRate);
  if (opt->has_adamw()) {
    auto* a = opt->mutable_adamw();
    if (!a->has_beta1()) a->set_beta1(defaults::kAdamBeta1);
    if (!a->has_beta2()) a->set_beta2(defaults::kAdamBeta2);
    if (!a->has_eps()) a->set_eps(defaults::kAdamEps);
    if (a->implementation() == v1::ADAM_W_IMPLEMENTATION_UNSPECIFIED) {
      a->set_implementation(v1::ADAM_W_IMPLEMENTATION_AUTO);
    }
  }
  if (opt->schedule() == v1::LR_SCHEDULE_UNSPECIFIED) opt->set_schedule(v1::LR_SCHEDULE_CONSTANT);
  if (!opt->has_min_lr_ratio()) opt->set_min_lr_ratio(defaults::kMinLrRatio);

  auto* t = spec.mutable_training();
  if (!t->batch_size() && !t->batch_size_auto()) t->set_batch_size(kDefaultBatchSize);
  if (!t->grad_accum_steps()) t->set_grad_accum_steps(defaults::kGradAccumSteps);
  if (t->precision() == v1::PRECISION_UNSPECIFIED) t->set_precision(v1::PRECISION_AUTO);
  if (model->has_python() && t->compile() == v1::COMPILE_UNSPECIFIED) {
    t->set_compile(v1::COMPILE_AUTO);
  }
  if (!t->seed()) t->set_seed(defaults::kSeed);

  auto* r = spec.mutable_resources();
  if (!r->gpus()) r->set_gpus(defaults::kGpus);
  if (!spec.metrics().interval_steps())
    spec.mutable_metrics()->set_interval_steps(defaults::kMetricsIntervalSteps);
  if (!spec.checkpoint().interval_steps())
    spec.mutable_checkpoint()->set_interval_steps(defaults::kCheckpointIntervalSteps);
  if (!spec.checkpoint().keep()) spec.mutable_checkpoint()->set_keep(defaults::kCheckpointKeep);
  if (!spec.has_max_restarts()) spec.set_max_restarts(defaults::kMaxRestarts);
  if (r->gpus() > 1) {
    auto* d = spec.mutable_distributed();
    if (!d->timeout_seconds()) d->set_timeout_seconds(defaults::kDistributedTimeoutSeconds);
    if (!d->bucket_mb()) d->set_bucket_mb(defaults::kBucketMb);
  }
}

}  // namespace stoke::spec
