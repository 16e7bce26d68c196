#include "server/api/job_spec_rules.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

constexpr uint32_t kMaxBatchSize = 1u << 20;
constexpr uint32_t kMaxAccumSteps = 4096;
constexpr uint32_t kMaxDevices = 4096;
constexpr uint32_t kMaxRestarts = 100;
constexpr uint32_t kMaxLayerWidth = 1u << 20;
constexpr size_t kMaxNameLength = 200;

constexpr uint32_t kDefaultFeatures = 256;
constexpr uint32_t kDefaultClasses = 10;
constexpr uint64_t kDefaultSamplesPerEpoch = 65536;

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

// Features and classes the data provides (after defaults), for checking the model.
struct DataShape {
  uint32_t features = 0;
  uint32_t classes = 0;
};

DataShape ShapeOf(const v1::DataSpec& data) {
  DataShape shape;
  if (data.has_synthetic()) {
    shape.features = data.synthetic().features() ? data.synthetic().features() : kDefaultFeatures;
    shape.classes =
        data.synthetic().num_classes() ? data.synthetic().num_classes() : kDefaultClasses;
  }
  return shape;
}

absl::Status ValidateData(const v1::DataSpec& data) {
  switch (data.kind_case()) {
    case v1::DataSpec::kSynthetic: {
      const auto& s = data.synthetic();
      if (s.features() > kMaxLayerWidth) {
        return Invalid("data.synthetic.features", absl::StrCat("at most ", kMaxLayerWidth));
      }
      if (s.num_classes() == 1) return Invalid("data.synthetic.num_classes", "must be at least 2");
      if (s.num_classes() > kMaxLayerWidth) {
        return Invalid("data.synthetic.num_classes", absl::StrCat("at most ", kMaxLayerWidth));
      }
      return absl::OkStatus();
    }
    default:
      return Invalid("data", "required: set one of synthetic");
  }
}

absl::Status ValidateModel(const v1::ModelSpec& model, const DataShape& shape) {
  switch (model.kind_case()) {
    case v1::ModelSpec::kMlp: {
      const auto& mlp = model.mlp();
      if (mlp.input_dim() != 0 && mlp.input_dim() != shape.features) {
        return Invalid("model.mlp.input_dim",
                       absl::StrCat(mlp.input_dim(), " does not match the data's ", shape.features,
                                    " features (leave it out to take it from the data)"));
      }
      if (mlp.num_classes() != 0 && mlp.num_classes() != shape.classes) {
        return Invalid("model.mlp.num_classes",
                       absl::StrCat(mlp.num_classes(), " does not match the data's ", shape.classes,
                                    " classes (leave it out to take it from the data)"));
      }
      for (int i = 0; i < mlp.hidden_size(); ++i) {
        if (mlp.hidden(i) == 0 || mlp.hidden(i) > kMaxLayerWidth) {
          return Invalid(absl::StrCat("model.mlp.hidden[", i, "]"),
                         absl::StrCat("must be between 1 and ", kMaxLayerWidth));
        }
      }
      if (!(mlp.dropout() >= 0.0f && mlp.dropout() < 1.0f)) {
        return Invalid("model.mlp.dropout", "must be in [0, 1)");
      }
      return absl::OkStatus();
    }
    default:
      return Invalid("model", "required: set one of mlp");
  }
}

