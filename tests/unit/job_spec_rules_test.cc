// Submission-time validation names the offending field; defaults complete a valid spec.
#include "spec/job_spec_rules.h"
#include "absl/strings/match.h"
#include "spec/job_spec_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

namespace stoke::server {
namespace {

// Runs the submission rules that need no files, as the coordinator does: the spec alone,
// then against the synthetic data it describes.
absl::Status Check(const v1::JobSpec& spec) {
  if (auto s = spec::ValidateJobSpec(spec); !s.ok()) return s;
  auto data = spec::InspectData(spec, spec::DataRoots({}));
  if (!data.ok()) return data.status();
  return spec::ValidateAgainstData(spec, *data);
}

v1::JobSpec Completed(v1::JobSpec spec) {
  spec::ApplyJobSpecDefaults(spec, *spec::InspectData(spec, spec::DataRoots({})));
  return spec;
}

v1::JobSpec ValidSpec() {
  v1::JobSpec spec;
  spec.mutable_model()->mutable_mlp()->add_hidden(64);
  spec.mutable_data()->mutable_synthetic()->set_features(32);
  spec.mutable_training()->set_steps(100);
  return spec;
}

struct BadCase {
  std::string field;  // the message must start with this path
  std::function<void(v1::JobSpec&)> breaks;
};

TEST(JobSpecRules, AValidSpecPasses) { EXPECT_TRUE(Check(ValidSpec()).ok()); }

TEST(JobSpecRules, EveryProblemIsFoundNotOnlyTheFirst) {
  v1::JobSpec spec = ValidSpec();
  spec.mutable_training()->set_steps(0);
  spec.mutable_training()->set_batch_size(1u << 30);
  spec.mutable_optimizer()->set_lr(100);
  spec.mutable_model()->mutable_mlp()->set_dropout(2);
  spec.mutable_checkpoint()->set_keep(1000);
  std::vector<std::string> fields;
  for (const absl::Status& s : spec::CheckJobSpec(spec)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    fields.push_back(spec::ProblemOfStatus(s).field);
  }
  EXPECT_EQ(fields, (std::vector<std::string>{"model.mlp.dropout", "optimizer.lr", "training.steps",
                                              "training.batch_size", "checkpoint.keep"}));
  // Joined, a line each, in the same order.
  const absl::Status joined = spec::ValidateJobSpec(spec);
  EXPECT_EQ(std::count(joined.message().begin(), joined.message().end(), '\n'), 4);
  EXPECT_TRUE(absl::StartsWith(joined.message(), "model.mlp.dropout: "));
}

TEST(JobSpecRules, AModelThatCannotTakeTheDataIsTheOnlyProblemSaid) {
  v1::JobSpec spec = ValidSpec();
  spec.mutable_data()->mutable_synthetic()->set_vocab_size(50);
  spec.mutable_data()->mutable_synthetic()->set_context(16);
  spec.mutable_model()->mutable_mlp()->set_input_dim(7);
  auto data = spec::InspectData(spec, spec::DataRoots({}));
  ASSERT_TRUE(data.ok());
  const auto problems = spec::CheckAgainstData(spec, *data);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(problems[0].message(), "model.mlp: cannot take the token data"));
}

TEST(JobSpecRules, EachBadFieldIsNamed) {
  const std::vector<BadCase> cases = {
      {"model", [](v1::JobSpec& s) { s.clear_model(); }},
      {"model.cnn", [](v1::JobSpec& s) { s.mutable_model()->mutable_cnn(); }},
      {"model.gpt", [](v1::JobSpec& s) { s.mutable_model()->mutable_gpt(); }},
      {"model.resnet.depth",
       [](v1::JobSpec& s) { s.mutable_model()->mutable_resnet()->set_depth(20); }},
      {"model.gpt.heads",
       [](v1::JobSpec& s) {
         s.mutable_model()->mutable_gpt()->set_width(100);
         s.mutable_model()->mutable_gpt()->set_heads(3);
       }},
      {"model.mlp",
       [](v1::JobSpec& s) {
         s.mutable_data()->mutable_synthetic()->set_vocab_size(50);
         s.mutable_data()->mutable_synthetic()->set_context(16);
       }},
      {"model.torchscript.path", [](v1::JobSpec& s) { s.mutable_model()->mutable_torchscript(); }},
      {"checkpoint.keep", [](v1::JobSpec& s) { s.mutable_checkpoint()->set_keep(4294967295u); }},
      {"checkpoint.min_interval_seconds",
       [](v1::JobSpec& s) { s.mutable_checkpoint()->set_min_interval_seconds(4294967295u); }},
      {"data.shards.urls", [](v1::JobSpec& s) { s.mutable_data()->mutable_shards(); }},
      {"data.shards.size",
       [](v1::JobSpec& s) {
         s.mutable_data()->mutable_shards()->set_urls("/d/s-{0..3}.tar");
         s.mutable_data()->mutable_shards()->set_size(5000);
       }},
      {"data.shards.shuffle_buffer",
       [](v1::JobSpec& s) {
         s.mutable_data()->mutable_shards()->set_urls("/d/s-{0..3}.tar");
         s.mutable_data()->mutable_shards()->set_shuffle_buffer(100000000);
       }},
      {"data.shards.text_length",
       [](v1::JobSpec& s) {
         s.mutable_data()->mutable_shards()->set_urls("/d/s-{0..3}.tar");
         s.mutable_data()->mutable_shards()->set_text_length(1u << 30);
       }},
      {"data.synthetic.image_shape",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_synthetic()->add_image_shape(28); }},
      {"data.synthetic.context",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_synthetic()->set_context(8); }},
      {"data.loader.threads",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_loader()->set_threads(1000); }},
      {"optimizer.grad_clip_norm",
       [](v1::JobSpec& s) { s.mutable_optimizer()->set_grad_clip_norm(-1); }},
      {"optimizer.min_lr_ratio",
       [](v1::JobSpec& s) { s.mutable_optimizer()->set_min_lr_ratio(2); }},
      {"data", [](v1::JobSpec& s) { s.clear_data(); }},
      {"training", [](v1::JobSpec& s) { s.mutable_training()->clear_length(); }},
      {"training.steps", [](v1::JobSpec& s) { s.mutable_training()->set_steps(0); }},
      {"training.epochs", [](v1::JobSpec& s) { s.mutable_training()->set_epochs(0); }},
      {"training.batch_size",
       [](v1::JobSpec& s) { s.mutable_training()->set_batch_size(1u << 30); }},
      {"training.grad_accum_steps",
       [](v1::JobSpec& s) { s.mutable_training()->set_grad_accum_steps(100000); }},
      {"training.precision",
       [](v1::JobSpec& s) { s.mutable_training()->set_precision(static_cast<v1::Precision>(42)); }},
      {"training.batch_size",
       [](v1::JobSpec& s) {
         s.mutable_training()->set_batch_size(64);
         s.mutable_training()->set_batch_size_auto(true);
       }},
      {"training.effective_batch_size",
       [](v1::JobSpec& s) { s.mutable_training()->set_effective_batch_size(1024); }},
      {"training.grad_accum_steps",
       [](v1::JobSpec& s) {
         s.mutable_training()->set_batch_size_auto(true);
         s.mutable_training()->set_effective_batch_size(1024);
         s.mutable_training()->set_grad_accum_steps(4);
       }},
      {"training.cuda_graph",
       [](v1::JobSpec& s) { s.mutable_training()->set_cuda_graph(static_cast<v1::Switch>(9)); }},
      {"training.loss_scale",
       [](v1::JobSpec& s) { s.mutable_training()->mutable_loss_scale()->set_initial(1024); }},
      {"training.loss_scale.initial",
       [](v1::JobSpec& s) {
         s.mutable_training()->set_precision(v1::PRECISION_FP16);
         s.mutable_training()->mutable_loss_scale()->set_initial(-1);
       }},
      {"model.mlp.hidden[1]",
       [](v1::JobSpec& s) { s.mutable_model()->mutable_mlp()->add_hidden(0); }},
      {"model.mlp.dropout",
       [](v1::JobSpec& s) { s.mutable_model()->mutable_mlp()->set_dropout(1.5f); }},
      {"model.mlp.input_dim",
       [](v1::JobSpec& s) { s.mutable_model()->mutable_mlp()->set_input_dim(784); }},
      {"model.mlp.num_classes",
       [](v1::JobSpec& s) { s.mutable_model()->mutable_mlp()->set_num_classes(3); }},
      {"data.synthetic.num_classes",
       [](v1::JobSpec& s) { s.mutable_data()->mutable_synthetic()->set_num_classes(1); }},
      {"optimizer.lr", [](v1::JobSpec& s) { s.mutable_optimizer()->set_lr(-1); }},
      {"optimizer.weight_decay",
       [](v1::JobSpec& s) { s.mutable_optimizer()->set_weight_decay(-0.1); }},
      {"optimizer.adamw.beta1",
       [](v1::JobSpec& s) { s.mutable_optimizer()->mutable_adamw()->set_beta1(1.0); }},
      {"optimizer.adamw.eps",
       [](v1::JobSpec& s) { s.mutable_optimizer()->mutable_adamw()->set_eps(0); }},
      {"optimizer.sgd.nesterov",
       [](v1::JobSpec& s) { s.mutable_optimizer()->mutable_sgd()->set_nesterov(true); }},
      {"resources.gpus", [](v1::JobSpec& s) { s.mutable_resources()->set_gpus(100000); }},
      {"max_restarts", [](v1::JobSpec& s) { s.set_max_restarts(1000); }},
      {"distributed.timeout_seconds",
       [](v1::JobSpec& s) { s.mutable_distributed()->set_timeout_seconds(86400); }},
      {"distributed.bucket_mb",
       [](v1::JobSpec& s) { s.mutable_distributed()->set_bucket_mb(4096); }},
      {"name", [](v1::JobSpec& s) { s.set_name(std::string(300, 'x')); }},
  };
  for (const auto& c : cases) {
    v1::JobSpec spec = ValidSpec();
    c.breaks(spec);
    absl::Status status = Check(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(std::string(status.message()).rfind(c.field + ":", 0), 0u)
        << "expected the error to name " << c.field << ", got: " << status.message();
  }
}

