// JobStore on a PostgreSQL database (libpq), for several coordinators' worth of history
// and for a standby coordinator. Same semantics as the SQLite store: serialized protobuf
// rows with state, owner and id broken out for queries, events keyed by (job, seq), each
// write one transaction. Schema versions: postgres_schema.h.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/store/job_store.h"
#include "server/store/pg_connection.h"

namespace stoke::server {

class PostgresJobStore final : public JobStore {
 public:
  struct Options {
    // postgres://user:password@host:port/database?... (a libpq connection URI).
    std::string url;
    // Names the URL's origin in errors, e.g. "--store".
    std::string flag = "--store";
  };

  // Connects and migrates the schema: UNAVAILABLE when the server cannot be reached,
  // INVALID_ARGUMENT for a malformed URL, FAILED_PRECONDITION for a newer schema.
  static absl::StatusOr<std::unique_ptr<PostgresJobStore>> Open(const Options& options);

  // Coordinators sharing the database: blocks until this one holds the leader lease
  // (postgres_leader_lease.h), trying every `poll`; CANCELLED as soon as `stop` says so.
  // From then on, should its session end and another coordinator take the lease, every
  // call fails FAILED_PRECONDITION: a deposed leader writes nothing.
  absl::Status WaitForLeadership(absl::Duration poll, const std::function<bool()>& stop);
  // A round trip on the leader's session: OK while this coordinator leads, UNAVAILABLE
  // while the server does not answer, FAILED_PRECONDITION once the lease is lost.
  absl::Status CheckLeadership();

  absl::StatusOr<v1::Job> CreateJob(v1::Job job, absl::Span<const v1::JobEvent> events) override;
  absl::StatusOr<v1::Job> CreateAuditedJob(v1::Job job, absl::Span<const v1::JobEvent> events,
                                           v1::AuditEntry audit) override;
  absl::Status Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) override;
  // One transaction for the whole batch (the telemetry writer's group commit).
  absl::Status CommitBatch(absl::Span<const JobUpdate> updates) override;
  absl::StatusOr<v1::Job> GetJob(const std::string& id) override;
  absl::StatusOr<v1::Job> FindJobByRequestId(const std::string& request_id) override;
  absl::StatusOr<JobPage> ListJobs(const JobQuery& query) override;
  absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(const std::string& job_id, uint64_t from_seq,
                                                       uint32_t limit) override;
  absl::Status AppendAudit(const v1::AuditEntry& entry) override;
  absl::StatusOr<AuditPage> ListAudit(uint64_t before_id, uint32_t limit) override;
  absl::Status PruneAudit(uint64_t keep) override;
  absl::StatusOr<std::string> BindWorkerCredential(const std::string& worker_id,
                                                   const std::string& credential) override;
  absl::Status PutCode(const std::string& sha256, const std::string& bundle) override;
  absl::StatusOr<std::string> GetCode(const std::string& sha256) override;

 private:
  explicit PostgresJobStore(std::unique_ptr<PgConnection> db) : db_(std::move(db)) {}
  absl::StatusOr<v1::Job> GetJobLocked(int64_t id, const std::string& name);
  absl::Status WriteEvents(int64_t job_id, absl::Span<const v1::JobEvent> events);
  // CreateJob, and with `audit` CreateAuditedJob.
  absl::StatusOr<v1::Job> Create(v1::Job job, absl::Span<const v1::JobEvent> events,
                                 v1::AuditEntry* audit);
  // Under mu_, inside a transaction or as one of its own.
  absl::Status InsertAudit(const v1::AuditEntry& entry);

  std::mutex mu_;  // one connection, used by one thread at a time
  std::unique_ptr<PgConnection> db_;
};

}  // namespace stoke::server
