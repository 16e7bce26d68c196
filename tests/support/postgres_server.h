// A throwaway PostgreSQL server for tests: initdb into a temp folder, postgres listening
// only on a unix socket in that folder (no TCP port, nothing shared with the host's own
// server), stopped and removed when destroyed.
//
// PostgreSQL refuses to run as root. As root (CI, containers), the server and its tools run
// as the unprivileged user `nobody`, who owns the temp folder; otherwise as the caller.
// The same procedure by hand (bin=/usr/lib/postgresql/15/bin):
//   dir=$(mktemp -d); chown nobody "$dir"
//   runuser -u nobody -- $bin/initdb -D "$dir/data" -U stoke --auth=trust --no-sync
//   runuser -u nobody -- $bin/postgres -D "$dir/data" -k "$dir" -c listen_addresses= &
//   url="postgresql:///postgres?host=$dir&user=stoke"
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace stoke::testing {

// The folder holding initdb and postgres: $STOKE_POSTGRES_BIN, else the newest
// /usr/lib/postgresql/*/bin (Debian's postgresql package); empty when there is none
// (STOKE_POSTGRES_BIN=/nowhere shows how the tests skip without PostgreSQL).
std::string FindPostgresBinDir();

class PostgresServer {
 public:
  // Starts a server; null with *error set when it cannot (no binaries, initdb failed...).
  static std::unique_ptr<PostgresServer> Start(std::string* error);
  // A server someone else started with its socket in `dir` (postgres-test-server.sh):
  // used, never stopped or removed. Null with *error set when it does not answer.
  static std::unique_ptr<PostgresServer> Attach(const std::string& dir, std::string* error);
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // A new empty database; returns its URL ("" and *error set on failure).
  std::string CreateDatabase(const std::string& name, std::string* error);
  // The URL of database `name` on this server.
  std::string Url(const std::string& name) const;
  // Runs a PostgreSQL tool from the bin folder (e.g. psql) as the server's user; its exit
  // code, with its output in *output.
  int RunTool(const std::vector<std::string>& argv, std::string* output) const;

  // Loads an SQL script (a pg_dump) into database `name` with psql, stopping at the first
  // error; false with *error set (psql's output) on failure.
  bool LoadSql(const std::string& name, const std::string& sql_file, std::string* error) const;

  // Stops the server abruptly (SIGKILL to the postmaster), as a crash would, and starts it
  // again on the same data; false if it does not come back.
  bool Restart();
  std::string Log() const;

 private:
  PostgresServer() = default;
  bool Launch(std::string* error);
  bool UseNobodyIfRoot(std::string* error);
  void StopServer();

  std::string bin_dir_;
  std::string dir_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  bool switch_user_ = false;
  bool owned_ = true;
  pid_t postmaster_ = -1;
};

}  // namespace stoke::testing