// proto3 keeps enum numbers it does not know; they must not run as some other value.
TEST(JobSpecRules, UnknownEnumValuesAndOverlongFieldsAreNamed) {
  const std::vector<BadCase> cases = {
      {"model.mlp.activation",
       [](v1::JobSpec& s) {
         s.mutable_model()->mutable_mlp()->set_activation(static_cast<v1::Activation>(999));
       }},
      {"optimizer.schedule",
       [](v1::JobSpec& s) {
         s.mutable_optimizer()->set_schedule(static_cast<v1::LrSchedule>(999));
       }},
      {"model.resnet.stem",
       [](v1::JobSpec& s) {
         s.mutable_model()->mutable_resnet()->set_stem(static_cast<v1::ResNetStem>(999));
       }},
      {"model.mlp.hidden",
       [](v1::JobSpec& s) {
         for (int i = 0; i < 65; ++i) s.mutable_model()->mutable_mlp()->add_hidden(8);
       }},
      {"model.torchscript.path",
       [](v1::JobSpec& s) {
         s.mutable_model()->mutable_torchscript()->set_path("/" + std::string(5000, 'p'));
       }},
  };
  for (const auto& c : cases) {
    v1::JobSpec spec = ValidSpec();
    c.breaks(spec);
    absl::Status status = spec::ValidateJobSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(std::string(status.message()).rfind(c.field + ":", 0), 0u)
        << "expected the error to name " << c.field << ", got: " << status.message();
  }
}

