// A Kineto trace of this process: host operators and the device kernels they launch,
// between Start and Stop, written as Chrome trace JSON (chrome://tracing, Perfetto, or
// bench/python/trace_summary.py). What DESIGN.md's "on-demand trace of N steps" records.
// Free of torch headers, so gRPC-side code (stoke-bench) can include it.
#pragma once

#include <memory>
#include <string>

namespace stoke::worker {

class KernelTrace {
 public:
  // Starts recording; throws std::runtime_error when this LibTorch cannot trace (a build
  // without Kineto) or a trace is already running in this process.
  static std::unique_ptr<KernelTrace> Start();
  ~KernelTrace();  // stops without writing, if Stop was not called
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // Waits for the device's queued work, stops recording and writes the trace to `path`.
  // Throws std::runtime_error naming the path when it cannot be written.
  void Stop(const std::string& path);

 private:
  KernelTrace() = default;
  bool running_ = true;
};

}  // namespace stoke::worker
