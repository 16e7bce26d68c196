#include "server/core/job_startup.h"

#include <cmath>

#include "absl/time/time.h"
#include "server/common/time_util.h"

namespace stoke::server {
namespace {

bool Plausible(double seconds) {
  constexpr double kYear = 365.0 * 24 * 3600;
  return std::isfinite(seconds) && seconds >= 0 && seconds <= kYear;
}

}  // namespace

std::optional<v1::JobStartup> JobStartupFrom(const v1::Job& job, const v1::WorkerStartup& worker) {
  for (double part : {worker.seconds(), worker.data_seconds(), worker.model_seconds(),
                      worker.batch_search_seconds(), worker.first_step_seconds()}) {
    if (!Plausible(part)) {
      return std::nullopt;
    }
  }
  if (!job.has_queue_time() || !job.has_start_time()) {
    return std::nullopt;
  }
  const absl::Time queued = FromProto(job.queue_time());
  const absl::Time scheduled = FromProto(job.start_time());
  const absl::Time first_step = scheduled + absl::Seconds(worker.seconds());
  v1::JobStartup startup;
  startup.set_seconds(absl::ToDoubleSeconds(first_step - queued));
  startup.set_queued_seconds(absl::ToDoubleSeconds(scheduled - queued));
  *startup.mutable_first_step_time() = ToProto(first_step);
  *startup.mutable_worker() = worker;
  return startup;
}

}  // namespace stoke::server
