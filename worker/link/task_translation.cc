#include "worker/link/task_translation.h"

#include "absl/strings/str_cat.h"

namespace stoke::worker {
namespace {

absl::StatusOr<ModelConfig> ModelFrom(const v1::ModelSpec& spec) {
  switch (spec.kind_case()) {
    case v1::ModelSpec::kMlp: {
      const auto& m = spec.mlp();
      MlpConfig mlp;
      mlp.input_dim = m.input_dim();
      mlp.num_classes = m.num_classes();
      for (uint32_t width : m.hidden()) mlp.hidden.push_back(width);
      switch (m.activation()) {
        case v1::ACTIVATION_RELU:
          mlp.activation = Activation::kRelu;
          break;
        case v1::ACTIVATION_TANH:
          mlp.activation = Activation::kTanh;
          break;
        default:
          mlp.activation = Activation::kGelu;
      }
      mlp.dropout = m.dropout();
      if (mlp.input_dim <= 0 || mlp.num_classes <= 0) {
        return absl::InvalidArgumentError("model.mlp: input_dim and num_classes must be set");
      }
      return ModelConfig{mlp};
    }
    default:
      return absl::InvalidArgumentError("model: this worker knows no such model kind");
  }
}

absl::StatusOr<DataConfig> DataFrom(const v1::DataSpec& spec) {
  switch (spec.kind_case()) {
    case v1::DataSpec::kSynthetic: {
      SyntheticDataConfig c;
      c.features = spec.synthetic().features();
      c.num_classes = spec.synthetic().num_classes();
      c.samples_per_epoch = static_cast<int64_t>(spec.synthetic().samples_per_epoch());
      if (c.features <= 0 || c.num_classes < 2 || c.samples_per_epoch <= 0) {
        return absl::InvalidArgumentError(
            "data.synthetic: features, num_classes and samples_per_epoch must be set");
      }
      DataConfig data;
      data.source = c;
      return data;
    }
    default:
      return absl::InvalidArgumentError("data: this worker knows no such data kind");
  }
}

OptimizerConfig OptimizerFrom(const v1::OptimizerSpec& spec) {
  OptimizerConfig c;
  c.lr = spec.lr();
  c.weight_decay = spec.weight_decay();
  if (spec.has_sgd()) {
    c.kind = SgdConfig{spec.sgd().momentum(), spec.sgd().nesterov()};
  } else {
    AdamWConfig a;
    if (spec.adamw().has_beta1()) a.beta1 = spec.adamw().beta1();
    if (spec.adamw().has_beta2()) a.beta2 = spec.adamw().beta2();
    if (spec.adamw().has_eps()) a.eps = spec.adamw().eps();
    c.kind = a;
  }
  return c;
}

Precision PrecisionFrom(v1::Precision p) {
  switch (p) {
    case v1::PRECISION_FP32:
      return Precision::kFp32;
    case v1::PRECISION_BF16:
      return Precision::kBf16;
    default:
      return Precision::kAuto;
  }
}

}  // namespace

absl::StatusOr<TrainTask> TaskFromAssignment(const v1::Assignment& a) {
  TrainTask task;
  task.job_id = a.job_id();
  task.attempt = a.attempt();
  task.rank = static_cast<int>(a.rank());
  task.world_size = static_cast<int>(std::max<uint32_t>(1, a.world_size()));
  task.rendezvous_address = a.rendezvous_address();
  task.job_dir = a.job_dir();
  const v1::JobSpec& spec = a.spec();
  task.name = spec.name();
  auto model = ModelFrom(spec.model());
  if (!model.ok()) return model.status();
  task.model = *model;
  auto data = DataFrom(spec.data());
  if (!data.ok()) return data.status();
  task.data = *data;
  task.optimizer = OptimizerFrom(spec.optimizer());
  const auto& t = spec.training();
  task.training.steps = t.has_steps() ? t.steps() : 0;
  task.training.epochs = t.has_epochs() ? t.epochs() : 0;
  if (task.training.steps == 0 && task.training.epochs == 0) {
    return absl::InvalidArgumentError("training: set steps or epochs");
  }
  task.training.batch_size = t.batch_size();
  task.training.precision = PrecisionFrom(t.precision());
  task.training.grad_accum_steps = std::max<uint32_t>(1, t.grad_accum_steps());
  task.training.seed = t.seed();
  task.training.metrics_interval_steps = spec.metrics().interval_steps();
  if (task.training.batch_size <= 0) {
    return absl::InvalidArgumentError("training.batch_size: must be set");
  }
  if (task.world_size > 1) {
    return absl::UnimplementedError(
        absl::StrCat("resources.gpus: ", task.world_size,
                     " devices asked for, but this worker runs single-device jobs only so far"));
  }
  return task;
}

v1::MetricSample ToProto(const MetricSample& s) {
  v1::MetricSample out;
  out.set_step(s.step);
  out.set_total_steps(s.total_steps);
  out.set_epoch(s.epoch);
  out.set_loss(s.loss);
  out.set_samples_per_second(s.samples_per_second);
  out.set_learning_rate(s.learning_rate);
  out.set_elapsed_seconds(s.elapsed_seconds);
  return out;
}

v1::Device ToProto(const DeviceInfo& info) {
  v1::Device out;
  out.set_type(info.device.kind == DeviceKind::kCuda ? v1::DEVICE_TYPE_CUDA : v1::DEVICE_TYPE_CPU);
  out.set_index(static_cast<uint32_t>(info.device.index));
  out.set_name(info.name);
  out.set_uuid(info.uuid);
  out.set_memory_total_bytes(info.memory_total_bytes);
  return out;
}

v1::TaskOutcome ToProto(TrainOutcome::Kind kind) {
  switch (kind) {
    case TrainOutcome::Kind::kSucceeded:
      return v1::TASK_OUTCOME_SUCCEEDED;
    case TrainOutcome::Kind::kCancelled:
      return v1::TASK_OUTCOME_CANCELLED;
    default:
      return v1::TASK_OUTCOME_FAILED;
  }
}

}  // namespace stoke::worker