TEST(JobSpecRules, DefaultsFillEverythingLeftOut) {
  v1::JobSpec spec = Completed(ValidSpec());
  EXPECT_EQ(spec.name(), "mlp");
  EXPECT_EQ(spec.model().mlp().input_dim(), 32u);
  EXPECT_EQ(spec.model().mlp().num_classes(), 10u);
  EXPECT_EQ(spec.model().mlp().activation(), v1::ACTIVATION_GELU);
  EXPECT_TRUE(spec.optimizer().has_adamw());
  EXPECT_DOUBLE_EQ(spec.optimizer().lr(), 1e-3);
  EXPECT_DOUBLE_EQ(spec.optimizer().adamw().beta2(), 0.999);
  EXPECT_EQ(spec.training().batch_size(), 256u);
  EXPECT_EQ(spec.training().grad_accum_steps(), 1u);
  EXPECT_EQ(spec.training().precision(), v1::PRECISION_AUTO);
  EXPECT_EQ(spec.resources().gpus(), 1u);
  EXPECT_EQ(spec.metrics().interval_steps(), 50u);
  EXPECT_EQ(spec.checkpoint().interval_steps(), 1000u);
  EXPECT_EQ(spec.checkpoint().keep(), 3u);
  EXPECT_EQ(spec.optimizer().schedule(), v1::LR_SCHEDULE_CONSTANT);
  EXPECT_EQ(spec.data().loader().prefetch(), 4u);
  EXPECT_TRUE(spec.data().augment().normalize());
  EXPECT_TRUE(spec.has_max_restarts());
  EXPECT_EQ(spec.max_restarts(), 3u);
  // What the user set stays as set; an explicit zero restarts is kept.
  v1::JobSpec no_retry = ValidSpec();
  no_retry.set_max_restarts(0);
  no_retry.mutable_training()->set_batch_size(8);
  no_retry = Completed(no_retry);
  EXPECT_EQ(no_retry.max_restarts(), 0u);
  EXPECT_EQ(no_retry.training().batch_size(), 8u);
  EXPECT_TRUE(Check(no_retry).ok());
  // Jobs of several ranks get the collective timeout and bucket size written down.
  EXPECT_FALSE(spec.has_distributed());
  v1::JobSpec gang = ValidSpec();
  gang.mutable_resources()->set_gpus(2);
  gang = Completed(gang);
  EXPECT_EQ(gang.distributed().timeout_seconds(), 60u);
  EXPECT_EQ(gang.distributed().bucket_mb(), 25u);
}

