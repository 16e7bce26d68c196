// One training step captured as a CUDA graph and replayed: the whole step's kernels
// (forward, backward, optimizer) launch with one call instead of hundreds, which is what
// bounds small models' speed. Capture runs the body once on a stream of its own, where
// nothing executes; tensors the body allocates come from the graph's private memory pool
// and keep their addresses, so every replay reads the same input buffers and writes the
// same outputs (the caller copies each new batch into those buffers first).
//
// A body that cannot be captured (a host read of a device value, a synchronisation, an
// operation CUDA graphs do not support) makes Capture throw with CUDA's reason; the graph
// is then left unused and the step must run eagerly.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>

namespace stoke::worker {

class StepGraph {
 public:
  // Whether this build can capture at all (CUDA, torch 2).
  static bool Supported();

  explicit StepGraph(torch::Device device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Runs `body` eagerly on the capture stream, ordered after the current stream's work
  // and before its later work: the warm-up steps before capture, so that lazily created
  // state (optimizer moments, cuBLAS workspaces, cuDNN plans) exists beforehand.
  void Warm(const std::function<void()>& body);
  // Records `body` without running it. Throws std::runtime_error naming the reason.
  void Capture(const std::function<void()>& body);
  // Launches the captured step on the current stream.
  void Replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoke::worker
