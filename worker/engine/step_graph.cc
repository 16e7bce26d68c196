#include "worker/engine/step_graph.h"

#include <stdexcept>
#include <string>

#include "worker/runtime/torch_compat.h"

#if STOKE_WITH_CUDA && STOKE_TORCH_AT_LEAST(2, 0)
#define STOKE_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#else
#define STOKE_CUDA_GRAPHS 0
#endif

namespace stoke::worker {

#if STOKE_CUDA_GRAPHS

struct StepGraph::Impl {
  explicit Impl(torch::Device device)
      : device(device), stream(c10::cuda::getStreamFromPool(false, device.index())) {}

  // Runs fn on the capture stream, ordered between the current stream's work before
  // and after.
  void OnCaptureStream(const std::function<void()>& fn) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
    at::cuda::CUDAEvent before;
    before.record(current);
    before.block(stream);
    {
      c10::cuda::CUDAStreamGuard guard(stream);
      fn();
    }
    at::cuda::CUDAEvent after;
    after.record(stream);
    after.block(current);
  }

  torch::Device device;
  c10::cuda::CUDAStream stream;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  bool captured = false;
  bool failed = false;
};

bool StepGraph::Supported() { return true; }

StepGraph::StepGraph(torch::Device device) : impl_(std::make_unique<Impl>(device)) {}

StepGraph::~StepGraph() = default;

void StepGraph::Warm(const std::function<void()>& body) { impl_->OnCaptureStream(body); }

void StepGraph::Capture(const std::function<void()>& body) {
  if (impl_->failed) throw std::runtime_error("an earlier capture failed");
  // As torch.cuda.graph does: nothing of the warm-up may still be running, and cached
  // blocks go back so the graph's pool starts from what the step needs.
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  impl_->graph = std::make_unique<at::cuda::CUDAGraph>();
  std::string error;
  impl_->OnCaptureStream([&] {
    // Thread-local mode: the data loader's threads may wait on their copy events while
    // this thread captures; only this thread's calls must be capture-safe.
    impl_->graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (const std::exception& e) {
      error = e.what();
    }
    try {
      impl_->graph->capture_end();
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  });
  if (!error.empty()) {
    // The capture stream is left behind: its allocations may still be routed to the
    // abandoned graph's pool.
    (void)cudaGetLastError();
    impl_->failed = true;
    throw std::runtime_error(error);
  }
  impl_->captured = true;
}

void StepGraph::Replay() {
  TORCH_CHECK(impl_->captured, "StepGraph::Replay before a successful Capture");
  impl_->graph->replay();
}

#else

struct StepGraph::Impl {};

bool StepGraph::Supported() { return false; }

StepGraph::StepGraph(torch::Device) {}

StepGraph::~StepGraph() = default;

void StepGraph::Warm(const std::function<void()>& body) { body(); }

void StepGraph::Capture(const std::function<void()>&) {
  throw std::runtime_error("this build has no CUDA graphs (CPU-only LibTorch or torch < 2)");
}

void StepGraph::Replay() { TORCH_CHECK(false, "no CUDA graphs in this build"); }

#endif

}  // namespace stoke::worker