v1::JobSpec ScriptSpec() {
  v1::JobSpec spec;
  spec.mutable_command()->add_argv("python");
  spec.mutable_command()->add_argv("train.py");
  return spec;
}

TEST(JobSpecRules, AScriptJobNeedsItsProgramAndNothingOfStokesLoop) {
  EXPECT_TRUE(spec::ValidateJobSpec(ScriptSpec()).ok());
  const std::vector<BadCase> cases = {
      {"command.argv", [](v1::JobSpec& s) { s.mutable_command()->clear_argv(); }},
      {"command.argv", [](v1::JobSpec& s) { s.mutable_command()->set_argv(0, ""); }},
      {"command.env[0]", [](v1::JobSpec& s) { s.mutable_command()->add_env("NOVALUE"); }},
      {"command.env[0]", [](v1::JobSpec& s) { s.mutable_command()->add_env("1X=2"); }},
      {"command.env[0]", [](v1::JobSpec& s) { s.mutable_command()->add_env("RANK=3"); }},
      {"command.env[0]",
       [](v1::JobSpec& s) { s.mutable_command()->add_env("STOKE_CHECKPOINT_DIR=/x"); }},
      {"command.python", [](v1::JobSpec& s) { s.mutable_command()->set_python("venv"); }},
      {"command.grace_seconds",
       [](v1::JobSpec& s) { s.mutable_command()->set_grace_seconds(3601); }},
      {"model", [](v1::JobSpec& s) { s.mutable_model()->mutable_mlp()->add_hidden(8); }},
      {"data", [](v1::JobSpec& s) { s.mutable_data()->mutable_synthetic()->set_features(8); }},
      {"training", [](v1::JobSpec& s) { s.mutable_training()->set_steps(10); }},
      {"resources.gpus", [](v1::JobSpec& s) { s.mutable_resources()->set_gpus(5000); }},
  };
  for (const auto& c : cases) {
    v1::JobSpec spec = ScriptSpec();
    c.breaks(spec);
    const absl::Status s = spec::ValidateJobSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(s.message().rfind(c.field + ":", 0), 0u) << c.field << " -> " << s.message();
  }
  // An empty section says nothing and passes; a user's own variables do.
  v1::JobSpec spec = ScriptSpec();
  spec.mutable_data();
  spec.mutable_command()->add_env("HF_HOME=/data/hf");
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok());
}

TEST(JobSpecRules, AScriptJobGetsItsGraceDevicesAndRestarts) {
  v1::JobSpec spec = ScriptSpec();
  spec.mutable_resources()->set_gpus(2);
  spec::ApplyCommandDefaults(spec);
  EXPECT_EQ(spec.command().grace_seconds(), 30u);
  EXPECT_EQ(spec.resources().gpus(), 2u);
  EXPECT_EQ(spec.max_restarts(), 3u);
  EXPECT_EQ(spec.distributed().timeout_seconds(), 60u);
  EXPECT_FALSE(spec.has_training());
  EXPECT_FALSE(spec.has_model());
}

}  // namespace
}  // namespace stoke::server

namespace stoke::server {
namespace {

TEST(JobSpecRules, ModelsTakeTheirShapeFromTheData) {
  v1::JobSpec gpt;
  gpt.mutable_model()->mutable_gpt();
  gpt.mutable_data()->mutable_synthetic()->set_vocab_size(100);
  gpt.mutable_data()->mutable_synthetic()->set_context(32);
  gpt.mutable_training()->set_steps(1);
  ASSERT_TRUE(Check(gpt).ok()) << Check(gpt);
  gpt = Completed(gpt);
  EXPECT_EQ(gpt.model().gpt().vocab_size(), 100u);
  EXPECT_EQ(gpt.model().gpt().context(), 32u);
  EXPECT_EQ(gpt.model().gpt().layers(), 6u);
  EXPECT_EQ(gpt.name(), "gpt");

  v1::JobSpec resnet;
  resnet.mutable_model()->mutable_resnet();
  auto* images = resnet.mutable_data()->mutable_synthetic();
  for (uint32_t d : {3u, 32u, 32u}) images->add_image_shape(d);
  images->set_num_classes(100);
  resnet.mutable_training()->set_steps(1);
  ASSERT_TRUE(Check(resnet).ok()) << Check(resnet);
  resnet = Completed(resnet);
  EXPECT_EQ(resnet.model().resnet().num_classes(), 100u);
  EXPECT_EQ(resnet.model().resnet().depth(), 18u);
}

}  // namespace
}  // namespace stoke::server
