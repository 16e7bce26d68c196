// The engine on a CUDA device: device description, and bf16 training that learns. Skips
// on machines without CUDA (CI); run on the GPU machine with `ctest -L gpu`.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <atomic>

#include "tests/support/recording_observer.h"
#include "tests/support/require_cuda.h"
#include "worker/engine/trainer.h"
#include "worker/runtime/devices.h"

namespace stoke::worker {
namespace {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override { STOKE_SKIP_WITHOUT_CUDA(); }
};

using Recorder = stoke::testing::RecordingObserver;

TEST_F(GpuTest, DescribesTheDevice) {
  auto devices = ListCudaDevices();
  ASSERT_FALSE(devices.empty());
  const DeviceInfo& d = devices[0];
  EXPECT_FALSE(d.name.empty());
  EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u) << d.uuid;
  EXPECT_GT(d.memory_total_bytes, 1ull << 30);
}

TEST_F(GpuTest, TrainsInBf16AndLearns) {
  TrainTask task;
  task.job_id = "gpu";
  task.name = "gpu-mlp";
  MlpConfig mlp;
  mlp.input_dim = 256;
  mlp.hidden = {1024, 1024};
  mlp.num_classes = 10;
  task.model = mlp;
  SyntheticDataConfig data;
  data.features = 256;
  data.num_classes = 10;
  task.data.source = data;
  task.training.steps = 400;
  task.training.batch_size = 512;
  task.training.precision = Precision::kBf16;
  task.training.metrics_interval_steps = 50;
  Recorder recorder;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(task, DeviceRef{DeviceKind::kCuda, 0}, recorder, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  ASSERT_EQ(recorder.samples.size(), 8u);
  EXPECT_LT(recorder.samples.back().loss, 0.5 * recorder.samples.front().loss);
  EXPECT_GT(recorder.samples.back().samples_per_second, 0);
  ASSERT_FALSE(recorder.logs.empty());
  EXPECT_NE(recorder.logs[0].find("bf16 autocast"), std::string::npos) << recorder.logs[0];
}

}  // namespace
}  // namespace stoke::worker

#include <torch/torch.h>

#include "worker/engine/multi_tensor_adamw.h"

namespace stoke::worker {
namespace {

// The fused and foreach AdamW routes on CUDA against LibTorch's per-parameter AdamW.
TEST_F(GpuTest, FusedAndForeachAdamWMatchLibTorchsOnCuda) {
  auto make = [] {
    torch::manual_seed(5);
    std::vector<torch::Tensor> params;
    for (int64_t n : {4096, 17, 1024 * 3, 1}) {
      params.push_back(torch::randn({n}, torch::kCUDA).requires_grad_());
    }
    return params;
  };
  const auto options = torch::optim::AdamWOptions(3e-3).weight_decay(0.05);
  for (AdamWRoute route : {AdamWRoute::kFused, AdamWRoute::kForeach}) {
    auto ours = make();
    MultiTensorAdamW optimizer(ours, options, route);
    auto baseline = make();
    torch::optim::AdamW baseline_optimizer(baseline, options);
    for (int step = 1; step <= 5; ++step) {
      torch::manual_seed(50 + step);
      for (size_t i = 0; i < ours.size(); ++i) {
        torch::Tensor g = torch::randn_like(ours[i]);
        ours[i].mutable_grad() = g.clone();
        baseline[i].mutable_grad() = g.clone();
      }
      optimizer.step();
      baseline_optimizer.step();
    }
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], baseline[i], 1e-5, 1e-6))
          << (route == AdamWRoute::kFused ? "fused" : "foreach") << ", parameter " << i << ": "
          << (ours[i] - baseline[i]).abs().max().item<float>();
    }
  }
}

}  // namespace
}  // namespace stoke::worker
