#include "server/store/sqlite_job_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/store/job_id.h"

namespace stoke::server {
namespace {

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  int prepare_rc() const { return rc_; }
  sqlite3_stmt* get() { return stmt_; }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void BindText(int i, const std::string& text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& blob) {
    sqlite3_bind_blob(stmt_, i, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  }
  int Step() { return sqlite3_step(stmt_); }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  std::string ColumnBlob(int i) {
    const void* data = sqlite3_column_blob(stmt_, i);
    int size = sqlite3_column_bytes(stmt_, i);
    return data ? std::string(static_cast<const char*>(data), size) : std::string();
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

// Rolls back unless Commit() was called, so every early return leaves the file as it was.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {
    rc_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  }
  ~Transaction() {
    if (rc_ == SQLITE_OK && !done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  int begin_rc() const { return rc_; }
  int Commit() {
    done_ = true;
    return sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  }

 private:
  sqlite3* db_;
  int rc_;
  bool done_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const Options& options) {
  // A new store is its user's alone: it holds every job's spec, paths and commands.
  // SQLite gives its journal files (-wal, -shm) the database file's mode.
  if (const int fd = open(options.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      fd >= 0) {
    close(fd);
  }
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(options.path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open job store ", options.path, ": ", msg));
  }
  auto store = std::unique_ptr<SqliteJobStore>(new SqliteJobStore(db, options.path));
  sqlite3_busy_timeout(db, 5000);
  // WAL keeps readers off the writer's back; synchronous=FULL makes a committed
  // transition survive a power cut, not only a crash of the process.
  if (auto s = store->Exec("PRAGMA journal_mode=WAL"); !s.ok()) return s;
  if (auto s = store->Exec("PRAGMA synchronous=FULL"); !s.ok()) return s;
  if (auto s = store->Exec("PRAGMA foreign_keys=ON"); !s.ok()) return s;
  if (options.max_size_bytes > 0) {
    Statement page_size(db, "PRAGMA page_size");
    int64_t bytes_per_page =
        page_size.Step() == SQLITE_ROW ? sqlite3_column_int64(page_size.get(), 0) : 4096;
    int64_t pages = std::max<int64_t>(1, options.max_size_bytes / bytes_per_page);
    if (auto s = store->Exec(absl::StrCat("PRAGMA max_page_count=", pages).c_str()); !s.ok()) {
      return s;
    }
  }
  if (auto s = store->QuickCheck(); !s.ok()) return s;
  if (auto s = store->Migrate(); !s.ok()) return s;
  return store;
}

absl::Status SqliteJobStore::QuickCheck() {
  std::lock_guard<std::mutex> lock(mu_);
  Statement stmt(db_, "PRAGMA quick_check(1)");
  const int rc = stmt.Step();
  if (rc != SQLITE_ROW) return Error(rc, sqlite3_errmsg(db_));
  const std::string result = stmt.ColumnBlob(0);
  if (result == "ok") return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("job store ", path_, " is damaged (PRAGMA quick_check: ", result,
                   "); restore it from a backup (stoke-coordinator --backup; see "
                   "docs/operations.md, \"Backup and restore\") or move it aside to start "
                   "with an empty store"));
}

absl::Status SqliteJobStore::BackupTo(const std::string& destination) {
  sqlite3* out = nullptr;
  int rc = sqlite3_open_v2(destination.c_str(), &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = out ? sqlite3_errmsg(out) : sqlite3_errstr(rc);
    sqlite3_close(out);
    return absl::UnavailableError(absl::StrCat("backup ", destination, ": ", msg));
  }
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_backup* backup = sqlite3_backup_init(out, "main", db_, "main");
  if (backup == nullptr) {
    std::string msg = sqlite3_errmsg(out);
    sqlite3_close(out);
    return absl::UnavailableError(absl::StrCat("backup ", destination, ": ", msg));
  }
  // All pages in one step: from this connection, other writers wait on the busy timeout
  // rather than restart the copy.
  rc = sqlite3_backup_step(backup, -1);
  sqlite3_backup_finish(backup);
  std::string msg = sqlite3_errmsg(out);
  sqlite3_close(out);
  if (rc != SQLITE_DONE) {
    return absl::UnavailableError(absl::StrCat("backup ", destination, ": ", msg));
  }
  return absl::OkStatus();
}

absl::Status CheckStoreNotEmptied(const std::string& db_path, const std::string& jobs_dir) {
  struct stat st;
  if (stat(db_path.c_str(), &st) != 0 || st.st_size != 0) return absl::OkStatus();
  std::string evidence;
  struct stat wal;
  if (stat((db_path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0) {
    evidence = absl::StrCat(db_path, "-wal (", wal.st_size, " bytes)");
  } else if (DIR* dir = opendir(jobs_dir.c_str())) {
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") {
        evidence = absl::StrCat(jobs_dir, "/", name);
        break;
      }
    }
    closedir(dir);
  }
  if (evidence.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "job store ", db_path, " is empty (0 bytes), but ", evidence,
      " shows it held jobs: it was truncated or replaced. Refusing to start with an empty "
      "store. Restore it from a backup (copy the backup file to ",
      db_path, " and remove ", db_path, "-wal and ", db_path,
      "-shm), or, to start over without the old jobs, move ", db_path,
      ", its -wal and -shm files and ", jobs_dir, " aside"));
}

SqliteJobStore::~SqliteJobStore() { sqlite3_close(db_); }

absl::Status SqliteJobStore::Exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return absl::OkStatus();
  std::string msg = err ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return Error(rc, msg.c_str());
}

absl::Status SqliteJobStore::Error(int code, const char* what) const {
  switch (code & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          absl::StrCat("job store ", path_, " is full (disk or size limit): ", what));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat("job store ", path_, " is busy: ", what));
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
      return absl::UnavailableError(absl::StrCat("job store ", path_, ": ", what));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(absl::StrCat("job store ", path_, " is damaged: ", what));
    default:
      return absl::InternalError(absl::StrCat("job store ", path_, ": ", what));
  }
}

