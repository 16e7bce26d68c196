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
#include "stoke/v1/job.pb.h"

namespace stoke::server {

struct JobQuery {
  // Only jobs in these states; empty means every state.
  std::vector<v1::JobState> states;
  // At most this many jobs (newest first).
  uint32_t limit = 50;
  // Only jobs with a numerically smaller id: the previous page's last id.
  uint64_t before_id = 0;
};

struct JobPage {
  std::vector<v1::Job> jobs;
  // True when jobs older than the last one returned match the query too.
  bool more = false;
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Stores a new job, giving it the next id (written into the returned copy), and its
  // first events, in one transaction.
  virtual absl::StatusOr<v1::Job> CreateJob(v1::Job job, absl::Span<const v1::JobEvent> events) = 0;

  // Replaces the stored job with `job` and appends `events`, in one transaction.
  virtual absl::Status Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) = 0;

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
};

}  // namespace stoke::server
