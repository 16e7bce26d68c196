#include "server/store/pg_connection.h"

#include <endian.h>
#include <libpq-fe.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace stoke::server {
namespace {

// libpq ends its messages with a newline; ours do not.
std::string Trimmed(const char* message) {
  return std::string(absl::StripTrailingAsciiWhitespace(message ? message : ""));
}

}  // namespace

PgParams& PgParams::Int(int64_t value) {
  values_.push_back(std::to_string(value));
  formats_.push_back(0);
  return *this;
}

PgParams& PgParams::Text(std::string value) {
  values_.push_back(std::move(value));
  formats_.push_back(0);
  return *this;
}

PgParams& PgParams::Bytes(std::string value) {
  values_.push_back(std::move(value));
  formats_.push_back(1);
  return *this;
}

void PgResult::Deleter::operator()(pg_result* result) const { PQclear(result); }

PgResult::PgResult(pg_result* result) : result_(result) {}

int PgResult::rows() const { return PQntuples(result_.get()); }

bool PgResult::IsNull(int row, int column) const {
  return PQgetisnull(result_.get(), row, column) != 0;
}

std::string PgResult::Bytes(int row, int column) const {
  return std::string(PQgetvalue(result_.get(), row, column),
                     PQgetlength(result_.get(), row, column));
}

int64_t PgResult::Int64(int row, int column) const {
  const char* data = PQgetvalue(result_.get(), row, column);
  // Binary results are in network byte order, as wide as the column's type.
  switch (PQgetlength(result_.get(), row, column)) {
    case 8: {
      uint64_t v;
      std::memcpy(&v, data, 8);
      return static_cast<int64_t>(be64toh(v));
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, data, 4);
      return static_cast<int32_t>(be32toh(v));
    }
    case 2: {
      uint16_t v;
      std::memcpy(&v, data, 2);
      return static_cast<int16_t>(be16toh(v));
    }
    default:
      return 0;
  }
}

int64_t PgResult::Affected() const { return std::atoll(PQcmdTuples(result_.get())); }

bool IsPostgresUrl(const std::string& url) {
  return absl::StartsWith(url, "postgres://") || absl::StartsWith(url, "postgresql://");
}

std::string RedactedPostgresUrl(const std::string& store_url) {
  // scheme://user:password@host...: the password is between the first ':' after the
  // scheme and the last '@' before the path.
  const auto scheme_end = store_url.find("://");
  if (scheme_end == std::string::npos) return store_url;
  const auto authority_start = scheme_end + 3;
  const auto path_start = store_url.find('/', authority_start);
  const auto at =
      store_url.rfind('@', path_start == std::string::npos ? std::string::npos : path_start);
  if (at == std::string::npos || at < authority_start) return store_url;
  const auto colon = store_url.find(':', authority_start);
  if (colon == std::string::npos || colon > at) return store_url;
  return absl::StrCat(store_url.substr(0, colon + 1), "***", store_url.substr(at));
}

absl::Status CheckPostgresUrl(const std::string& url, const std::string& flag) {
  if (!IsPostgresUrl(url)) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": expected a PostgreSQL URL (postgres://user@host:port/database), got \"", url,
        "\""));
  }
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    std::string why = error ? Trimmed(error) : "out of memory";
    PQfreemem(error);
    // libpq quotes the URL, password and all.
    why = absl::StrReplaceAll(why, {{url, RedactedPostgresUrl(url)}});
    return absl::InvalidArgumentError(absl::StrCat(flag, ": not a valid PostgreSQL URL: ", why));
  }
  PQconninfoFree(options);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PgConnection>> PgConnection::Connect(const std::string& url,
                                                                    const std::string& flag) {
  if (auto s = CheckPostgresUrl(url, flag); !s.ok()) return s;
  // A server that does not answer must fail the start, not hang it; the URL's own
  // connect_timeout, if any, wins (later keywords override earlier ones).
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "stoke-coordinator", url.c_str(), nullptr};
  pg_conn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr) return absl::ResourceExhaustedError(absl::StrCat(flag, ": out of memory"));
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string why = Trimmed(PQerrorMessage(conn));
    PQfinish(conn);
    return absl::UnavailableError(absl::StrCat(flag, ": cannot connect to PostgreSQL: ", why));
  }
  return std::unique_ptr<PgConnection>(new PgConnection(conn, url, flag));
}

