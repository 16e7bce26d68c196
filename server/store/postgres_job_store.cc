#include "server/store/postgres_job_store.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/store/job_id.h"
#include "server/store/postgres_leader_lease.h"
#include "server/store/postgres_schema.h"

namespace stoke::server {

absl::StatusOr<std::unique_ptr<PostgresJobStore>> PostgresJobStore::Open(const Options& options) {
  auto db = PgConnection::Connect(options.url, options.flag);
  if (!db.ok()) return db.status();
  if (auto s = MigratePostgresSchema(**db); !s.ok()) return s;
  return std::unique_ptr<PostgresJobStore>(new PostgresJobStore(*std::move(db)));
}

absl::Status PostgresJobStore::WaitForLeadership(absl::Duration poll,
                                                 const std::function<bool()>& stop) {
  // A leader whose host vanished loses the lease within about this long.
  constexpr absl::Duration kDeadLeader = absl::Seconds(9);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto taken = TryTakeLeaderLease(*db_);
      if (taken.ok() && *taken) {
        if (auto s = ConfigureLeaderSession(*db_, kDeadLeader); !s.ok()) return s;
        const std::string where = db_->description();
        db_->SetSessionSetup([kDeadLeader, where](PgConnection& db) -> absl::Status {
          auto again = TryTakeLeaderLease(db);
          if (!again.ok()) return again.status();
          if (!*again) {
            return absl::FailedPreconditionError(
                absl::StrCat("this coordinator lost its connection to the PostgreSQL store ", where,
                             " and with it the leader lease, which another coordinator now holds"));
          }
          return ConfigureLeaderSession(db, kDeadLeader);
        });
        return absl::OkStatus();
      }
      // An unreachable server is waited out like a busy lease.
    }
    if (stop()) return absl::CancelledError("stopped while waiting for the leader lease");
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(poll));
  }
}

absl::Status PostgresJobStore::CheckLeadership() {
  std::lock_guard<std::mutex> lock(mu_);
  return db_->Exec("SELECT 1").status();
}

