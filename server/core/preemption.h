// Which running jobs to preempt so that waiting jobs of higher priority can start: a pure
// function of the queue, the running jobs and the free devices (no state, no I/O), so that
// its scenarios are tested as a table.
//
// A victim is stopped at a step boundary with a checkpoint of that step (the coordinator
// asks its workers), and queued again to resume from there: what it loses is the time to
// stop and start again, not steps. So:
// - a victim is a preemptible job of strictly lower priority than the waiting job (but a
//   job within its group's guarantee only for a job of the same group), or, when the
//   waiting job's group's guarantee covers it (quotas.h), a job that borrows devices
//   beyond its own group's guarantee, whatever its priority, unless an admin protected it
//   (resources.preemptible: false);
// - the waiting jobs are served in the scheduler's order, each preempting only what it
//   lacks after the devices already free or coming free (jobs already stopping);
// - victims are taken lowest priority first, then the one whose attempt started last
//   (the least run time to lose should its stop miss its deadline), then the smallest;
//   victims that turn out not to be needed (a larger one taken later covers them) are
//   spared;
// - a job that cannot be helped (not enough preemptible devices below it) preempts
//   nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/core/scheduler.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

struct RunningJob {
  std::string id;
  int32_t priority = 0;
  bool preemptible = false;
  // resources.preemptible: false, set explicitly (an admin's protection).
  bool protected_job = false;
  // Holds devices beyond its group's guarantee (Quotas::Borrowing), or within it; with no
  // quotas, neither.
  bool borrowing = false;
  bool guaranteed = false;
  std::string group;
  uint32_t devices = 1;
  v1::DeviceType type = v1::DEVICE_TYPE_CPU;
  // When its current attempt was scheduled.
  absl::Time since;
  // Already being stopped (preempted, cancelled): its devices are coming free.
  bool stopping = false;
};

struct PlannedPreemption {
  std::string victim;
  std::string for_job;
};

// `waiting`: the jobs the scheduler could not start, in its order (Scheduler::Order).
// `free`: devices free after the scheduler's starts, by type.
std::vector<PlannedPreemption> PlanPreemptions(const std::vector<QueuedJob>& waiting,
                                               const std::vector<RunningJob>& running,
                                               const DeviceCapacity& free,
                                               const DeviceCapacity& capacity);

}  // namespace stoke::server
