// One rank of a job, built and ready to step: the device's settings, the communicator of
// a job of several ranks, the data, the network, the optimizer, fp16's loss scaler, the
// gradient reducer, the step runner, the metric window and the checkpoints, made from
// the task in the order they need each other. The loop (trainer.cc) only steps it.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/common/data_shape.h"
#include "worker/common/task.h"
#include "worker/data/sources.h"
#include "worker/dist/communicator.h"
#include "worker/dist/gradient_reducer.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/metric_window.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/train_step.h"
#include "worker/engine/trainer.h"
#include "worker/models/network.h"
#include "worker/ops/step_context.h"

namespace stoke::worker {

// How the forward pass computes: bf16 where asked, or where AUTO and the device does it
// natively at full speed (CPUs emulate much of bf16, so AUTO keeps them in fp32); fp16
// with a loss scaler where asked (autocast to fp16 on GPUs only: LibTorch's CPU autocast
// knows bf16 alone, so a CPU computes fp32 and still scales the loss).
struct MathChoice {
  bool autocast = false;
  at::ScalarType dtype = at::kBFloat16;
  bool loss_scaling = false;
  std::string label;
};

struct Layout {
  bool channels_last = false;         // the network's weights (and so its activations) NHWC
  bool inputs_channels_last = false;  // the image batches it is given NHWC too
  bool checkpoint_blocks = false;
};

// Members in the order they are built, so that they go in the reverse order: the step
// runner before the optimizer and the reducer, those before the network and the data,
// the communicator and the step context last.
struct TrainingRun {
  TrainTask task;  // batch_size: auto filled in
  DeviceRef device_ref;
  torch::Device device = torch::kCPU;
  DeviceInfo info;
  MathChoice math;
  // What the layers share with the step (own kernels or not, the weight copies, gradient
  // destinations), for the whole run: the batch search, the steps and evaluation decide
  // alike. The loop installs it with a StepContextScope while it steps and evaluates.
  std::unique_ptr<StepContext> context;
  std::unique_ptr<Communicator> communicator;  // several ranks only
  std::optional<Checkpointer> checkpoints;
  DataPipeline data;
  DataShape shape;
  std::shared_ptr<Network> net;
  Layout layout;
  std::vector<torch::Tensor> parameters;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LossScaler> scaler;        // fp16 only
  std::unique_ptr<GradientReducer> reducer;  // several ranks only
  std::unique_ptr<StepRunner> runner;
  std::unique_ptr<MetricWindow> metrics;
  // How long the build took, by part; first_step_seconds is the loop's to fill.
  StartupTimes startup;
  uint64_t first_step = 1;  // after a resumed checkpoint's
  uint64_t total_steps = 0;
  uint64_t steps_per_epoch = 1;
};

// Builds the run, logging what it chose through the observer (the batch search, the
// model and its settings, a resumed checkpoint, the ranks). Throws as RunTraining
// describes. Reading the data looks at `cancel` between pieces.
// `build_network` builds the model (BuildNetwork when unset; the trainer process passes
// one that builds Python models too).
std::unique_ptr<TrainingRun> BuildTrainingRun(const TrainTask& task, const DeviceRef& device,
                                              TrainingObserver& observer,
                                              const std::atomic<bool>& cancel,
                                              const NetworkBuilder& build_network = {});

}  // namespace stoke::worker
