// `stoke token create`, `stoke token revoke`, `stoke audit` and `stoke whoami`: making and
// taking back credentials, and seeing who did what.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "security/auth_tokens.h"
#include "security/token_hash.h"

namespace stoke::client {

int TokenCreateCommand(const std::string& name, const std::string& role_name,
                       const std::vector<std::string>& hosts, const std::string& expires) {
  std::optional<absl::Time> expiry;
  if (!expires.empty()) {
    expiry = security::ParseExpiry(expires);
    if (!expiry) {
      std::fprintf(stderr,
                   "stoke: --expires %s: expected a date (2027-01-31) or an RFC 3339 time "
                   "(2027-01-31T12:00:00Z)\n",
                   expires.c_str());
      return kExitUsage;
    }
  }
  auto role = security::ParseRole(role_name);
  if (!role) {
    std::fprintf(stderr, "stoke: --role %s: expected viewer, submitter, admin or worker\n",
                 role_name.c_str());
    return kExitUsage;
  }
  if (!security::IsValidCredentialName(name)) {
    std::fprintf(stderr, "stoke: %s: a name is 1-64 of the characters A-Z a-z 0-9 . _ @ -\n",
                 name.c_str());
    return kExitUsage;
  }
  if (!hosts.empty() && *role != security::Role::kWorker) {
    std::fprintf(stderr, "stoke: --host applies to worker tokens (--role worker) only\n");
    return kExitUsage;
  }
  for (const std::string& host : hosts) {
    if (!security::IsValidCredentialName(host)) {
      std::fprintf(stderr, "stoke: --host %s: 1-64 of the characters A-Z a-z 0-9 . _ @ -\n",
                   host.c_str());
      return kExitUsage;
    }
  }
  auto token = security::NewToken();
  if (!token.ok()) {
    std::fprintf(stderr, "stoke: %s\n", std::string(token.status().message()).c_str());
    return kExitError;
  }
  const std::string line =
      security::FormatTokenLine({name, *role, security::HashToken(*token), hosts, expiry});
  // The token on stdout alone, so `stoke token create ... > file` keeps just it; the
  // rest is for the person at the terminal.
  std::printf("%s\n", token->c_str());
  std::fprintf(stderr,
               "stoke: this token is shown once. Add this line to the coordinator's "
               "--auth-tokens file, then send it SIGHUP (systemctl reload stoke-coordinator):"
               "\n%s\n",
               line.c_str());
  if (*role == security::Role::kWorker) {
    std::fprintf(stderr, "stoke: give the token to the worker in a file: --join-token-file FILE\n");
  } else {
    std::fprintf(stderr,
                 "stoke: its user sets STOKE_TOKEN, or token: in ~/.config/stoke/config.yaml\n");
  }
  return kExitOk;
}

int TokenRevokeCommand(const std::string& name, const std::string& tokens_file) {
  auto entries = security::ReadTokenFile(tokens_file);
  if (!entries.ok()) {
    std::fprintf(stderr, "stoke: --file %s\n", absl::StrCat(entries.status().message()).c_str());
    return kExitUsage;
  }
  std::ifstream in(tokens_file);
  std::stringstream kept;
  bool found = false;
  // Every other line stays as written, comments included; only NAME's goes.
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (!fields.empty() && fields[0] == name && line[0] != '#') {
      found = true;
      continue;
    }
    kept << line << "\n";
  }
  if (!found) {
    std::fprintf(stderr, "stoke: %s: no token named %s\n", tokens_file.c_str(), name.c_str());
    return kExitNotFound;
  }
  // A copy beside it, renamed over it: a coordinator reading it sees the old file or the
  // new, never half of one. It keeps the file's mode.
  struct stat st;
  const std::string temporary = tokens_file + ".revoke";
  std::ofstream out(temporary, std::ios::trunc);
  out << kept.str();
  out.close();
  if (!out || stat(tokens_file.c_str(), &st) != 0 || chmod(temporary.c_str(), st.st_mode) != 0 ||
      std::rename(temporary.c_str(), tokens_file.c_str()) != 0) {
    std::fprintf(stderr, "stoke: %s: cannot rewrite it: %s\n", tokens_file.c_str(),
                 std::strerror(errno));
    std::remove(temporary.c_str());
    return kExitError;
  }
  std::fprintf(stderr,
               "stoke: %s removed from %s. Send the coordinator SIGHUP (systemctl reload "
               "stoke-coordinator, or kill -HUP its pid) and it refuses the token at once.\n",
               name.c_str(), tokens_file.c_str());
  return kExitOk;
}

int AuditCommand(CliContext& cli, uint32_t limit, bool all) {
  v1::ListAuditRequest request;
  request.set_page_size(limit);
  auto pages = ReadPages<v1::ListAuditRequest, v1::ListAuditResponse>(
      request, all, [&](const v1::ListAuditRequest& r) { return cli.client.ListAudit(r); },
      [](v1::ListAuditResponse& r) { return r.mutable_entries(); });
  if (!pages.ok()) return Report(cli, pages.status());
  const v1::ListAuditResponse& everything = *pages;
  if (cli.json) {
    std::cout << ToJson(everything) << std::endl;
    return kExitOk;
  }
  Table table({"ID", "WHEN", "WHO", "ROLE", "ACTION", "TARGET", "RESULT", "FROM"});
  for (const auto& e : everything.entries()) {
    table.AddRow({std::to_string(e.id()), FormatAge(e.time()), e.who(), e.role(), e.action(),
                  Printable(e.target()), Printable(e.result()), e.peer()});
  }
  std::cout << table.Render();
  if (!everything.next_page_token().empty()) std::cout << "(more entries: --all, or --limit N)\n";
  return kExitOk;
}

int WhoAmICommand(CliContext& cli) {
  auto me = cli.client.WhoAmI();
  if (!me.ok()) return Report(cli, me.status());
  if (cli.json) {
    std::cout << ToJson(*me) << std::endl;
    return kExitOk;
  }
  std::printf("%s (%s)%s\n", me->name().c_str(), me->role().c_str(),
              me->authentication_required() ? "" : "; this coordinator requires no token");
  return kExitOk;
}

}  // namespace stoke::client