namespace {

// The schema's history: kMigrations[v] moves a file from version v to v + 1. Each step
// runs in its own transaction, so an interrupted migration leaves a file some Stoke can
// open.
constexpr const char* kMigrations[] = {
    // Version 1 (from 0, an empty file): jobs and their events.
    R"sql(
    BEGIN;
    CREATE TABLE IF NOT EXISTS jobs (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      state INTEGER NOT NULL,
      job BLOB NOT NULL
    );
    CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, id);
    CREATE TABLE IF NOT EXISTS events (
      job_id INTEGER NOT NULL REFERENCES jobs(id),
      seq INTEGER NOT NULL,
      event BLOB NOT NULL,
      PRIMARY KEY (job_id, seq)
    ) WITHOUT ROWID;
    PRAGMA user_version = 1;
    COMMIT;
    )sql",
    // Version 2: submit request ids (idempotent retries), job owners (broken out for
    // `list --mine`), the audit log, and the credential each worker id is bound to. Jobs
    // stored before have no owner.
    R"sql(
    BEGIN;
    CREATE TABLE IF NOT EXISTS submit_requests (
      request_id TEXT PRIMARY KEY,
      job_id INTEGER NOT NULL REFERENCES jobs(id)
    ) WITHOUT ROWID;
    ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs(owner, id);
    CREATE TABLE IF NOT EXISTS audit (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      entry BLOB NOT NULL
    );
    CREATE TABLE IF NOT EXISTS worker_credentials (
      worker_id TEXT PRIMARY KEY,
      credential TEXT NOT NULL
    ) WITHOUT ROWID;
    PRAGMA user_version = 2;
    COMMIT;
    )sql",
    // Version 3: Python models' code, by its SHA-256.
    R"sql(
    BEGIN;
    CREATE TABLE IF NOT EXISTS code_bundles (
      sha256 TEXT PRIMARY KEY,
      bundle BLOB NOT NULL
    );
    PRAGMA user_version = 3;
    COMMIT;
    )sql",
};
static_assert(std::size(kMigrations) == SqliteJobStore::kSchemaVersion);

}  // namespace

