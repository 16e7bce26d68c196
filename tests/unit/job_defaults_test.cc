// A TrainTask built directly (as tests and stoke-bench's callers do) equals the one a job
// submitted with the same fields reaches the worker as: both take their unset fields from
// the one table of job defaults (spec/job_defaults.h). The submitted side runs the
// coordinator's rules (validation, data inspection, defaults) and the worker link's
// translation, as a real submission does.
#include <gtest/gtest.h>

#include <tuple>
#include <variant>

#include "spec/data_checks.h"
#include "spec/job_spec_rules.h"
#include "tests/support/small_tasks.h"
#include "worker/link/task_translation.h"

namespace stoke::worker {
namespace {

// Each plain struct as a tuple of its fields, so that a mismatch prints both sides.
auto Fields(const MlpConfig& c) {
  return std::tie(c.input_dim, c.hidden, c.num_classes, c.activation, c.dropout);
}
auto Fields(const GptConfig& c) {
  return std::tie(c.layers, c.heads, c.width, c.context, c.vocab_size, c.dropout);
}
auto Fields(const CnnConfig& c) { return std::tie(c.channels, c.hidden, c.dropout, c.num_classes); }
auto Fields(const SyntheticDataConfig& c) {
  return std::tie(c.features, c.num_classes, c.samples_per_epoch, c.image_shape, c.vocab_size,
                  c.context, c.input_shape);
}
auto Fields(const LoaderConfig& c) {
  return std::tie(c.threads, c.prefetch, c.pin_memory, c.shuffle);
}
auto Fields(const AugmentConfig& c) {
  return std::tie(c.crop_padding, c.horizontal_flip, c.normalize);
}
auto Fields(const AdamWConfig& c) { return std::tie(c.beta1, c.beta2, c.eps, c.route); }
auto Fields(const OptimizerConfig& c) {
  return std::tie(c.lr, c.weight_decay, c.warmup_steps, c.schedule, c.min_lr_ratio,
                  c.grad_clip_norm);
}
auto Fields(const TrainingConfig& c) {
  return std::tie(c.steps, c.epochs, c.batch_size, c.precision, c.grad_accum_steps, c.seed,
                  c.metrics_interval_steps, c.batch_size_auto, c.effective_batch_size, c.cuda_graph,
                  c.activation_checkpointing, c.tf32, c.channels_last, c.cudnn_benchmark,
                  c.fused_kernels, c.loss_scale.initial, c.loss_scale.growth_interval,
                  c.loss_scale.growth_factor, c.loss_scale.backoff_factor);
}
auto Fields(const EvalConfig& c) { return std::tie(c.interval_steps, c.batches); }
auto Fields(const CheckpointConfig& c) { return std::tie(c.interval_steps, c.keep); }
auto Fields(const DistributedConfig& c) {
  return std::tie(c.timeout_seconds, c.bucket_bytes, c.first_bucket_bytes);
}

template <typename Model>
void ExpectSameTask(const TrainTask& direct, const TrainTask& submitted) {
  EXPECT_EQ(direct.name, submitted.name);
  ASSERT_TRUE(std::holds_alternative<Model>(submitted.model));
  EXPECT_EQ(Fields(std::get<Model>(direct.model)), Fields(std::get<Model>(submitted.model)));
  ASSERT_TRUE(std::holds_alternative<SyntheticDataConfig>(submitted.data.source));
  EXPECT_EQ(Fields(std::get<SyntheticDataConfig>(direct.data.source)),
            Fields(std::get<SyntheticDataConfig>(submitted.data.source)));
  EXPECT_EQ(Fields(direct.data.loader), Fields(submitted.data.loader));
  EXPECT_EQ(Fields(direct.data.augment), Fields(submitted.data.augment));
  ASSERT_TRUE(std::holds_alternative<AdamWConfig>(submitted.optimizer.kind));
  EXPECT_EQ(Fields(std::get<AdamWConfig>(direct.optimizer.kind)),
            Fields(std::get<AdamWConfig>(submitted.optimizer.kind)));
  EXPECT_EQ(Fields(direct.optimizer), Fields(submitted.optimizer));
  EXPECT_EQ(Fields(direct.training), Fields(submitted.training));
  EXPECT_EQ(Fields(direct.eval), Fields(submitted.eval));
  EXPECT_EQ(Fields(direct.checkpoint), Fields(submitted.checkpoint));
  EXPECT_EQ(Fields(direct.distributed), Fields(submitted.distributed));
}

// What the worker receives for this spec, after the coordinator has checked and completed
// it.
TrainTask Submitted(v1::JobSpec spec) {
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok());
  auto facts = spec::InspectData(spec, spec::DataRoots({}));
  EXPECT_TRUE(facts.ok()) << facts.status();
  EXPECT_TRUE(spec::ValidateAgainstData(spec, *facts).ok());
  spec::ApplyJobSpecDefaults(spec, *facts);
  v1::Assignment assignment;
  assignment.set_job_id("1");
  *assignment.mutable_spec() = spec;
  auto task = TaskFromAssignment(assignment);
  EXPECT_TRUE(task.ok()) << task.status();
  return task.ok() ? *task : TrainTask{};
}

TEST(JobDefaults, TheTestsSmallMlpTaskIsTheSubmittedJob) {
  v1::JobSpec spec;
  spec.set_name("test");
  auto* mlp = spec.mutable_model()->mutable_mlp();
  mlp->set_input_dim(16);
  mlp->add_hidden(64);
  mlp->set_num_classes(4);
  auto* data = spec.mutable_data()->mutable_synthetic();
  data->set_features(16);
  data->set_num_classes(4);
  data->set_samples_per_epoch(4096);
  spec.mutable_optimizer()->set_lr(3e-3);
  spec.mutable_training()->set_steps(100);
  spec.mutable_training()->set_batch_size(64);
  spec.mutable_metrics()->set_interval_steps(20);

  ExpectSameTask<MlpConfig>(testing::SmallMlpTask(100), Submitted(spec));
}

TEST(JobDefaults, AGptLeftToItsDefaultsIsTheSubmittedJob) {
  // Only what describes the data, the length of training and the name: everything else
  // is the table's.
  TrainTask direct;
  direct.name = "gpt";
  GptConfig gpt;
  gpt.context = 64;  // from the data, as the coordinator and the model factory both do
  gpt.vocab_size = 512;
  direct.model = gpt;
  SyntheticDataConfig data;
  data.vocab_size = 512;
  data.context = 64;
  direct.data.source = data;
  direct.training.steps = 10;

  v1::JobSpec spec;
  spec.mutable_model()->mutable_gpt();
  spec.mutable_data()->mutable_synthetic()->set_vocab_size(512);
  spec.mutable_data()->mutable_synthetic()->set_context(64);
  spec.mutable_training()->set_steps(10);

  ExpectSameTask<GptConfig>(direct, Submitted(spec));
}

TEST(JobDefaults, ACnnLeftToItsDefaultsIsTheSubmittedJob) {
  TrainTask direct;
  direct.name = "cnn";
  CnnConfig cnn;
  cnn.num_classes = defaults::kSyntheticClasses;  // from the data
  direct.model = cnn;
  SyntheticDataConfig data;
  data.image_shape = {3, 32, 32};
  direct.data.source = data;
  direct.training.epochs = 1;

  v1::JobSpec spec;
  spec.mutable_model()->mutable_cnn();
  for (uint32_t d : {3, 32, 32}) spec.mutable_data()->mutable_synthetic()->add_image_shape(d);
  spec.mutable_training()->set_epochs(1);

  ExpectSameTask<CnnConfig>(direct, Submitted(spec));
}

}  // namespace
}  // namespace stoke::worker

