#include "worker/runtime/kernel_trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <set>
#include <stdexcept>

namespace stoke::worker {
namespace {

namespace profiler = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

std::set<impl::ActivityType> Activities() {
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (torch::cuda::is_available()) activities.insert(impl::ActivityType::CUDA);
  return activities;
}

impl::ProfilerConfig Config() { return impl::ProfilerConfig(impl::ProfilerState::KINETO); }

}  // namespace

std::unique_ptr<KernelTrace> KernelTrace::Start() {
  try {
    profiler::prepareProfiler(Config(), Activities());
    profiler::enableProfiler(Config(), Activities());
  } catch (const c10::Error& e) {
    throw std::runtime_error(std::string("cannot start a kernel trace: ") +
                             e.what_without_backtrace());
  }
  return std::unique_ptr<KernelTrace>(new KernelTrace());
}

KernelTrace::~KernelTrace() {
  if (!running_) return;
  try {
    profiler::disableProfiler();
  } catch (...) {  // a destructor does not throw; the trace is dropped either way
  }
}

void KernelTrace::Stop(const std::string& path) {
  // Kernels still queued would be missing from the trace.
  if (torch::cuda::is_available()) torch::cuda::synchronize();
  running_ = false;
  std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  if (!result) throw std::runtime_error("kernel trace: the profiler returned no result");
  try {
    result->save(path);
  } catch (const c10::Error& e) {
    throw std::runtime_error("kernel trace: cannot write " + path + ": " +
                             e.what_without_backtrace());
  }
}

}  // namespace stoke::worker
