// Fields a spec leaves unset keep the TrainTask's defaults, which are the job defaults
// (spec/job_defaults.h): the coordinator fills a submitted spec from the same table.
#include "worker/link/task_translation.h"

#include <google/protobuf/util/json_util.h>

#include <variant>

#include "absl/strings/str_cat.h"

namespace stoke::worker {
namespace {

std::vector<int64_t> Dims(const google::protobuf::RepeatedField<uint32_t>& dims) {
  return std::vector<int64_t>(dims.begin(), dims.end());
}

absl::StatusOr<ModelConfig> ModelFrom(const v1::ModelSpec& spec) {
  switch (spec.kind_case()) {
    case v1::ModelSpec::kMlp: {
      const auto& m = spec.mlp();
      MlpConfig mlp;
      mlp.input_dim = m.input_dim();
      mlp.num_classes = m.num_classes();
      mlp.hidden = Dims(m.hidden());
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
      return ModelConfig{mlp};
    }
    case v1::ModelSpec::kCnn: {
      CnnConfig cnn;
      if (spec.cnn().channels_size() > 0) cnn.channels = Dims(spec.cnn().channels());
      if (spec.cnn().hidden() > 0) cnn.hidden = spec.cnn().hidden();
      cnn.dropout = spec.cnn().dropout();
      cnn.num_classes = spec.cnn().num_classes();
      return ModelConfig{cnn};
    }
    case v1::ModelSpec::kResnet: {
      ResNetConfig resnet;
      if (spec.resnet().depth() > 0) resnet.depth = static_cast<int>(spec.resnet().depth());
      if (spec.resnet().stem() == v1::RESNET_STEM_SMALL) resnet.small_stem = true;
      if (spec.resnet().stem() == v1::RESNET_STEM_IMAGENET) resnet.small_stem = false;
      resnet.num_classes = spec.resnet().num_classes();
      return ModelConfig{resnet};
    }
    case v1::ModelSpec::kGpt: {
      const auto& g = spec.gpt();
      GptConfig gpt;
      if (g.layers() > 0) gpt.layers = g.layers();
      if (g.heads() > 0) gpt.heads = g.heads();
      if (g.width() > 0) gpt.width = g.width();
      gpt.context = g.context();
      gpt.vocab_size = g.vocab_size();
      gpt.dropout = g.dropout();
      return ModelConfig{gpt};
    }
    case v1::ModelSpec::kTorchscript: {
      const auto& ts = spec.torchscript();
      TorchScriptConfig config;
      config.path = ts.path();
      config.loss = ts.loss() == v1::LOSS_MSE ? LossKind::kMse : LossKind::kCrossEntropy;
      config.input_shape = Dims(ts.input_shape());
      config.target_shape = Dims(ts.target_shape());
      config.num_classes = ts.num_classes();
      return ModelConfig{config};
    }
    case v1::ModelSpec::kPython: {
      const auto& py = spec.python();
      PythonConfig config;
      config.module = py.module();
      if (!py.factory().empty()) config.factory = py.factory();
      if (py.has_args()) {
        // Plain JSON: json.loads in the trainer gives the factory its keyword arguments
        // (whole numbers are printed without a fraction, so they arrive as ints).
        config.args_json.clear();  // it would be appended to
        if (!google::protobuf::util::MessageToJsonString(py.args(), &config.args_json).ok()) {
          return absl::InvalidArgumentError("model.python.args: not a mapping of plain values");
        }
      }
      config.loss = py.loss() == v1::LOSS_MSE     ? LossKind::kMse
                    : py.loss() == v1::LOSS_MODEL ? LossKind::kModel
                                                  : LossKind::kCrossEntropy;
      config.input_shape = Dims(py.input_shape());
      config.target_shape = Dims(py.target_shape());
      config.num_classes = py.num_classes();
      config.code_sha256 = py.code_sha256();
      return ModelConfig{config};
    }
    default:
      return absl::InvalidArgumentError("model: this worker knows no such model kind");
  }
}

absl::StatusOr<DataConfig> DataFrom(const v1::DataSpec& spec) {
  DataConfig data;
  switch (spec.kind_case()) {
    case v1::DataSpec::kSynthetic: {
      const auto& s = spec.synthetic();
      SyntheticDataConfig c;
      if (s.features() > 0) c.features = s.features();
      if (s.num_classes() > 0) c.num_classes = s.num_classes();
      c.samples_per_epoch = static_cast<int64_t>(s.samples_per_epoch());
      c.image_shape = Dims(s.image_shape());
      c.vocab_size = s.vocab_size();
      c.context = s.context();
      if (c.samples_per_epoch <= 0) {
        return absl::InvalidArgumentError("data.synthetic.samples_per_epoch: must be set");
      }
      data.source = c;
      break;
    }
    case v1::DataSpec::kMnist:
      data.source = MnistDataConfig{spec.mnist().path()};
      break;
    case v1::DataSpec::kCifar10:
      data.source = Cifar10DataConfig{spec.cifar10().path()};
      break;
    case v1::DataSpec::kTokens: {
      const auto& t = spec.tokens();
      TokenDataConfig c;
      c.train_path = t.train_path();
      c.val_path = t.val_path();
      if (t.vocab_size() > 0) c.vocab_size = t.vocab_size();
      if (t.context() > 0) c.context = t.context();
      c.samples_per_epoch = static_cast<int64_t>(t.samples_per_epoch());
      data.source = c;
      break;
    }
    case v1::DataSpec::kArrays: {
      const auto& a = spec.arrays();
      ArrayDataConfig c;
      c.inputs = a.inputs();
      c.targets = a.targets();
      c.val_inputs = a.val_inputs();
      c.val_targets = a.val_targets();
      if (a.has_val_fraction()) c.val_fraction = a.val_fraction();
      data.source = c;
      break;
    }
    case v1::DataSpec::kImages: {
      const auto& i = spec.images();
      ImageDataConfig c;
      c.path = i.path();
      c.manifest = i.manifest();
      c.val_path = i.val_path();
      c.val_manifest = i.val_manifest();
      if (i.has_val_fraction()) c.val_fraction = i.val_fraction();
      if (i.size() > 0) c.size = i.size();
      if (i.channels() > 0) c.channels = static_cast<int>(i.channels());
      if (i.has_min_crop_area()) c.min_crop_area = i.min_crop_area();
      data.source = c;
      break;
    }
    case v1::DataSpec::kShards: {
      const auto& s = spec.shards();
      ShardDataConfig c;
      c.urls = s.urls();
      c.val_urls = s.val_urls();
      if (s.has_val_fraction()) c.val_fraction = s.val_fraction();
      if (s.shuffle_buffer() > 0) c.shuffle_buffer = s.shuffle_buffer();
      if (s.size() > 0) c.size = s.size();
      if (s.channels() > 0) c.channels = static_cast<int>(s.channels());
      if (s.has_min_crop_area()) c.min_crop_area = s.min_crop_area();
      if (s.text_length() > 0) c.text_length = s.text_length();
      data.source = c;
      break;
    }
    default:
      return absl::InvalidArgumentError("data: this worker knows no such data kind");
  }
  const auto& loader = spec.loader();
  data.loader.threads = static_cast<int>(loader.threads());
  if (loader.prefetch() > 0) data.loader.prefetch = static_cast<int>(loader.prefetch());
  if (loader.has_pin_memory()) data.loader.pin_memory = loader.pin_memory();
  if (loader.has_shuffle()) data.loader.shuffle = loader.shuffle();
  data.augment.crop_padding = spec.augment().crop_padding();
  data.augment.horizontal_flip = spec.augment().horizontal_flip();
  if (spec.augment().has_normalize()) data.augment.normalize = spec.augment().normalize();
  if (spec.has_max_bad_fraction()) data.max_bad_fraction = spec.max_bad_fraction();
  return data;
}

OptimizerConfig OptimizerFrom(const v1::OptimizerSpec& spec) {
  OptimizerConfig c;
  if (spec.lr() > 0) c.lr = spec.lr();
  c.weight_decay = spec.weight_decay();
  if (spec.has_sgd()) {
    c.kind = SgdConfig{spec.sgd().momentum(), spec.sgd().nesterov()};
  } else {
    AdamWConfig a;
    if (spec.adamw().has_beta1()) a.beta1 = spec.adamw().beta1();
    if (spec.adamw().has_beta2()) a.beta2 = spec.adamw().beta2();
    if (spec.adamw().has_eps()) a.eps = spec.adamw().eps();
    switch (spec.adamw().implementation()) {
      case v1::ADAM_W_IMPLEMENTATION_FUSED:
        a.route = AdamWRoute::kFused;
        break;
      case v1::ADAM_W_IMPLEMENTATION_FOREACH:
        a.route = AdamWRoute::kForeach;
        break;
      case v1::ADAM_W_IMPLEMENTATION_PER_PARAMETER:
        a.route = AdamWRoute::kPerParameter;
        break;
      default:
        a.route = AdamWRoute::kAuto;
    }
    c.kind = a;
  }
  c.warmup_steps = spec.warmup_steps();
  c.schedule =
      spec.schedule() == v1::LR_SCHEDULE_COSINE ? LrSchedule::kCosine : LrSchedule::kConstant;
  if (spec.has_min_lr_ratio()) c.min_lr_ratio = spec.min_lr_ratio();
  c.grad_clip_norm = spec.grad_clip_norm();
  return c;
}

Precision PrecisionFrom(v1::Precision p) {
  switch (p) {
    case v1::PRECISION_FP32:
      return Precision::kFp32;
    case v1::PRECISION_BF16:
      return Precision::kBf16;
    case v1::PRECISION_FP16:
      return Precision::kFp16;
    default:
      return Precision::kAuto;
  }
}

CompileMode CompileFrom(v1::Compile c) {
  switch (c) {
    case v1::COMPILE_OFF:
      return CompileMode::kOff;
    case v1::COMPILE_ON:
      return CompileMode::kOn;
    case v1::COMPILE_MAX_AUTOTUNE:
      return CompileMode::kMaxAutotune;
    default:
      return CompileMode::kAuto;
  }
}

Toggle ToggleFrom(v1::Switch s) {
  switch (s) {
    case v1::SWITCH_ON:
      return Toggle::kOn;
    case v1::SWITCH_OFF:
      return Toggle::kOff;
    default:
      return Toggle::kDefault;
  }
}

}  // namespace

absl::StatusOr<TrainTask> TaskFromAssignment(const v1::Assignment& a) {
  TrainTask task;
  task.job_id = a.job_id();
  task.attempt = a.attempt();
  task.rank = static_cast<int>(a.rank());
  task.world_size = static_cast<int>(std::max<uint32_t>(1, a.world_size()));
  const v1::JobSpec& spec = a.spec();
  task.distributed.rendezvous_address = a.rendezvous_address();
  task.distributed.advertise_address = a.advertise_address();
  if (spec.distributed().timeout_seconds() > 0) {
    task.distributed.timeout_seconds = spec.distributed().timeout_seconds();
  }
  if (spec.distributed().bucket_mb() > 0) {
    task.distributed.bucket_bytes = static_cast<int64_t>(spec.distributed().bucket_mb()) << 20;
  }
  task.job_dir = a.job_dir();
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
  if (t.seed() > 0) task.training.seed = t.seed();
  task.training.batch_size_auto = t.batch_size_auto();
  task.training.effective_batch_size = t.effective_batch_size();
  task.training.cuda_graph = ToggleFrom(t.cuda_graph());
  task.training.activation_checkpointing = ToggleFrom(t.activation_checkpointing());
  task.training.tf32 = ToggleFrom(t.tf32());
  task.training.channels_last = ToggleFrom(t.channels_last());
  task.training.cudnn_benchmark = ToggleFrom(t.cudnn_benchmark());
  task.training.fused_kernels = ToggleFrom(t.fused_kernels());
  task.training.compile = CompileFrom(t.compile());
  if (t.loss_scale().initial() > 0) task.training.loss_scale.initial = t.loss_scale().initial();
  if (t.loss_scale().growth_interval() > 0) {
    task.training.loss_scale.growth_interval = t.loss_scale().growth_interval();
  }
  if (spec.metrics().interval_steps() > 0) {
    task.training.metrics_interval_steps = spec.metrics().interval_steps();
  }
  task.eval.interval_steps = spec.eval().interval_steps();
  task.eval.batches = spec.eval().batches();
  if (spec.checkpoint().interval_steps() > 0) {
    task.checkpoint.interval_steps = spec.checkpoint().interval_steps();
  }
  if (spec.checkpoint().keep() > 0) task.checkpoint.keep = spec.checkpoint().keep();
  task.checkpoint.min_interval_seconds = spec.checkpoint().min_interval_seconds();
  if (task.training.batch_size <= 0 && !task.training.batch_size_auto) {
    return absl::InvalidArgumentError("training.batch_size: must be set");
  }
  task.data_roots.assign(a.data_roots().begin(), a.data_roots().end());
  const bool names_files =
      spec.model().has_torchscript() || !std::holds_alternative<SyntheticDataConfig>(data->source);
  if (names_files && task.data_roots.empty()) {
    // Fail closed: without the roots the worker could not re-check the paths it opens.
    return absl::FailedPreconditionError(
        "the assignment came without the coordinator's data roots, so the files this spec "
        "names cannot be checked; run a coordinator of the same version as the worker");
  }
  if (task.world_size > 1 && task.distributed.rendezvous_address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("assignment of rank ", task.rank, " of ",
                                                   task.world_size,
                                                   " came without a rendezvous address"));
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
  out.set_data_wait_ratio(s.data_wait_ratio);
  out.set_comm_wait_ratio(s.comm_wait_ratio);
  out.set_step_seconds(s.step_seconds);
  out.set_tokens_per_second(s.tokens_per_second);
  out.set_achieved_flops(s.achieved_flops);
  out.set_mfu(s.mfu);
  out.set_memory_allocated_bytes(s.memory_allocated_bytes);
  out.set_memory_reserved_bytes(s.memory_reserved_bytes);
  out.set_memory_peak_bytes(s.memory_peak_bytes);
  out.set_allocator_retries(s.allocator_retries);
  out.set_skipped_steps(s.skipped_steps);
  out.set_samples_skipped(s.samples_skipped);
  out.set_loss_scale(s.loss_scale);
  out.mutable_scalars()->insert(s.scalars.begin(), s.scalars.end());
  if (s.eval) {
    auto* eval = out.mutable_eval();
    eval->set_loss(s.eval->loss);
    eval->set_accuracy(s.eval->accuracy);
    eval->set_perplexity(s.eval->perplexity);
    eval->set_samples(s.eval->samples);
  }
  return out;
}

MetricSample FromProto(const v1::MetricSample& s) {
  MetricSample out;
  out.step = s.step();
  out.total_steps = s.total_steps();
  out.epoch = s.epoch();
  out.loss = s.loss();
  out.samples_per_second = s.samples_per_second();
  out.learning_rate = s.learning_rate();
  out.elapsed_seconds = s.elapsed_seconds();
  out.data_wait_ratio = s.data_wait_ratio();
  out.comm_wait_ratio = s.comm_wait_ratio();
  out.step_seconds = s.step_seconds();
  out.tokens_per_second = s.tokens_per_second();
  out.achieved_flops = s.achieved_flops();
  out.mfu = s.mfu();
  out.memory_allocated_bytes = s.memory_allocated_bytes();
  out.memory_reserved_bytes = s.memory_reserved_bytes();
  out.memory_peak_bytes = s.memory_peak_bytes();
  out.allocator_retries = s.allocator_retries();
  out.skipped_steps = s.skipped_steps();
  out.samples_skipped = s.samples_skipped();
  out.loss_scale = s.loss_scale();
  out.scalars.insert(s.scalars().begin(), s.scalars().end());
  if (s.has_eval()) {
    EvalResult eval;
    eval.loss = s.eval().loss();
    eval.accuracy = s.eval().accuracy();
    eval.perplexity = s.eval().perplexity();
    eval.samples = s.eval().samples();
    out.eval = eval;
  }
  return out;
}

v1::WorkerStartup ToProto(const StartupTimes& times) {
  v1::WorkerStartup out;
  out.set_data_seconds(times.data_seconds);
  out.set_model_seconds(times.model_seconds);
  out.set_batch_search_seconds(times.batch_search_seconds);
  out.set_first_step_seconds(times.first_step_seconds);
  out.set_compile_seconds(times.compile_seconds);
  out.set_process_seconds(times.process_seconds);
  return out;
}

StartupTimes FromProto(const v1::WorkerStartup& startup) {
  StartupTimes out;
  out.data_seconds = startup.data_seconds();
  out.model_seconds = startup.model_seconds();
  out.batch_search_seconds = startup.batch_search_seconds();
  out.first_step_seconds = startup.first_step_seconds();
  out.compile_seconds = startup.compile_seconds();
  out.process_seconds = startup.process_seconds();
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

v1::DeviceStats ToProto(const DeviceStats& stats) {
  v1::DeviceStats out;
  out.set_utilization(stats.utilization);
  out.set_memory_used_bytes(stats.memory_used_bytes);
  out.set_memory_total_bytes(stats.memory_total_bytes);
  if (stats.sm_clock_hz) out.set_sm_clock_hz(*stats.sm_clock_hz);
  if (stats.power_watts) out.set_power_watts(*stats.power_watts);
  if (stats.temperature_celsius) out.set_temperature_celsius(*stats.temperature_celsius);
  out.set_source(stats.source);
  return out;
}

v1::TaskOutcome ToProto(TrainOutcome::Kind kind) {
  switch (kind) {
    case TrainOutcome::Kind::kSucceeded:
      return v1::TASK_OUTCOME_SUCCEEDED;
    case TrainOutcome::Kind::kCancelled:
      return v1::TASK_OUTCOME_CANCELLED;
    case TrainOutcome::Kind::kPreempted:
      return v1::TASK_OUTCOME_PREEMPTED;
    default:
      return v1::TASK_OUTCOME_FAILED;
  }
}

}  // namespace stoke::worker
