// JobStore on an SQLite file in write-ahead-log mode. Jobs are stored as serialized
// protobuf rows with their state and id broken out for queries; events in their own table
// keyed by (job, seq). The schema carries a version (PRAGMA user_version) so that a later
// Stoke can migrate it and an older one refuses a newer file rather than misreading it.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/job_store.h"

struct sqlite3;

namespace stoke::server {

class SqliteJobStore final : public JobStore {
 public:
  struct Options {
    std::string path;
    // Upper bound on the file size; 0 means none. Writes past it fail the way a full
    // disk does, which is how tests exercise that failure.
    uint64_t max_size_bytes = 0;
  };

  static constexpr int kSchemaVersion = 3;

  // Opens (creating if need be) and checks the file: PRAGMA quick_check must pass, so a
  // damaged store is refused at start (DATA_LOSS naming it) rather than failing jobs later.
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const Options& options);
  ~SqliteJobStore() override;

  // A consistent copy of the store at `destination` (SQLite's online backup: safe while
  // this or another process writes to the store). Replaces the file if it exists.
  absl::Status BackupTo(const std::string& destination);

  absl::StatusOr<v1::Job> CreateJob(v1::Job job, absl::Span<const v1::JobEvent> events) override;
  absl::StatusOr<v1::Job> CreateAuditedJob(v1::Job job, absl::Span<const v1::JobEvent> events,
                                           v1::AuditEntry audit) override;
  absl::Status Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) override;
  // One transaction for all: one sync however many reports it carries.
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
  SqliteJobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Migrate();
  absl::Status QuickCheck();
  absl::Status Exec(const char* sql);
  absl::Status Error(int code, const char* what) const;
  absl::Status WriteJobRow(const v1::Job& job, bool insert, int64_t* id_out);
  absl::Status WriteEvents(int64_t job_id, absl::Span<const v1::JobEvent> events);
  // CreateJob, and with `audit` CreateAuditedJob.
  absl::StatusOr<v1::Job> Create(v1::Job job, absl::Span<const v1::JobEvent> events,
                                 v1::AuditEntry* audit);
  // Under mu_, inside a transaction or as one of its own.
  absl::Status InsertAudit(const v1::AuditEntry& entry);

  std::mutex mu_;  // one connection, used by one thread at a time
  sqlite3* db_;
  const std::string path_;
};

// Before opening `db_path`: refuses (FAILED_PRECONDITION, saying how to restore or start
// over) a store file of zero bytes when its write-ahead log or the jobs folder show it held
// jobs; opened, it would be an empty store, and every job would be silently gone.
absl::Status CheckStoreNotEmptied(const std::string& db_path, const std::string& jobs_dir);

}  // namespace stoke::server