absl::Status ValidateOptimizer(const v1::OptimizerSpec& opt) {
  if (!std::isfinite(opt.lr()) || opt.lr() < 0) {
    return Invalid("optimizer.lr", "must be a positive number");
  }
  if (!std::isfinite(opt.weight_decay()) || opt.weight_decay() < 0) {
    return Invalid("optimizer.weight_decay", "must be zero or positive");
  }
  if (opt.has_adamw()) {
    const auto& a = opt.adamw();
    if (a.has_beta1() && !(a.beta1() >= 0 && a.beta1() < 1)) {
      return Invalid("optimizer.adamw.beta1", "must be in [0, 1)");
    }
    if (a.has_beta2() && !(a.beta2() >= 0 && a.beta2() < 1)) {
      return Invalid("optimizer.adamw.beta2", "must be in [0, 1)");
    }
    if (a.has_eps() && !(a.eps() > 0 && std::isfinite(a.eps()))) {
      return Invalid("optimizer.adamw.eps", "must be a positive number");
    }
  }
  if (opt.has_sgd()) {
    if (!(opt.sgd().momentum() >= 0 && opt.sgd().momentum() < 1)) {
      return Invalid("optimizer.sgd.momentum", "must be in [0, 1)");
    }
    if (opt.sgd().nesterov() && opt.sgd().momentum() == 0) {
      return Invalid("optimizer.sgd.nesterov", "needs a momentum above 0");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTraining(const v1::TrainingSpec& t) {
  switch (t.length_case()) {
    case v1::TrainingSpec::kSteps:
      if (t.steps() == 0) return Invalid("training.steps", "must be at least 1");
      break;
    case v1::TrainingSpec::kEpochs:
      if (t.epochs() == 0) return Invalid("training.epochs", "must be at least 1");
      break;
    default:
      return Invalid("training", "set steps or epochs");
  }
  if (t.batch_size() > kMaxBatchSize) {
    return Invalid("training.batch_size", absl::StrCat("at most ", kMaxBatchSize));
  }
  if (t.grad_accum_steps() > kMaxAccumSteps) {
    return Invalid("training.grad_accum_steps", absl::StrCat("at most ", kMaxAccumSteps));
  }
  if (!v1::Precision_IsValid(t.precision())) {
    return Invalid("training.precision", "unknown value");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (spec.name().size() > kMaxNameLength) {
    return Invalid("name", absl::StrCat("at most ", kMaxNameLength, " characters"));
  }
  if (auto s = ValidateData(spec.data()); !s.ok()) return s;
  if (auto s = ValidateModel(spec.model(), ShapeOf(spec.data())); !s.ok()) return s;
  if (auto s = ValidateOptimizer(spec.optimizer()); !s.ok()) return s;
  if (auto s = ValidateTraining(spec.training()); !s.ok()) return s;
  if (spec.resources().gpus() > kMaxDevices) {
    return Invalid("resources.gpus", absl::StrCat("at most ", kMaxDevices));
  }
  if (!v1::DeviceKind_IsValid(spec.resources().device())) {
    return Invalid("resources.device", "unknown value");
  }
  if (spec.max_restarts() > kMaxRestarts) {
    return Invalid("max_restarts", absl::StrCat("at most ", kMaxRestarts));
  }
  return absl::OkStatus();
}

void ApplyJobSpecDefaults(v1::JobSpec& spec) {
  if (spec.data().has_synthetic()) {
    auto* s = spec.mutable_data()->mutable_synthetic();
    if (!s->features()) s->set_features(kDefaultFeatures);
    if (!s->num_classes()) s->set_num_classes(kDefaultClasses);
    if (!s->samples_per_epoch()) s->set_samples_per_epoch(kDefaultSamplesPerEpoch);
  }
  const DataShape shape = ShapeOf(spec.data());
  if (spec.model().has_mlp()) {
    auto* mlp = spec.mutable_model()->mutable_mlp();
    if (!mlp->input_dim()) mlp->set_input_dim(shape.features);
    if (!mlp->num_classes()) mlp->set_num_classes(shape.classes);
    if (mlp->hidden_size() == 0) mlp->add_hidden(4 * mlp->input_dim());
    if (mlp->activation() == v1::ACTIVATION_UNSPECIFIED) mlp->set_activation(v1::ACTIVATION_GELU);
  }
  if (spec.name().empty()) spec.set_name(spec.model().has_mlp() ? "mlp" : "job");

  auto* opt = spec.mutable_optimizer();
  if (opt->kind_case() == v1::OptimizerSpec::KIND_NOT_SET) opt->mutable_adamw();
  if (opt->lr() == 0) opt->set_lr(1e-3);
  if (opt->has_adamw()) {
    auto* a = opt->mutable_adamw();
    if (!a->has_beta1()) a->set_beta1(0.9);
    if (!a->has_beta2()) a->set_beta2(0.999);
    if (!a->has_eps()) a->set_eps(1e-8);
  }

  auto* t = spec.mutable_training();
  if (!t->batch_size()) t->set_batch_size(256);
  if (!t->grad_accum_steps()) t->set_grad_accum_steps(1);
  if (t->precision() == v1::PRECISION_UNSPECIFIED) t->set_precision(v1::PRECISION_AUTO);
  if (!t->seed()) t->set_seed(1);

  auto* r = spec.mutable_resources();
  if (!r->gpus()) r->set_gpus(1);
  if (!spec.metrics().interval_steps()) spec.mutable_metrics()->set_interval_steps(50);
  if (!spec.has_max_restarts()) spec.set_max_restarts(3);
}

}  // namespace stoke::server
