#include "tests/support/postgres_server.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace stoke::testing {
namespace {

namespace fs = std::filesystem;

// Runs argv as `uid`/`gid` when switch_user (PostgreSQL refuses root), output to `log`.
// The child gets `death_signal` when the test process dies, so no server outlives a
// crashed test.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, bool switch_user,
            uid_t uid, gid_t gid, int death_signal) {
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  if (switch_user && (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) {
    _exit(126);
  }
  // After setuid, which clears it.
  if (death_signal != 0) prctl(PR_SET_PDEATHSIG, death_signal);
  execv(cargs[0], cargs.data());
  _exit(127);
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string FindPostgresBinDir() {
  std::error_code ec;
  if (const char* env = std::getenv("STOKE_POSTGRES_BIN"); env && *env) {
    return fs::exists(fs::path(env) / "initdb", ec) ? env : "";
  }
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const fs::path bin = entry.path() / "bin";
    if (fs::exists(bin / "initdb", ec) && fs::exists(bin / "postgres", ec)) {
      found.push_back(bin.string());
    }
  }
  if (found.empty()) return "";
  // Versions are numbers: the longest, then the largest, name is the newest.
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return found.back();
}

std::unique_ptr<PostgresServer> PostgresServer::Start(std::string* error) {
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  server->bin_dir_ = FindPostgresBinDir();
  if (server->bin_dir_.empty()) {
    *error =
        "PostgreSQL server binaries not found (no initdb in /usr/lib/postgresql/*/bin or "
        "$STOKE_POSTGRES_BIN): install Debian's postgresql (scripts/setup-deps.sh)";
    return nullptr;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/stoke-pg-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    *error = "cannot create a temp folder for PostgreSQL under " + pattern;
    return nullptr;
  }
  server->dir_ = pattern;
  if (!server->UseNobodyIfRoot(error)) return nullptr;
  if (server->switch_user_ && chown(server->dir_.c_str(), server->uid_, server->gid_) != 0) {
    *error = "cannot give " + server->dir_ + " to user nobody";
    return nullptr;
  }
  const std::string log = server->dir_ + "/initdb.log";
  const pid_t initdb = Spawn({server->bin_dir_ + "/initdb", "-D", server->dir_ + "/data", "-U",
                              "stoke", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"},
                             log, server->switch_user_, server->uid_, server->gid_, SIGKILL);
  if (WaitExit(initdb) != 0) {
    *error = "initdb failed (as " + std::string(server->switch_user_ ? "nobody" : "this user") +
             "; the temp folder's parents must be searchable by that user):\n" + ReadFile(log);
    return nullptr;
  }
  if (!server->Launch(error)) return nullptr;
  return server;
}

bool PostgresServer::UseNobodyIfRoot(std::string* error) {
  if (geteuid() != 0) return true;
  const passwd* nobody = getpwnam("nobody");
  if (nobody == nullptr) {
    *error = "running as root, and there is no user `nobody` to run PostgreSQL as";
    return false;
  }
  switch_user_ = true;
  uid_ = nobody->pw_uid;
  gid_ = nobody->pw_gid;
  return true;
}

std::unique_ptr<PostgresServer> PostgresServer::Attach(const std::string& dir, std::string* error) {
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  server->owned_ = false;
  server->dir_ = dir;
  server->bin_dir_ = FindPostgresBinDir();
  if (!server->UseNobodyIfRoot(error)) return nullptr;
  if (PQping(server->Url("postgres").c_str()) != PQPING_OK) {
    *error = "no PostgreSQL server answers on the socket in " + dir;
    return nullptr;
  }
  return server;
}

bool PostgresServer::Launch(std::string* error) {
  // Only a unix socket in our folder: no port to collide with, nothing reachable from
  // elsewhere. fsync off: a test server's data need not survive a power cut.
  postmaster_ = Spawn(
      {bin_dir_ + "/postgres", "-D", dir_ + "/data", "-k", dir_, "-c", "listen_addresses=", "-c",
       "fsync=off", "-c", "shared_buffers=16MB", "-c", "max_connections=40"},
      dir_ + "/server.log", switch_user_, uid_, gid_, SIGQUIT);
  const std::string url = Url("postgres");
  for (int i = 0; i < 300; ++i) {
    if (PQping(url.c_str()) == PQPING_OK) return true;
    int status = 0;
    if (waitpid(postmaster_, &status, WNOHANG) == postmaster_) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *error = "postgres did not start:\n" + Log();
  StopServer();
  return false;
}

void PostgresServer::StopServer() {
  if (postmaster_ <= 0) return;
  // Immediate shutdown: the postmaster takes its backends down with it.
  kill(postmaster_, SIGQUIT);
  WaitExit(postmaster_);
  postmaster_ = -1;
}

PostgresServer::~PostgresServer() {
  if (!owned_) return;
  StopServer();
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

std::string PostgresServer::Url(const std::string& name) const {
  return "postgresql:///" + name + "?host=" + dir_ + "&user=stoke";
}

std::string PostgresServer::CreateDatabase(const std::string& name, std::string* error) {
  PGconn* conn = PQconnectdb(Url("postgres").c_str());
  std::string url;
  if (PQstatus(conn) != CONNECTION_OK) {
    *error = PQerrorMessage(conn);
  } else {
    PGresult* result = PQexec(conn, ("CREATE DATABASE \"" + name + "\"").c_str());
    if (PQresultStatus(result) == PGRES_COMMAND_OK) {
      url = Url(name);
    } else {
      *error = PQresultErrorMessage(result);
    }
    PQclear(result);
  }
  PQfinish(conn);
  return url;
}

int PostgresServer::RunTool(const std::vector<std::string>& argv, std::string* output) const {
  std::vector<std::string> args = argv;
  args[0] = bin_dir_ + "/" + args[0];
  const std::string log = dir_ + "/tool.log";
  std::error_code ec;
  fs::remove(log, ec);
  const int code = WaitExit(Spawn(args, log, switch_user_, uid_, gid_, SIGKILL));
  *output = ReadFile(log);
  return code;
}

bool PostgresServer::LoadSql(const std::string& name, const std::string& sql_file,
                             std::string* error) const {
  // A copy in our folder: the server's user may not be able to read the original's.
  const std::string copy = dir_ + "/load.sql";
  std::error_code ec;
  fs::copy_file(sql_file, copy, fs::copy_options::overwrite_existing, ec);
  if (ec) {
    *error = "cannot copy " + sql_file + ": " + ec.message();
    return false;
  }
  fs::permissions(copy, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read, ec);
  std::string output;
  const int code =
      RunTool({"psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", Url(name), "-f", copy}, &output);
  if (code != 0) *error = "psql -f " + sql_file + " failed:\n" + output;
  return code == 0;
}

bool PostgresServer::Restart() {
  if (!owned_) return false;
  StopServer();
  std::string error;
  // The old backends may take a moment to leave the shared memory the new server needs.
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (Launch(&error)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return false;
}

std::string PostgresServer::Log() const { return ReadFile(dir_ + "/server.log"); }

}  // namespace stoke::testing
