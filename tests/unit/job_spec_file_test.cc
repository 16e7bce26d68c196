// Job files: YAML and JSON map onto JobSpec; mistakes are reported with file, line and
// field path, before anything is sent.
#include "spec/job_spec_file.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace stoke::client {
namespace {

std::string ErrorOf(const std::string& yaml) {
  auto spec = spec::ParseJobSpec(yaml, "job.yaml");
  EXPECT_FALSE(spec.ok()) << "accepted:\n" << yaml;
  return spec.ok() ? "" : std::string(spec.status().message());
}

TEST(JobSpecFile, EveryProblemIsFoundEachWithItsLineAndColumn) {
  const spec::ParsedJobFile parsed = spec::ParseJobFile(
      "name: many\n"
      "training:\n"
      "  steps: ten\n"
      "  bach_size: 32\n"
      "model:\n"
      "  mlp: {hidden: [8, wide]}\n"
      "  cnn: {}\n"
      "optimizer: {lr: 0.1}\n"
      "optimizer: {lr: 0.2}\n",
      "job.yaml");
  std::vector<std::string> found;
  for (const auto& p : parsed.problems) found.push_back(spec::DescribeProblem("job.yaml", p));
  EXPECT_EQ(found, (std::vector<std::string>{
                       "job.yaml:9:1: optimizer: given twice (first on line 8); keep one",
                       "job.yaml:3:10: training.steps: expected a whole number >= 0, got \"ten\"",
                       "job.yaml:4:3: training.bach_size: unknown field; did you mean batch_size?",
                       std::string("job.yaml:6:21: model.mlp.hidden[1]: expected a whole "
                                   "number >= 0, got \"wide\""),
                       std::string("job.yaml:7:3: model.cnn: conflicts with mlp: set only one "
                                   "of mlp, cnn, resnet, gpt, torchscript, python"),
                   }));
  // What could be read was: the first optimizer, the good list entry, the name.
  EXPECT_EQ(parsed.spec.name(), "many");
  EXPECT_DOUBLE_EQ(parsed.spec.optimizer().lr(), 0.1);
  ASSERT_EQ(parsed.spec.model().mlp().hidden_size(), 1);
  // Where a rule's problem points: its field, else the nearest section the file holds.
  EXPECT_EQ(parsed.PositionOf("optimizer.lr").line, 8);
  EXPECT_EQ(parsed.PositionOf("model.mlp.hidden[0]").column, 18);
  EXPECT_EQ(parsed.PositionOf("training.epochs").line, 2);
  EXPECT_EQ(parsed.PositionOf("resources.gpus").line, 0);
  // The StatusOr form says the same, a line each.
  const std::string both = ErrorOf("training: {steps: x, epochs: y}\n");
  EXPECT_EQ(std::count(both.begin(), both.end(), '\n'), 1) << both;
}

TEST(JobSpecFile, ARulesProblemIsSplitIntoItsFieldAndMessage) {
  auto p = spec::ProblemOfStatus(absl::InvalidArgumentError("model.mlp.hidden[1]: must be 1..."));
  EXPECT_EQ(p.field, "model.mlp.hidden[1]");
  EXPECT_EQ(p.message, "must be 1...");
  p = spec::ProblemOfStatus(absl::InvalidArgumentError("/data/x: not found"));
  EXPECT_EQ(p.field, "");
  EXPECT_EQ(p.message, "/data/x: not found");
}

TEST(JobSpecFile, YamlMapsFieldByField) {
  auto spec = spec::ParseJobSpec(R"(
name: demo
model:
  mlp:
    hidden: [128, 64]
    activation: relu
    dropout: 0.1
data:
  synthetic: {features: 32, num_classes: 4}
optimizer:
  sgd: {momentum: 0.9, nesterov: true}
  lr: 0.05
training:
  epochs: 3
  batch_size: 64
  precision: bf16
resources:
  gpus: 2
  priority: -3
  device: cpu
max_restarts: 0
)",
                                 "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "demo");
  ASSERT_EQ(spec->model().mlp().hidden_size(), 2);
  EXPECT_EQ(spec->model().mlp().hidden(1), 64u);
  EXPECT_EQ(spec->model().mlp().activation(), v1::ACTIVATION_RELU);
  EXPECT_FLOAT_EQ(spec->model().mlp().dropout(), 0.1f);
  EXPECT_EQ(spec->data().synthetic().num_classes(), 4u);
  EXPECT_TRUE(spec->optimizer().sgd().nesterov());
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 0.05);
  EXPECT_EQ(spec->training().epochs(), 3u);
  EXPECT_EQ(spec->training().precision(), v1::PRECISION_BF16);
  EXPECT_EQ(spec->resources().priority(), -3);
  EXPECT_EQ(spec->resources().device(), v1::DEVICE_KIND_CPU);
  EXPECT_TRUE(spec->has_max_restarts());
  EXPECT_EQ(spec->max_restarts(), 0u);
}

