// Jobs that cannot allocate are refused at submission, naming the field to change: the
// size arithmetic is 64-bit and saturating, so no spec overflows its way past the cap.
#include "spec/model_size.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "spec/job_spec_rules.h"

namespace stoke::server {
namespace {

// The submission rules as the coordinator runs them on synthetic data.
absl::Status Check(const v1::JobSpec& spec) {
  if (auto s = spec::ValidateJobSpec(spec); !s.ok()) return s;
  auto data = spec::InspectData(spec, spec::DataRoots({}));
  if (!data.ok()) return data.status();
  return spec::ValidateAgainstData(spec, *data);
}

v1::JobSpec Images(uint32_t channels, uint32_t height, uint32_t width) {
  v1::JobSpec spec;
  for (uint32_t d : {channels, height, width}) {
    spec.mutable_data()->mutable_synthetic()->add_image_shape(d);
  }
  spec.mutable_training()->set_steps(10);
  return spec;
}

v1::JobSpec Gpt(uint32_t width, uint32_t layers) {
  v1::JobSpec spec;
  spec.mutable_model()->mutable_gpt()->set_width(width);
  spec.mutable_model()->mutable_gpt()->set_heads(16);
  spec.mutable_model()->mutable_gpt()->set_layers(layers);
  spec.mutable_data()->mutable_synthetic()->set_vocab_size(50257);
  spec.mutable_data()->mutable_synthetic()->set_context(1024);
  spec.mutable_training()->set_steps(10);
  spec.mutable_training()->set_batch_size(8);
  return spec;
}

void ExpectRefused(const absl::Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(status.message().rfind(field + ":", 0), 0u) << status;
}

TEST(ModelSize, SaturatesInsteadOfWrapping) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(spec::SaturatingMul(uint64_t{1} << 32, uint64_t{1} << 32), kMax);
  EXPECT_EQ(spec::SaturatingMul(uint64_t{1} << 31, uint64_t{1} << 32), uint64_t{1} << 63);
  EXPECT_EQ(spec::SaturatingAdd(kMax - 1, 2), kMax);
  EXPECT_EQ(spec::SaturatingAdd(kMax, kMax), kMax);
}

TEST(ModelSize, CountsTheParametersOfKnownModels) {
  // GPT-2 small: 124M parameters (tied embeddings).
  v1::JobSpec gpt = Gpt(768, 12);
  gpt.mutable_model()->mutable_gpt()->set_heads(12);
  auto data = spec::InspectData(gpt, spec::DataRoots({}));
  ASSERT_TRUE(data.ok());
  const spec::ModelSize size = spec::EstimateModelSize(gpt, *data);
  EXPECT_NEAR(static_cast<double>(size.parameters), 124.4e6, 0.5e6);
  EXPECT_EQ(size.state_bytes, size.parameters * 16);  // AdamW: weights, grads, two moments
  // An MLP 784 -> 100 -> 10: 78,500 + 1,010.
  v1::JobSpec mlp;
  mlp.mutable_model()->mutable_mlp()->add_hidden(100);
  mlp.mutable_data()->mutable_synthetic()->set_features(784);
  mlp.mutable_optimizer()->mutable_sgd();
  mlp.mutable_training()->set_steps(1);
  data = spec::InspectData(mlp, spec::DataRoots({}));
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(spec::EstimateModelSize(mlp, *data).parameters, 79'510u);
  EXPECT_EQ(spec::EstimateModelSize(mlp, *data).state_bytes, 79'510u * 8);  // plain SGD: no state
}

TEST(ModelSize, OrdinaryJobsPass) {
  EXPECT_TRUE(Check(Gpt(768, 12)).ok()) << Check(Gpt(768, 12));
  v1::JobSpec resnet = Images(3, 224, 224);
  resnet.mutable_model()->mutable_resnet()->set_depth(50);
  resnet.mutable_data()->mutable_synthetic()->set_num_classes(1000);
  EXPECT_TRUE(Check(resnet).ok()) << Check(resnet);
  v1::JobSpec cnn = Images(3, 32, 32);
  cnn.mutable_model()->mutable_cnn();
  EXPECT_TRUE(Check(cnn).ok()) << Check(cnn);
}

// The 17.6 TB layer: two hidden layers of 2^20, 2^40 weights between them.
TEST(ModelSize, ALayerLargerThanAnyDeviceIsRefusedByName) {
  v1::JobSpec spec;
  spec.mutable_model()->mutable_mlp()->add_hidden(1u << 20);
  spec.mutable_model()->mutable_mlp()->add_hidden(1u << 20);
  spec.mutable_data()->mutable_synthetic();
  spec.mutable_training()->set_steps(10);
  const absl::Status status = Check(spec);
  ExpectRefused(status, "model.mlp.hidden[1]");
  EXPECT_NE(status.message().find("1048576 x 1048576"), std::string::npos) << status;
}

// Image-shaped data under an MLP: the default input width and hidden layer used to be
// computed in 32 bits (4096^3 wrapped to 0).
TEST(ModelSize, ImageShapeDefaultsCannotOverflow) {
  v1::JobSpec cube = Images(4096, 4096, 4096);
  cube.mutable_model()->mutable_mlp();
  ExpectRefused(Check(cube), "model.mlp");
  v1::JobSpec large = Images(3, 4096, 4096);  // 50M inputs, 201M hidden by default
  large.mutable_model()->mutable_mlp();
  ExpectRefused(Check(large), "model.mlp");
  v1::JobSpec wide = Images(1, 1024, 1024);  // 2^20 inputs, a 2^22-wide default hidden
  wide.mutable_model()->mutable_mlp();
  ExpectRefused(Check(wide), "model.mlp.hidden (default: 4 x input_dim)");
}

// The 51 GB GPT: 12.9B parameters (51 GB of fp32 weights, 206 GB to train).
TEST(ModelSize, AModelWhoseStateExceedsTheCapIsRefused) {
  const absl::Status status = Check(Gpt(4096, 64));
  ExpectRefused(status, "model.gpt");
  EXPECT_NE(status.message().find("optimizer state"), std::string::npos) << status;
  // The widest block allowed alone: 12 x 65536^2 weights.
  ExpectRefused(Check(Gpt(65536, 512)), "model.gpt.width");
}

TEST(ModelSize, ABatchThatCannotFitIsRefused) {
  v1::JobSpec spec = Images(3, 4096, 4096);
  spec.mutable_model()->mutable_resnet();
  spec.mutable_training()->set_batch_size(4096);
  spec.mutable_data()->mutable_synthetic()->set_samples_per_epoch(1u << 20);
  ExpectRefused(Check(spec), "training.batch_size");
  spec.mutable_training()->set_batch_size(4);
  EXPECT_TRUE(Check(spec).ok()) << Check(spec);
}

TEST(ModelSize, ACnnWithMoreStagesThanTheImageAllowsIsRefused) {
  v1::JobSpec spec = Images(1, 28, 28);
  for (int i = 0; i < 5; ++i) spec.mutable_model()->mutable_cnn()->add_channels(8);
  ExpectRefused(Check(spec), "model.cnn.channels");
  spec.mutable_model()->mutable_cnn()->mutable_channels()->RemoveLast();
  EXPECT_TRUE(Check(spec).ok()) << Check(spec);
}

TEST(ModelSize, AbsurdHyperParametersAreRefused) {
  for (double lr : {1e308, 11.0, -1.0}) {
    v1::JobSpec spec = Gpt(128, 2);
    spec.mutable_optimizer()->set_lr(lr);
    ExpectRefused(Check(spec), "optimizer.lr");
  }
  v1::JobSpec decay = Gpt(128, 2);
  decay.mutable_optimizer()->set_weight_decay(1e300);
  ExpectRefused(Check(decay), "optimizer.weight_decay");
  v1::JobSpec scale = Gpt(128, 2);
  scale.mutable_training()->set_precision(v1::PRECISION_FP16);
  scale.mutable_training()->mutable_loss_scale()->set_initial(1e300);
  ExpectRefused(Check(scale), "training.loss_scale.initial");
  v1::JobSpec effective = Gpt(128, 2);
  effective.mutable_training()->clear_batch_size();
  effective.mutable_training()->set_batch_size_auto(true);
  effective.mutable_training()->set_effective_batch_size(4294967295u);
  ExpectRefused(Check(effective), "training.effective_batch_size");
  v1::JobSpec fine = Gpt(128, 2);
  fine.mutable_optimizer()->set_lr(10);
  EXPECT_TRUE(Check(fine).ok()) << Check(fine);
}

}  // namespace
}  // namespace stoke::server