PgConnection::PgConnection(pg_conn* conn, std::string url, std::string flag)
    : conn_(conn), url_(std::move(url)), flag_(std::move(flag)) {
  const char* host = PQhost(conn_);
  // A unix socket's host is its folder.
  description_ =
      absl::StrCat(PQuser(conn_), "@", host ? host : "", ":", PQport(conn_), "/", PQdb(conn_));
  // Notices (e.g. "relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
}

PgConnection::~PgConnection() { PQfinish(conn_); }

absl::Status PgConnection::EnsureConnected() {
  if (!fenced_.ok()) return fenced_;
  if (PQstatus(conn_) == CONNECTION_OK) return absl::OkStatus();
  PQreset(conn_);
  if (PQstatus(conn_) == CONNECTION_OK) {
    if (!session_setup_) return absl::OkStatus();
    absl::Status setup = session_setup_(*this);
    // A session that could not be set up is of no use; one that is merely unreachable
    // again will be retried by the next call.
    if (!setup.ok() && setup.code() != absl::StatusCode::kUnavailable) fenced_ = setup;
    return setup;
  }
  return absl::UnavailableError(absl::StrCat(
      "PostgreSQL store ", description_, ": connection lost: ", Trimmed(PQerrorMessage(conn_))));
}

absl::Status PgConnection::ResultStatus(pg_result* result, const std::string& sql) const {
  const ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return absl::OkStatus();
  const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const std::string sqlstate = state ? state : "";
  const std::string message =
      Trimmed(result && PQresultErrorMessage(result)[0] ? PQresultErrorMessage(result)
                                                        : PQerrorMessage(conn_));
  const std::string where = absl::StrCat("PostgreSQL store ", description_, ": ");
  // No SQLSTATE: the connection itself failed.
  if (sqlstate.empty() || absl::StartsWith(sqlstate, "08") || absl::StartsWith(sqlstate, "57P")) {
    return absl::UnavailableError(absl::StrCat(where, "unavailable: ", message));
  }
  if (sqlstate == "53100") {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, "the server's disk is full: ", message));
  }
  if (absl::StartsWith(sqlstate, "53")) {
    return absl::ResourceExhaustedError(absl::StrCat(where, message));
  }
  if (sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03") {
    return absl::UnavailableError(absl::StrCat(where, "busy: ", message));
  }
  if (sqlstate == "23505") return absl::AlreadyExistsError(absl::StrCat(where, message));
  if (sqlstate == "XX001" || sqlstate == "XX002") {
    return absl::DataLossError(absl::StrCat(where, "damaged: ", message));
  }
  // Anything else is a bug of ours or a schema someone changed by hand: name the statement.
  return absl::InternalError(
      absl::StrCat(where, message, " [SQLSTATE ", sqlstate, "] in: ", sql.substr(0, 120)));
}

absl::StatusOr<PgResult> PgConnection::Exec(const std::string& sql, const PgParams& params) {
  if (auto s = EnsureConnected(); !s.ok()) return s;
  std::vector<const char*> values;
  std::vector<int> lengths;
  for (const std::string& value : params.values()) {
    values.push_back(value.data());
    lengths.push_back(static_cast<int>(value.size()));
  }
  pg_result* raw = PQexecParams(conn_, sql.c_str(), params.size(), /*paramTypes=*/nullptr,
                                values.data(), lengths.data(), params.formats().data(),
                                /*resultFormat=binary*/ 1);
  PgResult result(raw);  // frees it on every path
  if (auto s = ResultStatus(raw, sql); !s.ok()) return s;
  return result;
}

absl::Status PgConnection::ExecScript(const std::string& sql) {
  if (auto s = EnsureConnected(); !s.ok()) return s;
  pg_result* result = PQexec(conn_, sql.c_str());
  absl::Status status = ResultStatus(result, sql);
  PQclear(result);
  return status;
}

}  // namespace stoke::server
