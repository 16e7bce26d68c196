// The job store: durable home of every job and every event it emitted. The coordinator
// writes each state transition here before acting on it, so a restart loses nothing
// that was acknowledged. SQLite is the embedded default (sqlite_job_store.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "stoke/v1/coordinator.pb.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

struct JobQuery {
  // Only jobs in these states; empty means every state.
  std::vector<v1::JobState> states;
  // At most this many jobs (newest first).
  uint32_t limit = 50;
  // Only jobs with a numerically smaller id: the previous page's last id.
  uint64_t before_id = 0;
  // Only jobs of this owner; empty means anyone's.
  std::string owner;
};

struct AuditPage {
  std::vector<v1::AuditEntry> entries;
  bool more = false;
};

struct JobPage {
  std::vector<v1::Job> jobs;
  // True when jobs older than the last one returned match the query too.
  bool more = false;
};

// A job as it is after `events`, for CommitBatch.
struct JobUpdate {
  v1::Job job;
  std::vector<v1::JobEvent> events;
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Stores a new job, giving it the next id (written into the returned copy), and its
  // first events, in one transaction.
  virtual absl::StatusOr<v1::Job> CreateJob(v1::Job job, absl::Span<const v1::JobEvent> events) = 0;
  // As CreateJob, and appends `audit` to the audit log (its target set to the new job's
  // id) in the same transaction: a submission and its audit entry are stored together,
  // or neither is.
  virtual absl::StatusOr<v1::Job> CreateAuditedJob(v1::Job job,
                                                   absl::Span<const v1::JobEvent> events,
                                                   v1::AuditEntry audit) = 0;

  // Replaces the stored job with `job` and appends `events`, in one transaction.
  virtual absl::Status Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) = 0;

  // Commits every update in order, as Commit does, in one transaction when the store can:
  // the telemetry writer's group commit (one sync for many reports). Several updates may
  // name the same job; the last one's row is the one kept. This default commits them one
  // by one, stopping at the first failure.
  virtual absl::Status CommitBatch(absl::Span<const JobUpdate> updates) {
    for (const auto& update : updates) {
      if (auto s = Commit(update.job, update.events); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // NOT_FOUND when no job has this id.
  virtual absl::StatusOr<v1::Job> GetJob(const std::string& id) = 0;

  // The job created with this SubmitJobRequest.request_id (stored by CreateJob from
  // job.request_id); NOT_FOUND when none was.
  virtual absl::StatusOr<v1::Job> FindJobByRequestId(const std::string& request_id) = 0;

  virtual absl::StatusOr<JobPage> ListJobs(const JobQuery& query) = 0;

  // Events with seq >= from_seq, in order, at most `limit`.
  virtual absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                               uint64_t from_seq,
                                                               uint32_t limit) = 0;

  // Appends to the audit log, giving the entry the next id.
  virtual absl::Status AppendAudit(const v1::AuditEntry& entry) = 0;
  // Newest first, only entries with an id below before_id (0: from the newest).
  virtual absl::StatusOr<AuditPage> ListAudit(uint64_t before_id, uint32_t limit) = 0;
  // Deletes all but the newest `keep` entries.
  virtual absl::Status PruneAudit(uint64_t keep) = 0;

  // Binds a worker id to the credential that registers it first, and returns the
  // credential it is bound to (this one, or the one that came first).
  virtual absl::StatusOr<std::string> BindWorkerCredential(const std::string& worker_id,
                                                           const std::string& credential) = 0;

  // A Python model's code (a serialized v1::CodeBundle) under its SHA-256: stored once
  // however many jobs share it; storing a digest again does nothing.
  virtual absl::Status PutCode(const std::string& sha256, const std::string& bundle) = 0;
  // NOT_FOUND when no code is stored under the digest.
  virtual absl::StatusOr<std::string> GetCode(const std::string& sha256) = 0;
};

}  // namespace stoke::server
