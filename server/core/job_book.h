// The jobs the coordinator is responsible for, and the only code that changes them. Each
// state change is committed to the store (the job row and its new events, in one
// transaction) before memory is updated and before anyone acts on it; then its events are
// published to watchers. Metric samples and log lines go to the telemetry writer when
// there is one: numbered here, written and published by it, never waited for; those still
// queued when the job's state changes are committed with that change instead.
// Unfinished jobs live in memory; finished ones are read from the store.
// Not thread-safe: the Coordinator calls it under its own lock, except for the published
// view (Published, PublishedActive), which readers use without that lock.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/clock.h"
#include "server/core/event_hub.h"
#include "server/core/telemetry_writer.h"
#include "server/store/job_store.h"
#include "stoke/v1/job.pb.h"
#include "stoke/v1/worker_link.pb.h"

namespace stoke::server {

class JobBook {
 public:
  // `telemetry`: null commits reports as state changes are (synchronously).
  JobBook(JobStore& store, EventHub& hub, Clock& clock, TelemetryWriter* telemetry = nullptr)
      : store_(store), hub_(hub), clock_(clock), telemetry_(telemetry) {}

  // Loads every unfinished job, as stored. Those that were scheduled or running stay so:
  // their workers outlive the coordinator, and the Coordinator waits for them to reattach.
  absl::Status Recover();

  // Stores a new PENDING job for an already validated spec.
  // `request_id`: the client's, for idempotent retries; `owner`: who submitted it;
  // `audit`: an audit entry stored in the same transaction (its target the new job's id).
  absl::StatusOr<v1::Job> Create(const v1::JobSpec& spec, const std::string& request_id = "",
                                 const std::string& owner = "",
                                 const v1::AuditEntry* audit = nullptr);

  // An unfinished job, or null.
  const v1::Job* FindActive(const std::string& id) const;
  std::vector<const v1::Job*> Active() const;
  // Jobs that reached each final state since this book was made (for /metrics).
  const std::map<v1::JobState, uint64_t>& finished() const { return finished_; }
  // Any job, from memory when unfinished, else from the store.
  absl::StatusOr<v1::Job> Get(const std::string& id) const;

  // Moves a job to `state` with `message`, after `edit` (if any) has changed other
  // fields. FAILED_PRECONDITION for a move the life cycle does not allow.
  absl::Status Transition(const std::string& id, v1::JobState state, const std::string& message,
                          const std::function<void(v1::Job&)>& edit = nullptr);

  // Changes an unfinished job without moving it (`edit`), with `note` as a line of its
  // log; stored, with the job's queued reports, before it shows.
  absl::Status Amend(const std::string& id, const std::string& note,
                     const std::function<void(v1::Job&)>& edit);

  // One job's move, for TransitionTogether.
  struct Change {
    std::string id;
    v1::JobState state;
    std::string message;
    std::function<void(v1::Job&)> edit;
  };
  // Several jobs' moves (each job at most once) as Transition makes them, stored in one
  // transaction: one disk sync for a scheduling pass that places several jobs. Returns
  // each change's outcome: a move the life cycle refuses fails alone; a store failure
  // fails every other one, and none of them is applied.
  std::vector<absl::Status> TransitionTogether(const std::vector<Change>& changes);

  // Thread-safe, and never waits for a commit: the job as last committed (an unfinished
  // job with its newest reports, as FindActive has it), else as the store has it. Reads
  // (GetJob, ListJobs, WatchJob, /metrics) use these without the Coordinator's lock, which
  // a transition holds through its disk sync.
  absl::StatusOr<v1::Job> Published(const std::string& id) const;
  // Every unfinished job, by id, as published.
  std::vector<v1::Job> PublishedActive() const;

  // Records a worker's metric samples and log lines as events. With a telemetry writer
  // whose queue is full they are dropped (and counted there), the job's latest metrics
  // still updated. `startup`, when given, becomes the job's (rank 0's first step).
  absl::Status AppendReport(const std::string& id, const v1::TaskReport& report, uint32_t rank,
                            const v1::JobStartup* startup = nullptr);

 private:
  // A job's change, ready to be stored: the job as it will be, its new events, and the
  // reports taken from the telemetry writer to be stored before them.
  struct Prepared {
    v1::Job job;
    std::vector<v1::JobEvent> events;
    std::vector<JobUpdate> reports;
  };

  // Prepare, Store and Install for one job.
  absl::Status Commit(const std::string& id, const std::function<void(v1::Job&)>& edit,
                      std::vector<v1::JobEvent> events);
  // Applies `edit` to a copy of `current` and numbers `events` after its last one.
  Prepared Prepare(const v1::Job& current, const std::function<void(v1::Job&)>& edit,
                   std::vector<v1::JobEvent> events, std::vector<JobUpdate> reports);
  // Commits every prepared change (reports first, job by job) in one transaction. On
  // failure nothing is stored, and the reports go back to the telemetry writer.
  absl::Status Store(std::vector<Prepared>& prepared);
  // After Store: replaces the job in memory (or drops a finished one) and publishes its
  // reports, then its events.
  void Install(Prepared prepared);

  // Replaces (or, for a finished job, removes) the job's published copy.
  void Show(const v1::Job& job);
  void Hide(const std::string& id);

  JobStore& store_;
  EventHub& hub_;
  Clock& clock_;
  TelemetryWriter* const telemetry_;
  std::map<std::string, v1::Job> active_;
  // Jobs that reached each final state since this book was made.
  std::map<v1::JobState, uint64_t> finished_;
  // active_ as readers see it: copies made after each change, shared with readers.
  mutable std::mutex view_mu_;
  std::map<std::string, std::shared_ptr<const v1::Job>> view_;
};

bool IsQueued(v1::JobState state);
// Placed on workers: scheduled or running.
bool IsLive(v1::JobState state);
bool IsTransitionAllowed(v1::JobState from, v1::JobState to);
std::string StateName(v1::JobState state);

}  // namespace stoke::server
