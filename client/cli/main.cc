// stoke: the command-line client of a Stoke coordinator.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/cli/cli_config.h"
#include "client/cli/commands.h"
#include "client/cli/suggest.h"
#include "client/lib/client.h"

using namespace stoke::client;

int main(int argc, char** argv) {
  CLI::App app{"stoke: submit training jobs to a Stoke coordinator and watch them train"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stoke " STOKE_VERSION " (" STOKE_COMMIT ")");
  app.fallthrough();  // --address and --output may also follow the subcommand
  std::string address, tls_ca, config_path = DefaultCliConfigPath();
  std::string output = "text";
  app.add_option("--address", address,
                 "Coordinator host:port ($STOKE_ADDRESS, else config.yaml, else "
                 "127.0.0.1:50051)");
  app.add_option("--tls-ca", tls_ca, "PEM CA to verify the coordinator with ($STOKE_TLS_CA)");
  app.add_option("--config", config_path, "Config file (address, token, tls_ca)")
      ->capture_default_str();
  app.add_option("-o,--output", output, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  std::string file, id, reason;
  bool watch = false, all = false, follow = false;
  uint64_t from_seq = 1;
  uint32_t limit = 20;
  std::vector<std::string> states;

  auto* submit =
      app.add_subcommand("submit", "Submit a job file (YAML or JSON); prints the job id");
  submit->add_option("file", file, "Job spec file")->required();
  submit->add_flag("-w,--watch", watch, "Then watch it train, as `stoke watch`");

  auto* watch_cmd = app.add_subcommand("watch", "Follow a job live until it finishes");
  watch_cmd->add_option("id", id, "Job id")->required();
  watch_cmd->add_option("--from-seq", from_seq, "First event to show")->capture_default_str();

  bool mine = false;
  auto* list = app.add_subcommand("list", "List jobs, newest first");
  list->add_flag("--mine", mine, "Only jobs I submitted");
  list->add_option("-s,--state", states, "Only jobs in this state (repeatable)");
  list->add_option("-n,--limit", limit, "Jobs per page")->capture_default_str();
  list->add_flag("-a,--all", all, "Every job, not only the first page");

  auto* status = app.add_subcommand("status", "Show one job in detail");
  status->add_option("id", id, "Job id")->required();

  auto* cancel = app.add_subcommand("cancel", "Cancel a queued or running job");
  cancel->add_option("id", id, "Job id")->required();
  cancel->add_option("--reason", reason, "Recorded with the job");

  int32_t priority = 0;
  auto* set_priority = app.add_subcommand(
      "priority", "Change an unfinished job's priority (raised, it may preempt lower ones)");
  set_priority->add_option("id", id, "Job id")->required();
  set_priority->add_option("priority", priority, "The new priority (higher runs first)")
      ->required();

  auto* quota = app.add_subcommand(
      "quota", "Show each quota group's devices in use and guaranteed, and owners' recent use");

  auto* cluster = app.add_subcommand("cluster", "Show the workers, their devices and jobs");

  bool once = false;
  double interval = 2.0;
  auto* top = app.add_subcommand("top", "Every device and unfinished job at a glance, live");
  top->add_flag("--once", once, "Print once and exit");
  top->add_option("-n,--interval", interval, "Seconds between refreshes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  auto* logs = app.add_subcommand("logs", "Print a job's log lines");
  logs->add_option("id", id, "Job id")->required();
  logs->add_flag("-f,--follow", follow, "Keep printing until the job finishes");
  LogsOptions logs_options;
  logs->add_flag("-t,--timestamps", logs_options.timestamps,
                 "Begin each line with when the coordinator received it (UTC, RFC 3339)");
  logs->add_option("--since", logs_options.since,
                   "Only lines from then on: a duration back from now (10m, 1h30m) or a time "
                   "(2026-12-06T10:00:00Z)");

  auto* checkpoints = app.add_subcommand("checkpoints", "List a job's checkpoints");
  checkpoints->add_option("id", id, "Job id")->required();

  std::string out_path;
  uint64_t step = 0;
  auto* export_cmd = app.add_subcommand("export", "Download a job's trained model to a file");
  export_cmd->add_option("id", id, "Job id")->required();
  export_cmd->add_option("path", out_path, "Where to write it")->required();
  export_cmd->add_option("--step", step, "A checkpoint's step (default: the newest)");
  std::string export_format = "default";
  export_cmd
      ->add_option("--format", export_format,
                   "default (a Python model's state_dict; any other model as TorchScript, "
                   "torch.jit.load(path)(inputs) in Python), state_dict, safetensors, "
                   "torchscript or libtorch (the checkpoint's LibTorch archive)")
      ->check(CLI::IsMember({"default", "state_dict", "safetensors", "torchscript", "libtorch"}));

  std::string text_path;
  auto* tokenize = app.add_subcommand(
      "tokenize", "Turn a text file into a byte-level token file (data.tokens, vocabulary 256)");
  tokenize->add_option("text", text_path, "Any file")->required();
  tokenize->add_option("tokens", out_path, "The token file to write")->required();

  std::vector<std::string> data_paths;
  auto* data_cmd = app.add_subcommand("data", "Look at data files before submitting a job");
  data_cmd->require_subcommand(1);
  auto* data_inspect = data_cmd->add_subcommand(
      "inspect", "What Stoke would read from each path: kind, samples, shapes, dtypes, classes");
  data_inspect
      ->add_option("paths", data_paths,
                   "Array files (.npy, .safetensors[:TENSOR]), MNIST or CIFAR-10 folders, token "
                   "files")
      ->required();

  std::string token_name, token_role;
  auto* token_cmd = app.add_subcommand("token", "Manage access tokens");
  token_cmd->require_subcommand(1);
  auto* token_create =
      token_cmd->add_subcommand("create", "Make a token; prints it once, and its tokens-file line");
  token_create->add_option("name", token_name, "Who it is for")->required();
  token_create->add_option("--role", token_role, "viewer, submitter, admin or worker")->required();
  std::vector<std::string> token_hosts;
  token_create->add_option("--host", token_hosts,
                           "A worker token: the host whose workers it may register "
                           "(repeatable); without it, any host's");
  std::string token_expires, tokens_file;
  token_create->add_option("--expires", token_expires,
                           "When it stops working: a date (2027-01-31, its start, UTC) or an "
                           "RFC 3339 time; default never");
  auto* token_revoke = token_cmd->add_subcommand(
      "revoke", "Remove a token from the coordinator's tokens file (then send it SIGHUP)");
  token_revoke->add_option("name", token_name, "Whose token")->required();
  token_revoke->add_option("--file", tokens_file, "The coordinator's --auth-tokens file")
      ->required();

  auto* audit = app.add_subcommand("audit", "The audit log of mutating calls (admins)");
  audit->add_option("-n,--limit", limit, "Entries per page")->capture_default_str();
  audit->add_flag("-a,--all", all, "Every entry, not only the first page");

  auto* whoami = app.add_subcommand("whoami", "Who the coordinator takes me for");

  // A mistyped command: say which one was meant, not only that one is required.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
    if (std::find(commands.begin(), commands.end(), argv[1]) == commands.end()) {
      const std::string nearest = NearestName(argv[1], commands);
      const std::string hint = nearest.empty() ? "" : " Did you mean " + nearest + "?";
      std::fprintf(stderr, "stoke: %s is no command.%s (`stoke --help` lists them)\n", argv[1],
                   hint.c_str());
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  if (*tokenize) return TokenizeCommand(text_path, out_path);
  if (*data_inspect) return DataInspectCommand(data_paths);
  if (*token_create) return TokenCreateCommand(token_name, token_role, token_hosts, token_expires);
  if (*token_revoke) return TokenRevokeCommand(token_name, tokens_file);

  // Flags, then the environment, then the config file, then the default.
  auto config = ReadCliConfigFile(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "stoke: %s\n", std::string(config.status().message()).c_str());
    return kExitUsage;
  }
  auto pick = [](const std::string& flag, const char* env, const std::string& file,
                 const std::string& fallback) {
    if (!flag.empty()) return flag;
    if (const char* value = std::getenv(env); value && *value) return std::string(value);
    return file.empty() ? fallback : file;
  };
  ClientOptions options;
  options.address = address = pick(address, "STOKE_ADDRESS", config->address, "127.0.0.1:50051");
  options.token = pick("", "STOKE_TOKEN", config->token, "");
  options.tls_ca = pick(tls_ca, "STOKE_TLS_CA", config->tls_ca, "");
  auto client = Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "stoke: %s\n", std::string(client.status().message()).c_str());
    return client.status().code() == absl::StatusCode::kUnauthenticated ? kExitUnauthenticated
                                                                        : kExitUsage;
  }
  CliContext cli{**client, address, output == "json"};
  if (*submit) return SubmitCommand(cli, file, watch);
  if (*watch_cmd) return WatchCommand(cli, id, from_seq);
  if (*list) return ListCommand(cli, states, limit, all, mine);
  if (*audit) return AuditCommand(cli, limit, all);
  if (*whoami) return WhoAmICommand(cli);
  if (*status) return StatusCommand(cli, id);
  if (*cancel) return CancelCommand(cli, id, reason);
  if (*set_priority) return PriorityCommand(cli, id, priority);
  if (*quota) return QuotaCommand(cli);
  if (*cluster) return ClusterCommand(cli);
  if (*top) return TopCommand(cli, once, interval);
  if (*logs) return LogsCommand(cli, id, follow, logs_options);
  if (*checkpoints) return CheckpointsCommand(cli, id);
  if (*export_cmd) return ExportCommand(cli, id, out_path, step, export_format);
  return kExitUsage;
}