// "Billion laughs": nine levels of nine aliases in under 1 KB expand to 9^9 values.
// Refused at once; a modest use of anchors and aliases still reads.
TEST(JobSpecFile, AnAliasBombIsRefusedQuicklyAndModestAliasesWork) {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    const char below = static_cast<char>(level - 1);
    bomb += std::string(1, level) + ": &" + level + " [";
    for (int i = 0; i < 9; ++i) bomb += std::string(i ? ", *" : "*") + below;
    bomb += "]\n";
  }
  bomb += "name: *i\n";
  ASSERT_LT(bomb.size(), 1024u);
  const auto began = std::chrono::steady_clock::now();
  const std::string error = ErrorOf(bomb);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(1));
  EXPECT_NE(error.find("job.yaml: its aliases (*name) expand it to more than 100000 values"),
            std::string::npos)
      << error;

  auto spec = spec::ParseJobSpec(R"(
model: {mlp: {hidden: [64, 32]}}
data: {synthetic: {features: 8}}
training: {steps: 10}
eval: {interval_steps: &every 5}
checkpoint: {interval_steps: *every}
)",
                                 "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().interval_steps(), 5u);
}

TEST(JobSpecFile, SpeedSwitchesAndAnAutomaticBatchSize) {
  auto spec = spec::ParseJobSpec(R"(
model:
  mlp: {hidden: [64]}
data:
  synthetic: {features: 32}
training:
  steps: 100
  batch_size: auto
  effective_batch_size: 4096
  precision: fp16
  loss_scale: {initial: 1024, growth_interval: 100}
  cuda_graph: off
  activation_checkpointing: on
  tf32: off
  fused_kernels: off
)",
                                 "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& t = spec->training();
  EXPECT_TRUE(t.batch_size_auto());
  EXPECT_EQ(t.batch_size(), 0u);
  EXPECT_EQ(t.effective_batch_size(), 4096u);
  EXPECT_EQ(t.precision(), v1::PRECISION_FP16);
  EXPECT_DOUBLE_EQ(t.loss_scale().initial(), 1024);
  EXPECT_EQ(t.cuda_graph(), v1::SWITCH_OFF);
  EXPECT_EQ(t.activation_checkpointing(), v1::SWITCH_ON);
  EXPECT_EQ(t.tf32(), v1::SWITCH_OFF);
  EXPECT_EQ(t.fused_kernels(), v1::SWITCH_OFF);
  EXPECT_EQ(t.channels_last(), v1::SWITCH_DEFAULT);
  // As JSON and Python write them, true and false turn a switch on and off.
  auto json = spec::ParseJobSpec(R"({"training": {"tf32": true, "cuda_graph": false}})", "j.json");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->training().tf32(), v1::SWITCH_ON);
  EXPECT_EQ(json->training().cuda_graph(), v1::SWITCH_OFF);

  // "auto" only where the field has an automatic choice.
  auto bad = spec::ParseJobSpec("training: {steps: auto}\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("training.steps"), std::string::npos) << bad.status();
  bad = spec::ParseJobSpec("training: {cuda_graph: sometimes}\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("training.cuda_graph"), std::string::npos) << bad.status();
}

TEST(JobSpecFile, JsonWorksTooWithEitherNameStyle) {
  auto spec = spec::ParseJobSpec(
      R"({"model": {"mlp": {}}, "data": {"synthetic": {}}, "training": {"steps": 10, "batchSize": 16,
          "precision": "PRECISION_FP32"}, "optimizer": {"adamw": null}})",
      "job.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->model().has_mlp());
  EXPECT_TRUE(spec->data().has_synthetic());
  EXPECT_TRUE(spec->optimizer().has_adamw());  // an empty member still picks the kind
  EXPECT_EQ(spec->training().batch_size(), 16u);
  EXPECT_EQ(spec->training().precision(), v1::PRECISION_FP32);
}

