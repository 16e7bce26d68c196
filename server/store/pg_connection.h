// A thin layer over one libpq connection: parameterized statements with binary results,
// results that free themselves, and PostgreSQL's errors turned into absl::Status by their
// SQLSTATE. It knows nothing of jobs; the stores and the leader lease build on it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct pg_conn;
struct pg_result;

namespace stoke::server {

// Values for a statement's $1, $2, ...: integers and text are sent as text, bytes in
// binary (bytea needs no escaping, and may hold any byte).
class PgParams {
 public:
  PgParams& Int(int64_t value);
  PgParams& Text(std::string value);
  PgParams& Bytes(std::string value);

  int size() const { return static_cast<int>(values_.size()); }
  const std::vector<std::string>& values() const { return values_; }
  const std::vector<int>& formats() const { return formats_; }

 private:
  std::vector<std::string> values_;
  std::vector<int> formats_;
};

// The rows of one statement, in binary format: bytea columns are the raw bytes, and
// integer columns (int4, int8) are read with Int64.
class PgResult {
 public:
  explicit PgResult(pg_result* result);
  int rows() const;
  bool IsNull(int row, int column) const;
  std::string Bytes(int row, int column) const;
  int64_t Int64(int row, int column) const;
  // Rows changed by an INSERT, UPDATE or DELETE.
  int64_t Affected() const;

 private:
  struct Deleter {
    void operator()(pg_result* result) const;
  };
  std::unique_ptr<pg_result, Deleter> result_;
};

class PgConnection {
 public:
  // `url`: a libpq connection URI (postgres://user:password@host:port/db?...) or
  // key=value string. `flag` names where it came from in errors (e.g. "--store"), which
  // never show the password.
  static absl::StatusOr<std::unique_ptr<PgConnection>> Connect(const std::string& url,
                                                               const std::string& flag);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // One statement. A connection found broken is re-established first, once; a statement
  // that fails because the connection broke is UNAVAILABLE and is not retried here (it
  // may have been inside a transaction, which the server rolled back).
  absl::StatusOr<PgResult> Exec(const std::string& sql, const PgParams& params = PgParams());
  // Several statements separated by semicolons, without parameters (schema changes).
  absl::Status ExecScript(const std::string& sql);

  // Runs on every new session after a reconnect, before the statement that found the
  // connection broken is retried. An error fences the connection: from then on every
  // call fails with that error (how a coordinator that lost its leader lease is kept from
  // writing; see postgres_leader_lease.h).
  void SetSessionSetup(std::function<absl::Status(PgConnection&)> setup) {
    session_setup_ = std::move(setup);
  }

  // "user@host:port/db": the server, for messages (no password).
  const std::string& description() const { return description_; }

 private:
  PgConnection(pg_conn* conn, std::string url, std::string flag);
  absl::Status EnsureConnected();
  absl::Status ResultStatus(pg_result* result, const std::string& sql) const;

  pg_conn* conn_;
  std::function<absl::Status(PgConnection&)> session_setup_;
  absl::Status fenced_;
  const std::string url_;
  const std::string flag_;
  std::string description_;
};

// BEGIN at construction; ROLLBACK when destroyed unless Commit() was called, so every
// early return leaves the database as it was.
class PgTransaction {
 public:
  explicit PgTransaction(PgConnection& db) : db_(db), begun_(db.ExecScript("BEGIN")) {}
  ~PgTransaction() {
    if (begun_.ok() && !done_) db_.ExecScript("ROLLBACK").IgnoreError();
  }
  PgTransaction(const PgTransaction&) = delete;
  PgTransaction& operator=(const PgTransaction&) = delete;

  const absl::Status& begun() const { return begun_; }
  absl::Status Commit() {
    done_ = true;
    return db_.ExecScript("COMMIT");
  }

 private:
  PgConnection& db_;
  const absl::Status begun_;
  bool done_ = false;
};

// Checks the syntax of a connection URL without connecting: INVALID_ARGUMENT naming
// `flag` and saying what is wrong.
absl::Status CheckPostgresUrl(const std::string& url, const std::string& flag);

// The URL with its password replaced by "***", for messages and logs.
std::string RedactedPostgresUrl(const std::string& url);

// True for the URLs that select PostgreSQL: postgres:// and postgresql://.
bool IsPostgresUrl(const std::string& url);

}  // namespace stoke::server
