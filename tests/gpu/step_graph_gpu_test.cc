// A capture that fails part-way (here on a host read of a device value, which no CUDA
// graph can hold) leaves the process able to draw random numbers on the device again:
// the step falls back to running eagerly, and dropout, augmentation and synthetic data,
// in this job and in every later job of the worker, keep working. Skips without CUDA
// graphs.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <stdexcept>

#include "tests/support/require_cuda.h"
#include "worker/engine/step_graph.h"

namespace stoke::worker {
namespace {

TEST(StepGraphGpu, AFailedCaptureLeavesRandomDrawsWorking) {
  STOKE_SKIP_WITHOUT_CUDA();
  if (!StepGraph::Supported()) GTEST_SKIP() << "this build has no CUDA graphs";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  StepGraph graph(torch::Device(torch::kCUDA, 0));
  graph.Warm([&] { (void)torch::rand({8}, cuda); });
  EXPECT_THROW(graph.Capture([&] {
    const torch::Tensor drawn = torch::rand({8}, cuda);  // the generator joins the capture
    (void)drawn.sum().item<float>();                     // and the capture then fails
  }),
               std::runtime_error);
  torch::Tensor after;
  ASSERT_NO_THROW(after = torch::rand({4096}, cuda));
  EXPECT_GT(after.std().item<double>(), 0.2) << "draws after the failed capture are not random";
  ASSERT_NO_THROW((void)torch::dropout(torch::ones({4096}, cuda), 0.5, /*train=*/true));
}

}  // namespace
}  // namespace stoke::worker