TEST(JobSpecFile, UnknownFieldIsNamedWithALikelyFix) {
  std::string error = ErrorOf("training:\n  steps: 5\n  bach_size: 32\n");
  EXPECT_EQ(error, "job.yaml:3:3: training.bach_size: unknown field; did you mean batch_size?");
  error = ErrorOf("colour: red\n");
  EXPECT_NE(error.find("job.yaml:1:1: colour: unknown field; expected one of name, model"),
            std::string::npos)
      << error;
}

TEST(JobSpecFile, IllTypedValuesAreNamed) {
  EXPECT_EQ(ErrorOf("training:\n  batch_size: lots\n"),
            "job.yaml:2:15: training.batch_size: expected a whole number >= 0, got \"lots\"");
  EXPECT_EQ(ErrorOf("training:\n  batch_size: -4\n"),
            "job.yaml:2:15: training.batch_size: expected a whole number >= 0, got \"-4\"");
  EXPECT_EQ(ErrorOf("training:\n  steps: 1.5\n"),
            "job.yaml:2:10: training.steps: expected a whole number >= 0, got \"1.5\"");
  EXPECT_EQ(ErrorOf("optimizer:\n  lr: fast\n"),
            "job.yaml:2:7: optimizer.lr: expected a number, got \"fast\"");
  EXPECT_EQ(ErrorOf("training:\n  precision: fp8\n"),
            "job.yaml:2:14: training.precision: unknown value \"fp8\"; expected one of auto, fp32, "
            "bf16, fp16");
  EXPECT_EQ(ErrorOf("model:\n  mlp:\n    hidden: 64\n"),
            "job.yaml:3:13: model.mlp.hidden: expected a list, got \"64\"");
  EXPECT_EQ(ErrorOf("model:\n  mlp:\n    hidden: [64, wide]\n"),
            "job.yaml:3:18: model.mlp.hidden[1]: expected a whole number >= 0, got \"wide\"");
  EXPECT_EQ(ErrorOf("training: 12\n"),
            "job.yaml:1:11: training: expected a mapping of TrainingSpec fields, got \"12\"");
  EXPECT_EQ(ErrorOf("resources:\n  gpus: 99999999999\n"),
            "job.yaml:2:9: resources.gpus: expected a whole number >= 0, got \"99999999999\"");
}

TEST(JobSpecFile, TwoMembersOfOneChoiceConflict) {
  EXPECT_EQ(ErrorOf("training:\n  steps: 10\n  epochs: 2\n"),
            "job.yaml:3:3: training.epochs: conflicts with steps: set only one of steps, epochs");
}

TEST(JobSpecFile, BrokenSyntaxAndMissingFilesAreNamed) {
  std::string error = ErrorOf("model: {mlp: \n  oops: [\n");
  EXPECT_EQ(error.rfind("job.yaml:", 0), 0u) << error;
  EXPECT_NE(error.find("not valid YAML or JSON"), std::string::npos) << error;
  EXPECT_EQ(ErrorOf(""), "job.yaml: the file is empty");
  auto missing = spec::LoadJobSpecFile("/nonexistent/job.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/job.yaml"), absl::string_view::npos);
}

