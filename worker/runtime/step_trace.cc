#include "worker/runtime/step_trace.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "worker/runtime/kernel_trace.h"

namespace stoke::worker {

StepTrace::StepTrace(const std::string& job_id, int rank, Log log) : log_(std::move(log)) {
  const char* dir = std::getenv("STOKE_TRACE_DIR");
  if (dir == nullptr || *dir == '\0') return;
  if (const char* steps = std::getenv("STOKE_TRACE_STEPS")) {
    unsigned long long first = 0, count = 0;
    if (std::sscanf(steps, "%llu,%llu", &first, &count) != 2 || first == 0 || count == 0) {
      log_("STOKE_TRACE_STEPS=\"" + std::string(steps) +
           "\" is not \"first,count\" with both above 0; no trace");
      return;
    }
    first_ = first;
    last_ = first + count - 1;
  }
  path_ = std::string(dir) + "/trace-" + job_id + "-rank" + std::to_string(rank) + ".json";
}

StepTrace::~StepTrace() = default;

void StepTrace::BeforeStep(uint64_t step) {
  if (path_.empty() || step != first_) return;
  try {
    trace_ = KernelTrace::Start();
  } catch (const std::exception& e) {
    log_(e.what());
  }
}

void StepTrace::AfterStep(uint64_t step) {
  if (!trace_ || step != last_) return;
  try {
    trace_->Stop(path_);
    log_("kernel trace of steps " + std::to_string(first_) + "-" + std::to_string(last_) +
         " written to " + path_);
  } catch (const std::exception& e) {
    log_(e.what());
  }
  trace_.reset();
}

}  // namespace stoke::worker
