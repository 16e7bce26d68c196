// One job's current attempt while it is placed: from the pass that schedules it until it
// succeeds, fails, is re-queued or cancelled. What the coordinator knows of it beyond the
// stored job: the ranks that have started and succeeded, the deadline for all to start,
// the deadline for its workers to reattach (after a coordinator restart, or a worker's
// broken link), and each rank's
// history that its reports are diagnosed against (diagnosis.h, straggler_watch.h). A new
// attempt starts all of it afresh. Not thread-safe: the coordinator's mutex guards it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/core/diagnosis.h"
#include "server/core/straggler_watch.h"
#include "stoke/v1/job.pb.h"
#include "stoke/v1/worker_link.pb.h"

namespace stoke::server {

class Attempt {
 public:
  // Attempt `number` of a job of `ranks` ranks, assigned to its workers at `scheduled_at`:
  // they have until then plus the start timeout to start it.
  Attempt(uint32_t number, uint32_t ranks, absl::Time scheduled_at);
  // The attempt of `job` (scheduled or running) found in the store at start: its workers
  // trained on without a coordinator and have until `reattach_by` to come back holding it.
  static Attempt Recovered(const v1::Job& job, absl::Time now, absl::Time reattach_by);

  uint32_t number() const { return number_; }

  // Rank `rank` has started (or reattached holding a started task): true when that makes
  // every rank started, the moment the job is running.
  bool RankStarted(uint32_t rank);
  bool HasStarted(uint32_t rank) const { return started_.count(rank) > 0; }
  bool AnyStarted() const { return !started_.empty(); }
  // Rank `rank` has finished its work: true when that makes every rank done.
  bool RankSucceeded(uint32_t rank);

  // When its workers were handed it, while they have yet to start it all; nullopt once it
  // runs (or for a recovered running attempt).
  std::optional<absl::Time> scheduled_at() const { return scheduled_at_; }
  void Running() { scheduled_at_.reset(); }
  // Why workers it was placed on are awaited: the coordinator restarted (no fault of the
  // job: back to the queue if they do not come back), or a worker's link broke (a
  // failure, counted against the job's restarts, if it does not).
  enum class Absence { kCoordinatorRestarted, kLinkLost };
  // Until when every worker must have reattached holding it; nullopt when none is awaited.
  std::optional<absl::Time> reattach_deadline() const { return reattach_deadline_; }
  Absence absence() const { return absence_; }
  // Awaits a worker until `deadline` (an earlier wait keeps its deadline and cause).
  void AwaitReattach(absl::Time deadline, Absence why);
  void Reattached() { reattach_deadline_.reset(); }
  // The coordinator stood still for `gap`: its deadlines move by as much.
  void Postpone(absl::Duration gap);

  // A preemption ordered at `ordered_at`, `why` ("for job X", or because a worker is
  // shutting down): the ranks stop at a step boundary and the job goes back to the queue.
  struct Preemption {
    absl::Time ordered_at;
    std::string why;
  };
  const std::optional<Preemption>& preemption() const { return preemption_; }
  void Preempt(absl::Time ordered_at, std::string why);
  // Rank `rank` has stopped for the preemption: true when that makes every rank stopped.
  bool RankStopped(uint32_t rank);

  // Joins the diagnoses of rank `rank`'s training samples to `report` (which `job`, the
  // attempt's job, received), given the rank's device readings; when who straggles
  // changes, says so in the report's logs and returns the ranks straggling now.
  std::optional<std::vector<v1::Straggler>> Diagnose(const v1::Job& job, uint32_t rank,
                                                     const std::optional<v1::DeviceStats>& device,
                                                     v1::TaskReport& report);

 private:
  uint32_t number_;
  uint32_t ranks_;
  std::set<uint32_t> started_;
  std::set<uint32_t> succeeded_;
  std::optional<absl::Time> scheduled_at_;
  std::optional<absl::Time> reattach_deadline_;
  std::optional<Preemption> preemption_;
  std::set<uint32_t> stopped_;
  Absence absence_ = Absence::kCoordinatorRestarted;
  std::map<uint32_t, RankDiagnostician> diagnosticians_;
  // Jobs of several ranks: whether one holds the others back.
  std::optional<StragglerWatch> stragglers_;
};

}  // namespace stoke::server
