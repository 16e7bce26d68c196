// An opt-in Kineto trace of a few steps of a real job, for profiling what stoke-bench (one
// process, no coordinator) cannot: a rank of a several-GPU job. Set on the worker's
// environment (local workers inherit the coordinator's):
//   STOKE_TRACE_DIR    directory to write trace-<job>-rank<r>.json into (off when unset)
//   STOKE_TRACE_STEPS  "first,count" (default "60,5"): the steps recorded
// A trace that cannot start or be written is logged through `log` and the job trains on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace stoke::worker {

class KernelTrace;

class StepTrace {
 public:
  using Log = std::function<void(const std::string&)>;
  // Reads the environment; a disabled StepTrace does nothing.
  StepTrace(const std::string& job_id, int rank, Log log);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  void BeforeStep(uint64_t step);
  void AfterStep(uint64_t step);

 private:
  std::string path_;  // empty: disabled
  uint64_t first_ = 60;
  uint64_t last_ = 64;
  Log log_;
  std::unique_ptr<KernelTrace> trace_;
};

}  // namespace stoke::worker