TEST(JobSpecFile, AKeyGivenTwiceIsRefused) {
  EXPECT_EQ(ErrorOf("training:\n  steps: 10\n  steps: 20\n"),
            "job.yaml:3:3: steps: given twice (first on line 2); keep one");
  EXPECT_EQ(ErrorOf("model: {mlp: {}}\ntraining: {steps: 1}\nmodel: {cnn: {}}\n"),
            "job.yaml:3:1: model: given twice (first on line 1); keep one");
}

TEST(JobSpecFile, ASecondDocumentIsRefused) {
  const std::string error = ErrorOf("model: {mlp: {}}\n---\nmodel: {cnn: {}}\n");
  EXPECT_EQ(error.rfind("job.yaml:2: ", 0), 0u) << error;  // the line of the ---
  EXPECT_NE(error.find("second YAML document"), std::string::npos) << error;
}

TEST(JobSpecFile, BinaryAndCustomTagsAreRefused) {
  std::string error = ErrorOf("model:\n  torchscript:\n    path: !!binary L2RhdGEvbS5wdA==\n");
  EXPECT_EQ(error.rfind("job.yaml:3:11: ", 0), 0u) << error;
  EXPECT_NE(error.find("binary"), std::string::npos) << error;
  error = ErrorOf("model: !custom {mlp: {}}\n");
  EXPECT_EQ(error.rfind("job.yaml:1:8: ", 0), 0u) << error;
  // Core tags are plain YAML and stay accepted.
  EXPECT_TRUE(
      spec::ParseJobSpec("model: {mlp: {}}\ntraining: {steps: !!int 5}\n", "job.yaml").ok());
}

TEST(JobSpecFile, RelativePathsInAFileNamedWithoutAFolder) {
  testing::TempDir dir;
  const std::string canonical = std::filesystem::canonical(dir.path()).string();
  std::filesystem::create_directory(canonical + "/jobs");
  std::ofstream(canonical + "/jobs/job.yaml")
      << "model: {gpt: {}}\ndata:\n  tokens: {train_path: ../data/train.bin}\n";
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(canonical + "/jobs");
  auto spec = spec::LoadJobSpecFile("job.yaml");
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().tokens().train_path(), canonical + "/data/train.bin");
}

// "data:REL" is the coordinator's to resolve against its data roots: the CLI sends it as
// written, and still makes other relative paths absolute from the file's folder.
TEST(JobSpecFile, DataRootPathsAreLeftForTheCoordinator) {
  testing::TempDir dir;
  const std::string canonical = std::filesystem::canonical(dir.path()).string();
  std::ofstream(canonical + "/job.yaml")
      << "model: {gpt: {}}\ndata:\n  tokens: {train_path: data:text.bin, val_path: val.bin}\n";
  auto spec = spec::LoadJobSpecFile(canonical + "/job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().tokens().train_path(), "data:text.bin");
  EXPECT_EQ(spec->data().tokens().val_path(), canonical + "/val.bin");
}

TEST(JobSpecFile, DevicesFifosFoldersAndHugeFilesAreRefusedAtOnce) {
  testing::TempDir dir;
  const std::string fifo = dir.File("job.yaml");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string huge = dir.File("huge.yaml");
  std::ofstream(huge) << "# " << std::string(spec::kMaxJobFileBytes, 'x') << "\n";
  for (const std::string& path : {std::string("/dev/zero"), fifo, dir.path()}) {
    auto spec = spec::LoadJobSpecFile(path);
    ASSERT_FALSE(spec.ok()) << path;
    EXPECT_EQ(spec.status().message().rfind(path + ": not a regular file", 0), 0u) << spec.status();
  }
  auto spec = spec::LoadJobSpecFile(huge);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message().rfind(huge + ": ", 0), 0u) << spec.status();
  EXPECT_NE(spec.status().message().find("at most"), absl::string_view::npos) << spec.status();
}

TEST(JobSpecFile, TheExamplesInTheRepositoryParse) {
  int examples = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(STOKE_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    ++examples;
    auto spec = spec::LoadJobSpecFile(entry.path().string());
    EXPECT_TRUE(spec.ok()) << entry.path() << ": " << spec.status();
  }
  EXPECT_GE(examples, 5);
}

}  // namespace
}  // namespace stoke::client