namespace stoke::worker {
namespace {

// The coordinator's data roots ride along with the assignment, for the worker to re-check
// every file against as it opens it; without them a spec that names files is refused
// rather than opened unchecked.
TEST(WorkerLink, TheDataRootsComeWithTheAssignmentAndFilesNeedThem) {
  v1::Assignment assignment;
  assignment.set_job_id("1");
  v1::JobSpec& spec = *assignment.mutable_spec();
  spec.mutable_model()->mutable_gpt();
  spec.mutable_data()->mutable_tokens()->set_train_path("/data/train.bin");
  spec.mutable_training()->set_steps(10);
  spec.mutable_training()->set_batch_size(8);
  auto refused = TaskFromAssignment(assignment);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("data roots"), std::string::npos) << refused.status();

  assignment.add_data_roots("/data");
  assignment.add_data_roots("/srv/datasets");
  auto task = TaskFromAssignment(assignment);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->data_roots, (std::vector<std::string>{"/data", "/srv/datasets"}));

  // Synthetic data names no file and needs no roots.
  spec.mutable_data()->mutable_synthetic()->set_vocab_size(64);
  spec.mutable_data()->mutable_synthetic()->set_samples_per_epoch(100);
  assignment.clear_data_roots();
  EXPECT_TRUE(TaskFromAssignment(assignment).ok());
}

}  // namespace
}  // namespace stoke::worker
