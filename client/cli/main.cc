// stoke: the command-line client of a Stoke coordinator. Its flags and commands are in
// cli_flags.h, what each command does in commands.h; here they are parsed and dispatched.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "client/cli/cli_config.h"
#include "client/cli/cli_flags.h"
#include "client/cli/commands.h"
#include "client/cli/suggest.h"
#include "client/lib/client.h"
#include "spec/addresses.h"

namespace stoke::client {
namespace {

// A mistyped command: say which one was meant, not only that one is required. True when
// `argv` names a command (or starts with a flag).
bool NamesACommand(const CLI::App& app, int argc, char** argv) {
  if (argc <= 1 || argv[1][0] == '-') return true;
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
  if (std::find(commands.begin(), commands.end(), argv[1]) != commands.end()) return true;
  const std::string nearest = NearestName(argv[1], commands);
  const std::string hint = nearest.empty() ? "" : " Did you mean " + nearest + "?";
  std::fprintf(stderr, "stoke: %s is no command.%s (`stoke --help` lists them)\n", argv[1],
               hint.c_str());
  return false;
}

// The commands that need no coordinator; nullopt for the others.
std::optional<int> RunLocalCommand(const CliCommands& commands, const CliFlags& flags) {
  if (*commands.tokenize) return TokenizeCommand(flags.text_path, flags.out_path);
  if (*commands.data_inspect) return DataInspectCommand(flags.data_paths);
  if (*commands.token_create) {
    return TokenCreateCommand(flags.token_name, flags.token_role, flags.token_hosts,
                              flags.token_expires);
  }
  if (*commands.token_revoke) return TokenRevokeCommand(flags.token_name, flags.tokens_file);
  return std::nullopt;
}

// Where the coordinator is and how to reach it: each setting from its flag, then the
// environment, then the config file, then the default.
ClientOptions ConnectionOptions(const CliFlags& flags, const CliConfig& config) {
  auto pick = [](const std::string& flag, const char* env, const std::string& file,
                 const std::string& fallback) {
    if (!flag.empty()) return flag;
    if (const char* value = std::getenv(env); value && *value) return std::string{value};
    return file.empty() ? fallback : file;
  };
  ClientOptions options;
  options.address =
      pick(flags.address, "STOKE_ADDRESS", config.address, defaults::kCoordinatorAddress);
  options.token = pick("", "STOKE_TOKEN", config.token, "");
  options.tls_ca = pick(flags.tls_ca, "STOKE_TLS_CA", config.tls_ca, "");
  return options;
}

// The commands that call the coordinator.
int RunRemoteCommand(const CliCommands& commands, const CliFlags& flags, CliContext& cli) {
  if (*commands.submit) return SubmitCommand(cli, flags.file, flags.watch, flags.dry_run);
  if (*commands.watch) return WatchCommand(cli, flags.id, flags.from_seq);
  if (*commands.list) return ListCommand(cli, flags.states, flags.limit, flags.all, flags.mine);
  if (*commands.audit) return AuditCommand(cli, flags.limit, flags.all);
  if (*commands.whoami) return WhoAmICommand(cli);
  if (*commands.status) return StatusCommand(cli, flags.id);
  if (*commands.cancel) return CancelCommand(cli, flags.id, flags.reason);
  if (*commands.priority) return PriorityCommand(cli, flags.id, flags.priority);
  if (*commands.quota) return QuotaCommand(cli);
  if (*commands.cluster) return ClusterCommand(cli);
  if (*commands.top) return TopCommand(cli, flags.once, flags.interval_seconds);
  if (*commands.logs) return LogsCommand(cli, flags.id, flags.follow, flags.logs);
  if (*commands.checkpoints) return CheckpointsCommand(cli, flags.id);
  if (*commands.export_model) {
    return ExportCommand(cli, flags.id, flags.out_path, flags.step, flags.export_format);
  }
  return kExitUsage;
}

// Connects as the flags, the environment and the config file say, then runs the command.
int Connect(const CliCommands& commands, const CliFlags& flags) {
  auto config = ReadCliConfigFile(flags.config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "stoke: %s\n", std::string{config.status().message()}.c_str());
    return kExitUsage;
  }
  const ClientOptions options = ConnectionOptions(flags, *config);
  auto client = Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "stoke: %s\n", std::string{client.status().message()}.c_str());
    return client.status().code() == absl::StatusCode::kUnauthenticated ? kExitUnauthenticated
                                                                        : kExitUsage;
  }
  CliContext cli{**client, options.address, flags.output == "json"};
  return RunRemoteCommand(commands, flags, cli);
}

// Parses the command line, then runs the command it names.
int RunCli(int argc, char** argv) {
  CLI::App app{"stoke: submit training jobs to a Stoke coordinator and watch them train"};
  CliFlags flags;
  const CliCommands commands = AddCliFlags(app, &flags);
  if (!NamesACommand(app, argc, argv)) return kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (const auto local = RunLocalCommand(commands, flags)) return *local;
  return Connect(commands, flags);
}

}  // namespace
}  // namespace stoke::client

int main(int argc, char** argv) {
  try {
    return stoke::client::RunCli(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke: %s\n", e.what());
    return stoke::client::kExitError;
  }
}
