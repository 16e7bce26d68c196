// Submission-time validation names the offending field; defaults complete a valid spec.
#include "server/api/job_spec_rules.h"

#include <gtest/gtest.h>

#include <functional>

namespace stoke::server {
namespace {

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

TEST(JobSpecRules, AValidSpecPasses) { EXPECT_TRUE(ValidateJobSpec(ValidSpec()).ok()); }

TEST(JobSpecRules, EachBadFieldIsNamed) {
  const std::vector<BadCase> cases = {
      {"model", [](v1::JobSpec& s) { s.clear_model(); }},
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
      {"name", [](v1::JobSpec& s) { s.set_name(std::string(300, 'x')); }},
  };
  for (const auto& c : cases) {
    v1::JobSpec spec = ValidSpec();
    c.breaks(spec);
    absl::Status status = ValidateJobSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(std::string(status.message()).rfind(c.field + ":", 0), 0u)
        << "expected the error to name " << c.field << ", got: " << status.message();
  }
}

TEST(JobSpecRules, DefaultsFillEverythingLeftOut) {
  v1::JobSpec spec = ValidSpec();
  ApplyJobSpecDefaults(spec);
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
  EXPECT_TRUE(spec.has_max_restarts());
  EXPECT_EQ(spec.max_restarts(), 3u);
  // What the user set stays as set; an explicit zero restarts is kept.
  v1::JobSpec no_retry = ValidSpec();
  no_retry.set_max_restarts(0);
  no_retry.mutable_training()->set_batch_size(8);
  ApplyJobSpecDefaults(no_retry);
  EXPECT_EQ(no_retry.max_restarts(), 0u);
  EXPECT_EQ(no_retry.training().batch_size(), 8u);
  EXPECT_TRUE(ValidateJobSpec(no_retry).ok());
}

}  // namespace
}  // namespace stoke::server
