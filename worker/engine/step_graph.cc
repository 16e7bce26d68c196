#include "worker/engine/step_graph.h"

#include <mutex>
#include <stdexcept>
#include <string>

#include "worker/runtime/torch_compat.h"

#if STOKE_WITH_CUDA && STOKE_TORCH_AT_LEAST(2, 0)
#define STOKE_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#else
#define STOKE_CUDA_GRAPHS 0
#endif

namespace stoke::worker {

#if STOKE_CUDA_GRAPHS

namespace {

// cuDNN's benchmark mode off for as long as it lives. A convolution whose algorithm the
// warm-up did not find already would otherwise be benchmarked inside the capture, which
// cannot time anything: cuDNN then reports "unable to find an engine" and the capture
// fails. With benchmarking off, what the warm-up found is still used, and anything else
// comes from cuDNN's heuristics.
class NoCudnnBenchmark {
 public:
  NoCudnnBenchmark() : was_(at::globalContext().benchmarkCuDNN()) {
    at::globalContext().setBenchmarkCuDNN(false);
  }
  ~NoCudnnBenchmark() { at::globalContext().setBenchmarkCuDNN(was_); }
  NoCudnnBenchmark(const NoCudnnBenchmark&) = delete;
  NoCudnnBenchmark& operator=(const NoCudnnBenchmark&) = delete;

 private:
  bool was_;
};

// A capture that fails part-way leaves the device's default random generator in capture
// mode: torch's capture_end throws before it releases the generator, and every random
// draw after that (dropout, augmentation, synthetic data) fails with "Offset increment
// outside graph capture", in this job's eager fallback and in every later job of the
// process. A clone of the generator has its seed and offset, out of capture mode.
void ReleaseGeneratorFromCapture(const torch::Device& device) {
#if STOKE_TORCH_AT_LEAST(2, 4)
  at::Generator generator = at::cuda::detail::getDefaultCUDAGenerator(device.index());
  const std::lock_guard<std::mutex> lock(generator.mutex());
  generator.graphsafe_set_state(generator.clone());
#else
  (void)device;
#endif
}

}  // namespace

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
  const NoCudnnBenchmark no_benchmark;
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
    ReleaseGeneratorFromCapture(impl_->device);
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