absl::Status PostgresJobStore::WriteEvents(int64_t job_id, absl::Span<const v1::JobEvent> events) {
  std::string blob;
  for (const auto& event : events) {
    if (!event.SerializeToString(&blob)) return absl::InternalError("cannot serialize event");
    auto done = db_->Exec(
        "INSERT INTO events (job_id, seq, event) VALUES ($1, $2, $3)",
        PgParams().Int(job_id).Int(static_cast<int64_t>(event.seq())).Bytes(std::move(blob)));
    if (!done.ok()) return done.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> PostgresJobStore::CreateJob(v1::Job job,
                                                    absl::Span<const v1::JobEvent> events) {
  return Create(std::move(job), events, nullptr);
}

absl::StatusOr<v1::Job> PostgresJobStore::CreateAuditedJob(v1::Job job,
                                                           absl::Span<const v1::JobEvent> events,
                                                           v1::AuditEntry audit) {
  return Create(std::move(job), events, &audit);
}

absl::StatusOr<v1::Job> PostgresJobStore::Create(v1::Job job, absl::Span<const v1::JobEvent> events,
                                                 v1::AuditEntry* audit) {
  std::lock_guard<std::mutex> lock(mu_);
  PgTransaction txn(*db_);
  if (!txn.begun().ok()) return txn.begun();
  // The id first, so that the stored blob carries it from the one insert.
  auto next = db_->Exec("SELECT nextval(pg_get_serial_sequence('jobs', 'id'))");
  if (!next.ok()) return next.status();
  const int64_t id = next->Int64(0, 0);
  job.set_id(std::to_string(id));
  std::string blob;
  if (!job.SerializeToString(&blob)) return absl::InternalError("cannot serialize job");
  auto inserted = db_->Exec("INSERT INTO jobs (id, state, owner, job) VALUES ($1, $2, $3, $4)",
                            PgParams().Int(id).Int(job.state()).Bytes(job.owner()).Bytes(blob));
  if (!inserted.ok()) return inserted.status();
  if (auto s = WriteEvents(id, events); !s.ok()) return s;
  if (!job.request_id().empty()) {
    auto request = db_->Exec("INSERT INTO submit_requests (request_id, job_id) VALUES ($1, $2)",
                             PgParams().Bytes(job.request_id()).Int(id));
    if (!request.ok()) return request.status();
  }
  if (audit != nullptr) {
    audit->set_target(job.id());
    if (auto s = InsertAudit(*audit); !s.ok()) return s;
  }
  if (auto s = txn.Commit(); !s.ok()) return s;
  return job;
}

absl::Status PostgresJobStore::Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) {
  int64_t id = 0;
  if (!ParseJobId(job.id(), &id))
    return absl::NotFoundError(absl::StrCat("job ", job.id(), " not found"));
  std::string blob;
  if (!job.SerializeToString(&blob)) return absl::InternalError("cannot serialize job");
  std::lock_guard<std::mutex> lock(mu_);
  PgTransaction txn(*db_);
  if (!txn.begun().ok()) return txn.begun();
  auto updated = db_->Exec("UPDATE jobs SET state = $1, job = $2 WHERE id = $3",
                           PgParams().Int(job.state()).Bytes(std::move(blob)).Int(id));
  if (!updated.ok()) return updated.status();
  if (updated->Affected() != 1)
    return absl::NotFoundError(absl::StrCat("job ", job.id(), " not found"));
  if (auto s = WriteEvents(id, events); !s.ok()) return s;
  return txn.Commit();
}

absl::Status PostgresJobStore::CommitBatch(absl::Span<const JobUpdate> updates) {
  if (updates.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  PgTransaction txn(*db_);
  if (!txn.begun().ok()) return txn.begun();
  // A job's row is written once, as its last update leaves it: one round trip per job
  // rather than per report.
  std::map<int64_t, const v1::Job*> rows;
  for (const auto& update : updates) {
    int64_t id = 0;
    if (!ParseJobId(update.job.id(), &id))
      return absl::NotFoundError(absl::StrCat("job ", update.job.id(), " not found"));
    if (auto s = WriteEvents(id, update.events); !s.ok()) return s;
    rows[id] = &update.job;
  }
  std::string blob;
  for (const auto& [id, job] : rows) {
    if (!job->SerializeToString(&blob)) return absl::InternalError("cannot serialize job");
    auto updated = db_->Exec("UPDATE jobs SET state = $1, job = $2 WHERE id = $3",
                             PgParams().Int(job->state()).Bytes(std::move(blob)).Int(id));
    if (!updated.ok()) return updated.status();
    if (updated->Affected() != 1)
      return absl::NotFoundError(absl::StrCat("job ", job->id(), " not found"));
  }
  return txn.Commit();
}

absl::StatusOr<v1::Job> PostgresJobStore::GetJobLocked(int64_t id, const std::string& name) {
  auto row = db_->Exec("SELECT job FROM jobs WHERE id = $1", PgParams().Int(id));
  if (!row.ok()) return row.status();
  if (row->rows() == 0) return absl::NotFoundError(absl::StrCat("job ", name, " not found"));
  v1::Job job;
  if (!job.ParseFromString(row->Bytes(0, 0))) {
    return absl::DataLossError(
        absl::StrCat("job ", name, " is unreadable in PostgreSQL store ", db_->description()));
  }
  return job;
}

absl::StatusOr<v1::Job> PostgresJobStore::GetJob(const std::string& id) {
  int64_t row = 0;
  if (!ParseJobId(id, &row)) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  std::lock_guard<std::mutex> lock(mu_);
  return GetJobLocked(row, id);
}

absl::StatusOr<v1::Job> PostgresJobStore::FindJobByRequestId(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto row = db_->Exec("SELECT job_id FROM submit_requests WHERE request_id = $1",
                       PgParams().Bytes(request_id));
  if (!row.ok()) return row.status();
  if (row->rows() == 0) return absl::NotFoundError("no job with this request_id");
  const int64_t id = row->Int64(0, 0);
  return GetJobLocked(id, std::to_string(id));
}

absl::StatusOr<JobPage> PostgresJobStore::ListJobs(const JobQuery& query) {
  // One more than asked tells whether another page exists.
  PgParams params;
  params
      .Int(query.before_id > 0
               ? static_cast<int64_t>(std::min<uint64_t>(query.before_id, INT64_MAX))
               : INT64_MAX)
      .Int(static_cast<int64_t>(query.limit) + 1);
  std::string sql = "SELECT job FROM jobs WHERE id < $1";
  if (!query.states.empty()) {
    std::vector<std::string> states;
    for (auto state : query.states) states.push_back(std::to_string(static_cast<int>(state)));
    absl::StrAppend(&sql, " AND state IN (", absl::StrJoin(states, ","), ")");
  }
  if (!query.owner.empty()) {
    absl::StrAppend(&sql, " AND owner = $3");
    params.Bytes(query.owner);
  }
  absl::StrAppend(&sql, " ORDER BY id DESC LIMIT $2");
  std::lock_guard<std::mutex> lock(mu_);
  auto rows = db_->Exec(sql, params);
  if (!rows.ok()) return rows.status();
  JobPage page;
  for (int i = 0; i < rows->rows(); ++i) {
    if (page.jobs.size() == query.limit) {
      page.more = true;
      break;
    }
    v1::Job job;
    if (!job.ParseFromString(rows->Bytes(i, 0))) {
      return absl::DataLossError(
          absl::StrCat("a job row is unreadable in PostgreSQL store ", db_->description()));
    }
    page.jobs.push_back(std::move(job));
  }
  return page;
}

absl::StatusOr<std::vector<v1::JobEvent>> PostgresJobStore::ReadEvents(const std::string& job_id,
                                                                       uint64_t from_seq,
                                                                       uint32_t limit) {
  int64_t id = 0;
  if (!ParseJobId(job_id, &id))
    return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  std::lock_guard<std::mutex> lock(mu_);
  // Sequence numbers are below 2^63; a larger from_seq must not wrap to a negative one
  // (which would replay the job from its start).
  auto rows =
      db_->Exec("SELECT event FROM events WHERE job_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
                PgParams()
                    .Int(id)
                    .Int(static_cast<int64_t>(std::min<uint64_t>(from_seq, INT64_MAX)))
                    .Int(limit));
  if (!rows.ok()) return rows.status();
  std::vector<v1::JobEvent> events;
  events.reserve(rows->rows());
  for (int i = 0; i < rows->rows(); ++i) {
    v1::JobEvent event;
    if (!event.ParseFromString(rows->Bytes(i, 0))) {
      return absl::DataLossError(absl::StrCat("an event of job ", job_id, " is unreadable"));
    }
    events.push_back(std::move(event));
  }
  return events;
}

absl::Status PostgresJobStore::AppendAudit(const v1::AuditEntry& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  return InsertAudit(entry);
}

absl::Status PostgresJobStore::InsertAudit(const v1::AuditEntry& entry) {
  std::string blob;
  if (!entry.SerializeToString(&blob)) return absl::InternalError("cannot serialize audit entry");
  return db_->Exec("INSERT INTO audit (entry) VALUES ($1)", PgParams().Bytes(std::move(blob)))
      .status();
}

absl::Status PostgresJobStore::PruneAudit(uint64_t keep) {
  std::lock_guard<std::mutex> lock(mu_);
  // Ids only grow: everything at or below the newest id minus `keep` goes.
  return db_
      ->Exec("DELETE FROM audit WHERE id <= (SELECT coalesce(max(id), 0) FROM audit) - $1",
             PgParams().Int(static_cast<int64_t>(std::min<uint64_t>(keep, INT64_MAX))))
      .status();
}

absl::StatusOr<AuditPage> PostgresJobStore::ListAudit(uint64_t before_id, uint32_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto rows = db_->Exec(
      "SELECT id, entry FROM audit WHERE id < $1 ORDER BY id DESC LIMIT $2",
      PgParams()
          .Int(before_id > 0 ? static_cast<int64_t>(std::min<uint64_t>(before_id, INT64_MAX))
                             : INT64_MAX)
          .Int(static_cast<int64_t>(limit) + 1));
  if (!rows.ok()) return rows.status();
  AuditPage page;
  for (int i = 0; i < rows->rows(); ++i) {
    if (page.entries.size() == limit) {
      page.more = true;
      break;
    }
    v1::AuditEntry entry;
    if (!entry.ParseFromString(rows->Bytes(i, 1))) {
      return absl::DataLossError(
          absl::StrCat("an audit entry is unreadable in PostgreSQL store ", db_->description()));
    }
    entry.set_id(static_cast<uint64_t>(rows->Int64(i, 0)));
    page.entries.push_back(std::move(entry));
  }
  return page;
}

absl::StatusOr<std::string> PostgresJobStore::BindWorkerCredential(const std::string& worker_id,
                                                                   const std::string& credential) {
  std::lock_guard<std::mutex> lock(mu_);
  // One statement: the row inserted now, or the one a first registration left.
  auto rows = db_->Exec(
      "WITH inserted AS (INSERT INTO worker_credentials (worker_id, credential) VALUES ($1, $2) "
      "ON CONFLICT (worker_id) DO NOTHING RETURNING credential) "
      "SELECT credential FROM inserted UNION ALL "
      "SELECT credential FROM worker_credentials WHERE worker_id = $1",
      PgParams().Bytes(worker_id).Bytes(credential));
  if (!rows.ok()) return rows.status();
  if (rows->rows() > 0) return rows->Bytes(0, 0);
  // Another coordinator's insert landed after this statement's snapshot: read it now.
  rows = db_->Exec("SELECT credential FROM worker_credentials WHERE worker_id = $1",
                   PgParams().Bytes(worker_id));
  if (!rows.ok()) return rows.status();
  if (rows->rows() == 0) return absl::InternalError("worker credential vanished");
  return rows->Bytes(0, 0);
}

absl::Status PostgresJobStore::PutCode(const std::string& sha256, const std::string& bundle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto rows = db_->Exec(
      "INSERT INTO code_bundles (sha256, bundle) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING",
      PgParams().Text(sha256).Bytes(bundle));
  return rows.status();
}

absl::StatusOr<std::string> PostgresJobStore::GetCode(const std::string& sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  auto rows =
      db_->Exec("SELECT bundle FROM code_bundles WHERE sha256 = $1", PgParams().Text(sha256));
  if (!rows.ok()) return rows.status();
  if (rows->rows() == 0) {
    return absl::NotFoundError(absl::StrCat("no code stored under sha256 ", sha256));
  }
  return rows->Bytes(0, 0);
}

}  // namespace stoke::server