absl::Status SqliteJobStore::Migrate() {
  std::lock_guard<std::mutex> lock(mu_);
  Statement version_stmt(db_, "PRAGMA user_version");
  if (version_stmt.Step() != SQLITE_ROW) return Error(sqlite3_errcode(db_), "reading version");
  int version = sqlite3_column_int(version_stmt.get(), 0);
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job store ", path_, " has schema version ", version, ", newer than this Stoke's ",
        kSchemaVersion, "; run a newer stoke-coordinator or use another --data-dir"));
  }
  for (; version < kSchemaVersion; ++version) {
    if (auto s = Exec(kMigrations[version]); !s.ok()) {
      Exec("ROLLBACK").IgnoreError();
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::WriteJobRow(const v1::Job& job, bool insert, int64_t* id_out) {
  std::string blob;
  if (!job.SerializeToString(&blob)) return absl::InternalError("cannot serialize job");
  if (insert) {
    Statement stmt(db_, "INSERT INTO jobs(state, job, owner) VALUES (?, ?, ?)");
    stmt.Bind(1, job.state());
    stmt.BindBlob(2, blob);
    stmt.BindText(3, job.owner());
    int rc = stmt.Step();
    if (rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
    *id_out = sqlite3_last_insert_rowid(db_);
    return absl::OkStatus();
  }
  Statement stmt(db_, "UPDATE jobs SET state = ?, job = ? WHERE id = ?");
  stmt.Bind(1, job.state());
  stmt.BindBlob(2, blob);
  stmt.Bind(3, *id_out);
  int rc = stmt.Step();
  if (rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  if (sqlite3_changes(db_) != 1)
    return absl::NotFoundError(absl::StrCat("job ", job.id(), " not found"));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::WriteEvents(int64_t job_id, absl::Span<const v1::JobEvent> events) {
  if (events.empty()) return absl::OkStatus();
  Statement stmt(db_, "INSERT INTO events(job_id, seq, event) VALUES (?, ?, ?)");
  std::string blob;
  for (const auto& event : events) {
    if (!event.SerializeToString(&blob)) return absl::InternalError("cannot serialize event");
    stmt.Bind(1, job_id);
    stmt.Bind(2, static_cast<int64_t>(event.seq()));
    stmt.BindBlob(3, blob);
    int rc = stmt.Step();
    if (rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
    stmt.Reset();
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> SqliteJobStore::CreateJob(v1::Job job,
                                                  absl::Span<const v1::JobEvent> events) {
  return Create(std::move(job), events, nullptr);
}

absl::StatusOr<v1::Job> SqliteJobStore::CreateAuditedJob(v1::Job job,
                                                         absl::Span<const v1::JobEvent> events,
                                                         v1::AuditEntry audit) {
  return Create(std::move(job), events, &audit);
}

absl::StatusOr<v1::Job> SqliteJobStore::Create(v1::Job job, absl::Span<const v1::JobEvent> events,
                                               v1::AuditEntry* audit) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction txn(db_);
  if (txn.begin_rc() != SQLITE_OK) return Error(txn.begin_rc(), sqlite3_errmsg(db_));
  int64_t id = 0;
  if (auto s = WriteJobRow(job, /*insert=*/true, &id); !s.ok()) return s;
  // The id is known only after the insert; store it inside the blob too.
  job.set_id(std::to_string(id));
  if (auto s = WriteJobRow(job, /*insert=*/false, &id); !s.ok()) return s;
  if (auto s = WriteEvents(id, events); !s.ok()) return s;
  if (!job.request_id().empty()) {
    Statement stmt(db_, "INSERT INTO submit_requests(request_id, job_id) VALUES (?, ?)");
    stmt.BindBlob(1, job.request_id());
    stmt.Bind(2, id);
    if (int rc = stmt.Step(); rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  }
  if (audit != nullptr) {
    audit->set_target(job.id());
    if (auto s = InsertAudit(*audit); !s.ok()) return s;
  }
  if (int rc = txn.Commit(); rc != SQLITE_OK) return Error(rc, sqlite3_errmsg(db_));
  return job;
}

absl::StatusOr<v1::Job> SqliteJobStore::FindJobByRequestId(const std::string& request_id) {
  int64_t job_id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Statement stmt(db_, "SELECT job_id FROM submit_requests WHERE request_id = ?");
    stmt.BindBlob(1, request_id);
    const int rc = stmt.Step();
    if (rc == SQLITE_DONE) return absl::NotFoundError("no job with this request_id");
    if (rc != SQLITE_ROW) return Error(rc, sqlite3_errmsg(db_));
    job_id = sqlite3_column_int64(stmt.get(), 0);
  }
  return GetJob(std::to_string(job_id));
}

absl::Status SqliteJobStore::Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) {
  int64_t id = 0;
  if (!ParseJobId(job.id(), &id))
    return absl::NotFoundError(absl::StrCat("job ", job.id(), " not found"));
  std::lock_guard<std::mutex> lock(mu_);
  Transaction txn(db_);
  if (txn.begin_rc() != SQLITE_OK) return Error(txn.begin_rc(), sqlite3_errmsg(db_));
  if (auto s = WriteJobRow(job, /*insert=*/false, &id); !s.ok()) return s;
  if (auto s = WriteEvents(id, events); !s.ok()) return s;
  if (int rc = txn.Commit(); rc != SQLITE_OK) return Error(rc, sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::CommitBatch(absl::Span<const JobUpdate> updates) {
  if (updates.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  Transaction txn(db_);
  if (txn.begin_rc() != SQLITE_OK) return Error(txn.begin_rc(), sqlite3_errmsg(db_));
  // A job's row is written once, as its last update leaves it.
  std::map<std::string, const v1::Job*> rows;
  for (const auto& update : updates) {
    int64_t id = 0;
    if (!ParseJobId(update.job.id(), &id)) {
      return absl::NotFoundError(absl::StrCat("job ", update.job.id(), " not found"));
    }
    if (auto s = WriteEvents(id, update.events); !s.ok()) return s;
    rows[update.job.id()] = &update.job;
  }
  for (const auto& [job_id, job] : rows) {
    int64_t id = 0;
    ParseJobId(job_id, &id);
    if (auto s = WriteJobRow(*job, /*insert=*/false, &id); !s.ok()) return s;
  }
  if (int rc = txn.Commit(); rc != SQLITE_OK) return Error(rc, sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> SqliteJobStore::GetJob(const std::string& id) {
  int64_t row = 0;
  if (!ParseJobId(id, &row)) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  std::lock_guard<std::mutex> lock(mu_);
  Statement stmt(db_, "SELECT job FROM jobs WHERE id = ?");
  stmt.Bind(1, row);
  int rc = stmt.Step();
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, sqlite3_errmsg(db_));
  v1::Job job;
  if (!job.ParseFromString(stmt.ColumnBlob(0))) {
    return absl::DataLossError(absl::StrCat("job ", id, " is unreadable in ", path_));
  }
  return job;
}

absl::StatusOr<JobPage> SqliteJobStore::ListJobs(const JobQuery& query) {
  std::string sql = "SELECT job FROM jobs WHERE id < ?1";
  if (!query.states.empty()) {
    std::vector<std::string> states;
    for (auto state : query.states) states.push_back(std::to_string(static_cast<int>(state)));
    absl::StrAppend(&sql, " AND state IN (", absl::StrJoin(states, ","), ")");
  }
  if (!query.owner.empty()) absl::StrAppend(&sql, " AND owner = ?3");
  absl::StrAppend(&sql, " ORDER BY id DESC LIMIT ?2");
  std::lock_guard<std::mutex> lock(mu_);
  Statement stmt(db_, sql.c_str());
  if (stmt.prepare_rc() != SQLITE_OK) return Error(stmt.prepare_rc(), sqlite3_errmsg(db_));
  stmt.Bind(1, query.before_id > 0 ? static_cast<int64_t>(query.before_id) : INT64_MAX);
  // One more than asked tells whether another page exists.
  stmt.Bind(2, static_cast<int64_t>(query.limit) + 1);
  if (!query.owner.empty()) stmt.BindText(3, query.owner);
  JobPage page;
  int rc;
  while ((rc = stmt.Step()) == SQLITE_ROW) {
    if (page.jobs.size() == query.limit) {
      page.more = true;
      break;
    }
    v1::Job job;
    if (!job.ParseFromString(stmt.ColumnBlob(0))) {
      return absl::DataLossError(absl::StrCat("a job row is unreadable in ", path_));
    }
    page.jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  return page;
}

absl::StatusOr<std::vector<v1::JobEvent>> SqliteJobStore::ReadEvents(const std::string& job_id,
                                                                     uint64_t from_seq,
                                                                     uint32_t limit) {
  int64_t row = 0;
  if (!ParseJobId(job_id, &row))
    return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  std::lock_guard<std::mutex> lock(mu_);
  Statement stmt(db_,
                 "SELECT event FROM events WHERE job_id = ? AND seq >= ? ORDER BY seq LIMIT ?");
  stmt.Bind(1, row);
  // Sequence numbers are below 2^63; a larger from_seq must not wrap to a negative one
  // (which would replay the job from its start).
  stmt.Bind(2, static_cast<int64_t>(std::min<uint64_t>(from_seq, INT64_MAX)));
  stmt.Bind(3, limit);
  std::vector<v1::JobEvent> events;
  int rc;
  while ((rc = stmt.Step()) == SQLITE_ROW) {
    v1::JobEvent event;
    if (!event.ParseFromString(stmt.ColumnBlob(0))) {
      return absl::DataLossError(absl::StrCat("an event of job ", job_id, " is unreadable"));
    }
    events.push_back(std::move(event));
  }
  if (rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  return events;
}

absl::Status SqliteJobStore::AppendAudit(const v1::AuditEntry& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  return InsertAudit(entry);
}

absl::Status SqliteJobStore::InsertAudit(const v1::AuditEntry& entry) {
  std::string blob;
  if (!entry.SerializeToString(&blob)) return absl::InternalError("cannot serialize audit entry");
  Statement stmt(db_, "INSERT INTO audit(entry) VALUES (?)");
  stmt.BindBlob(1, blob);
  const int rc = stmt.Step();
  if (rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::PruneAudit(uint64_t keep) {
  std::lock_guard<std::mutex> lock(mu_);
  // Ids only grow: everything at or below the newest id minus `keep` goes.
  Statement stmt(db_, "DELETE FROM audit WHERE id <= (SELECT coalesce(max(id), 0) FROM audit) - ?");
  stmt.Bind(1, static_cast<int64_t>(std::min<uint64_t>(keep, INT64_MAX)));
  const int rc = stmt.Step();
  if (rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::StatusOr<AuditPage> SqliteJobStore::ListAudit(uint64_t before_id, uint32_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement stmt(db_, "SELECT id, entry FROM audit WHERE id < ? ORDER BY id DESC LIMIT ?");
  stmt.Bind(1, before_id > 0 ? static_cast<int64_t>(before_id) : INT64_MAX);
  stmt.Bind(2, static_cast<int64_t>(limit) + 1);
  AuditPage page;
  int rc;
  while ((rc = stmt.Step()) == SQLITE_ROW) {
    if (page.entries.size() == limit) {
      page.more = true;
      break;
    }
    v1::AuditEntry entry;
    if (!entry.ParseFromString(stmt.ColumnBlob(1))) {
      return absl::DataLossError(absl::StrCat("an audit entry is unreadable in ", path_));
    }
    entry.set_id(static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0)));
    page.entries.push_back(std::move(entry));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  return page;
}

absl::StatusOr<std::string> SqliteJobStore::BindWorkerCredential(const std::string& worker_id,
                                                                 const std::string& credential) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement insert(db_,
                   "INSERT INTO worker_credentials(worker_id, credential) VALUES (?, ?) "
                   "ON CONFLICT(worker_id) DO NOTHING");
  insert.BindText(1, worker_id);
  insert.BindText(2, credential);
  int rc = insert.Step();
  if (rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  Statement select(db_, "SELECT credential FROM worker_credentials WHERE worker_id = ?");
  select.BindText(1, worker_id);
  rc = select.Step();
  if (rc != SQLITE_ROW) return Error(rc, sqlite3_errmsg(db_));
  return select.ColumnBlob(0);
}

absl::Status SqliteJobStore::PutCode(const std::string& sha256, const std::string& bundle) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement insert(db_,
                   "INSERT INTO code_bundles(sha256, bundle) VALUES (?, ?) "
                   "ON CONFLICT(sha256) DO NOTHING");
  insert.BindText(1, sha256);
  insert.BindBlob(2, bundle);
  const int rc = insert.Step();
  if (rc != SQLITE_DONE) return Error(rc, sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::StatusOr<std::string> SqliteJobStore::GetCode(const std::string& sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement select(db_, "SELECT bundle FROM code_bundles WHERE sha256 = ?");
  select.BindText(1, sha256);
  const int rc = select.Step();
  if (rc == SQLITE_DONE) {
    return absl::NotFoundError(absl::StrCat("no code stored under sha256 ", sha256));
  }
  if (rc != SQLITE_ROW) return Error(rc, sqlite3_errmsg(db_));
  return select.ColumnBlob(0);
}

}  // namespace stoke::server
