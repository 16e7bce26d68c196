// The coordinator's size estimate (spec/model_size.h) against the modules the worker
// builds: for every built-in model kind, the parameters the estimate counts are exactly
// those of the module the worker makes of the same spec and data, whether the spec is as
// submitted (defaults left to the worker) or as the coordinator completes it. A model
// changed on one side only fails here, not as a job refused or admitted on a wrong size.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "spec/data_checks.h"
#include "spec/job_spec_rules.h"
#include "spec/model_size.h"
#include "worker/link/task_translation.h"
#include "worker/models/model_factory.h"

namespace stoke {
namespace {

// What the worker's data pipeline reports of the data the coordinator inspected.
worker::DataShape ShapeOf(const spec::DataFacts& facts) {
  worker::DataShape shape;
  switch (facts.kind) {
    case spec::DataFacts::Kind::kVector:
      shape.kind = worker::DataShape::Kind::kVector;
      break;
    case spec::DataFacts::Kind::kImage:
      shape.kind = worker::DataShape::Kind::kImage;
      break;
    case spec::DataFacts::Kind::kTokens:
      shape.kind = worker::DataShape::Kind::kTokens;
      break;
  }
  shape.sample = facts.sample;
  shape.num_classes = facts.num_classes;
  shape.vocab_size = facts.vocab_size;
  shape.regression = facts.regression;
  return shape;
}

// The parameters of the module a worker builds for `spec`, through the same translation
// an assignment takes.
uint64_t WorkerParameters(const v1::JobSpec& spec, const spec::DataFacts& facts) {
  v1::Assignment assignment;
  *assignment.mutable_spec() = spec;
  const absl::StatusOr<worker::TrainTask> task = worker::TaskFromAssignment(assignment);
  if (!task.ok()) {
    ADD_FAILURE() << task.status();
    return 0;
  }
  const auto network = worker::BuildNetwork(task->model, ShapeOf(facts));
  uint64_t count = 0;
  for (const torch::Tensor& p : network->parameters()) count += static_cast<uint64_t>(p.numel());
  return count;
}

// Submits `spec` as the coordinator does, then compares the estimate with the worker's
// module, for the spec as submitted and as completed with the defaults. A worker is sent
// the completed spec; one left with the model's defaults (a TrainTask built directly, as
// tests and stoke-bench do) applies its own, which must come to the same.
void ExpectEstimateMatchesModule(v1::JobSpec spec) {
  spec.mutable_training()->set_steps(1);
  spec.mutable_training()->set_batch_size(2);
  ASSERT_TRUE(spec::ValidateJobSpec(spec).ok()) << spec::ValidateJobSpec(spec);
  const absl::StatusOr<spec::DataFacts> facts = spec::InspectData(spec, spec::DataRoots({}));
  ASSERT_TRUE(facts.ok()) << facts.status();
  ASSERT_TRUE(spec::ValidateAgainstData(spec, *facts).ok())
      << spec::ValidateAgainstData(spec, *facts);
  const uint64_t estimate = spec::EstimateModelSize(spec, *facts).parameters;
  EXPECT_GT(estimate, 0u);

  v1::JobSpec completed = spec;
  spec::ApplyJobSpecDefaults(completed, *facts);
  EXPECT_EQ(spec::EstimateModelSize(completed, *facts).parameters, estimate)
      << "the estimate of the completed spec";
  EXPECT_EQ(WorkerParameters(completed, *facts), estimate) << "the module of the completed spec";
  v1::JobSpec model_as_submitted = completed;
  *model_as_submitted.mutable_model() = spec.model();
  EXPECT_EQ(WorkerParameters(model_as_submitted, *facts), estimate)
      << "the module of the model as submitted";
}

v1::JobSpec Vectors(uint32_t features, uint32_t classes) {
  v1::JobSpec spec;
  spec.mutable_data()->mutable_synthetic()->set_features(features);
  spec.mutable_data()->mutable_synthetic()->set_num_classes(classes);
  return spec;
}

v1::JobSpec Images(uint32_t channels, uint32_t height, uint32_t width, uint32_t classes = 10) {
  v1::JobSpec spec;
  for (uint32_t d : {channels, height, width}) {
    spec.mutable_data()->mutable_synthetic()->add_image_shape(d);
  }
  spec.mutable_data()->mutable_synthetic()->set_num_classes(classes);
  return spec;
}

TEST(ModelSizeMatchesModules, MlpWithItsDefaultHiddenLayer) {
  v1::JobSpec spec = Vectors(20, 5);
  spec.mutable_model()->mutable_mlp();
  ExpectEstimateMatchesModule(spec);
}

TEST(ModelSizeMatchesModules, MlpWithHiddenLayersOnFlattenedImages) {
  v1::JobSpec spec = Images(1, 8, 6, 3);
  spec.mutable_model()->mutable_mlp()->add_hidden(16);
  spec.mutable_model()->mutable_mlp()->add_hidden(7);
  ExpectEstimateMatchesModule(spec);
}

TEST(ModelSizeMatchesModules, MlpWithItsOwnInputWidthAndClasses) {
  v1::JobSpec spec = Vectors(12, 4);
  spec.mutable_model()->mutable_mlp()->set_input_dim(12);
  spec.mutable_model()->mutable_mlp()->set_num_classes(4);
  ExpectEstimateMatchesModule(spec);
}

TEST(ModelSizeMatchesModules, CnnWithItsDefaultStages) {
  v1::JobSpec spec = Images(3, 16, 16);
  spec.mutable_model()->mutable_cnn();
  ExpectEstimateMatchesModule(spec);
}

// Odd sizes: each stage halves them, rounding down.
TEST(ModelSizeMatchesModules, CnnWithThreeStagesOnOddImages) {
  v1::JobSpec spec = Images(1, 13, 11, 4);
  auto* cnn = spec.mutable_model()->mutable_cnn();
  for (uint32_t c : {4, 8, 6}) cnn->add_channels(c);
  cnn->set_hidden(10);
  ExpectEstimateMatchesModule(spec);
}

TEST(ModelSizeMatchesModules, ResNetOfEachDepthWithTheSmallStem) {
  for (uint32_t depth : {18, 34, 50}) {
    SCOPED_TRACE("ResNet-" + std::to_string(depth));
    v1::JobSpec spec = Images(3, 8, 8);
    spec.mutable_model()->mutable_resnet()->set_depth(depth);
    ExpectEstimateMatchesModule(spec);
  }
}

// Images over 64 pixels take the ImageNet stem unless the spec says otherwise.
TEST(ModelSizeMatchesModules, ResNetWithEachStem) {
  v1::JobSpec large = Images(1, 65, 70, 7);
  large.mutable_model()->mutable_resnet();  // depth 18, the stem from the image size
  ExpectEstimateMatchesModule(large);
  v1::JobSpec imagenet = Images(3, 16, 16);
  imagenet.mutable_model()->mutable_resnet()->set_stem(v1::RESNET_STEM_IMAGENET);
  ExpectEstimateMatchesModule(imagenet);
  v1::JobSpec small = Images(3, 65, 65);
  small.mutable_model()->mutable_resnet()->set_stem(v1::RESNET_STEM_SMALL);
  ExpectEstimateMatchesModule(small);
}

v1::JobSpec SmallGpt() {
  v1::JobSpec spec;
  spec.mutable_data()->mutable_synthetic()->set_vocab_size(50);
  spec.mutable_data()->mutable_synthetic()->set_context(16);
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_width(32);
  gpt->set_heads(2);
  gpt->set_layers(2);
  return spec;
}

TEST(ModelSizeMatchesModules, GptWithTheDatasContextAndVocabulary) {
  ExpectEstimateMatchesModule(SmallGpt());
}

// Room to grow: a longer context and a larger vocabulary than the data's.
TEST(ModelSizeMatchesModules, GptWithItsOwnContextAndVocabulary) {
  v1::JobSpec spec = SmallGpt();
  spec.mutable_model()->mutable_gpt()->set_context(24);
  spec.mutable_model()->mutable_gpt()->set_vocab_size(64);
  spec.mutable_model()->mutable_gpt()->set_layers(3);
  ExpectEstimateMatchesModule(spec);
}

}  // namespace
}  // namespace stoke
