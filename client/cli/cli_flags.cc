#include "client/cli/cli_flags.h"

#include "absl/strings/str_cat.h"
#include "spec/addresses.h"

namespace stoke::client {
namespace {

// The commands are added in groups, in the order --help lists them (the order they are
// added in).

// Set before any command is added: commands inherit fallthrough when they are made.
void AddGlobalFlags(CLI::App& app, CliFlags* flags) {
  app.require_subcommand(1);
  app.set_version_flag("--version", "stoke " STOKE_VERSION " (" STOKE_COMMIT ")");
  app.fallthrough();  // --address and --output may also follow the subcommand
  app.add_option("--address", flags->address,
                 absl::StrCat("Coordinator host:port ($STOKE_ADDRESS, else config.yaml, else ",
                              defaults::kCoordinatorAddress, ")"));
  app.add_option("--tls-ca", flags->tls_ca,
                 "PEM CA to verify the coordinator with ($STOKE_TLS_CA)");
  app.add_option("--config", flags->config_path, "Config file (address, token, tls_ca)")
      ->capture_default_str();
  app.add_option("-o,--output", flags->output, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

// Submitting jobs, and following and changing one.
void AddJobCommands(CLI::App& app, CliFlags* flags, CliCommands* commands) {
  auto* submit = commands->submit =
      app.add_subcommand("submit", "Submit a job file (YAML or JSON); prints the job id");
  submit->add_option("file", flags->file, "Job spec file")->required();
  submit->add_flag("-w,--watch", flags->watch, "Then watch it train, as `stoke watch`");
  submit->add_flag("--dry-run", flags->dry_run,
                   "Check the job as the coordinator would (every problem at once) and submit "
                   "nothing; with -o json, print it as it would be stored");

  auto* watch = commands->watch =
      app.add_subcommand("watch", "Follow a job live until it finishes");
  watch->add_option("id", flags->id, "Job id")->required();
  watch->add_option("--from-seq", flags->from_seq, "First event to show")->capture_default_str();

  auto* list = commands->list = app.add_subcommand("list", "List jobs, newest first");
  list->add_flag("--mine", flags->mine, "Only jobs I submitted");
  list->add_option("-s,--state", flags->states, "Only jobs in this state (repeatable)");
  list->add_option("-n,--limit", flags->limit, "Jobs per page")->capture_default_str();
  list->add_flag("-a,--all", flags->all, "Every job, not only the first page");

  auto* status = commands->status = app.add_subcommand("status", "Show one job in detail");
  status->add_option("id", flags->id, "Job id")->required();

  auto* cancel = commands->cancel = app.add_subcommand("cancel", "Cancel a queued or running job");
  cancel->add_option("id", flags->id, "Job id")->required();
  cancel->add_option("--reason", flags->reason, "Recorded with the job");

  auto* priority = commands->priority = app.add_subcommand(
      "priority", "Change an unfinished job's priority (raised, it may preempt lower ones)");
  priority->add_option("id", flags->id, "Job id")->required();
  priority->add_option("priority", flags->priority, "The new priority (higher runs first)")
      ->required();
}

// The cluster at a glance, and what a job left: its log, checkpoints and model.
void AddClusterCommands(CLI::App& app, CliFlags* flags, CliCommands* commands) {
  commands->quota = app.add_subcommand(
      "quota", "Show each quota group's devices in use and guaranteed, and owners' recent use");
  commands->cluster = app.add_subcommand("cluster", "Show the workers, their devices and jobs");

  auto* top = commands->top =
      app.add_subcommand("top", "Every device and unfinished job at a glance, live");
  top->add_flag("--once", flags->once, "Print once and exit");
  top->add_option("-n,--interval", flags->interval_seconds, "Seconds between refreshes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  auto* logs = commands->logs = app.add_subcommand("logs", "Print a job's log lines");
  logs->add_option("id", flags->id, "Job id")->required();
  logs->add_flag("-f,--follow", flags->follow, "Keep printing until the job finishes");
  logs->add_flag("-t,--timestamps", flags->logs.timestamps,
                 "Begin each line with when the coordinator received it (UTC, RFC 3339)");
  logs->add_option("--since", flags->logs.since,
                   "Only lines from then on: a duration back from now (10m, 1h30m) or a time "
                   "(2026-12-06T10:00:00Z)");

  auto* checkpoints = commands->checkpoints =
      app.add_subcommand("checkpoints", "List a job's checkpoints");
  checkpoints->add_option("id", flags->id, "Job id")->required();

  auto* export_model = commands->export_model =
      app.add_subcommand("export", "Download a job's trained model to a file");
  export_model->add_option("id", flags->id, "Job id")->required();
  export_model->add_option("path", flags->out_path, "Where to write it")->required();
  export_model->add_option("--step", flags->step, "A checkpoint's step (default: the newest)");
  export_model
      ->add_option("--format", flags->export_format,
                   "default (a Python model's state_dict; any other model as TorchScript, "
                   "torch.jit.load(path)(inputs) in Python), state_dict, safetensors, "
                   "torchscript or libtorch (the checkpoint's LibTorch archive)")
      ->check(CLI::IsMember({"default", "state_dict", "safetensors", "torchscript", "libtorch"}));
}

// Local commands on data files: they need no coordinator.
void AddDataCommands(CLI::App& app, CliFlags* flags, CliCommands* commands) {
  auto* tokenize = commands->tokenize = app.add_subcommand(
      "tokenize", "Turn a text file into a byte-level token file (data.tokens, vocabulary 256)");
  tokenize->add_option("text", flags->text_path, "Any file")->required();
  tokenize->add_option("tokens", flags->out_path, "The token file to write")->required();

  auto* data = app.add_subcommand("data", "Look at data files before submitting a job");
  data->require_subcommand(1);
  auto* inspect = commands->data_inspect = data->add_subcommand(
      "inspect", "What Stoke would read from each path: kind, samples, shapes, dtypes, classes");
  inspect
      ->add_option("paths", flags->data_paths,
                   "Array files (.npy, .safetensors[:TENSOR]), MNIST or CIFAR-10 folders, token "
                   "files")
      ->required();
}

// Tokens (made and revoked locally), the audit log and who the coordinator takes me for.
void AddAccessCommands(CLI::App& app, CliFlags* flags, CliCommands* commands) {
  auto* token = app.add_subcommand("token", "Manage access tokens");
  token->require_subcommand(1);
  auto* create = commands->token_create =
      token->add_subcommand("create", "Make a token; prints it once, and its tokens-file line");
  create->add_option("name", flags->token_name, "Who it is for")->required();
  create->add_option("--role", flags->token_role, "viewer, submitter, admin or worker")->required();
  create->add_option("--host", flags->token_hosts,
                     "A worker token: the host whose workers it may register "
                     "(repeatable); without it, any host's");
  create->add_option("--expires", flags->token_expires,
                     "When it stops working: a date (2027-01-31, its start, UTC) or an "
                     "RFC 3339 time; default never");
  auto* revoke = commands->token_revoke = token->add_subcommand(
      "revoke", "Remove a token from the coordinator's tokens file (then send it SIGHUP)");
  revoke->add_option("name", flags->token_name, "Whose token")->required();
  revoke->add_option("--file", flags->tokens_file, "The coordinator's --auth-tokens file")
      ->required();

  auto* audit = commands->audit =
      app.add_subcommand("audit", "The audit log of mutating calls (admins)");
  audit->add_option("-n,--limit", flags->limit, "Entries per page")->capture_default_str();
  audit->add_flag("-a,--all", flags->all, "Every entry, not only the first page");

  commands->whoami = app.add_subcommand("whoami", "Who the coordinator takes me for");
}

}  // namespace

CliCommands AddCliFlags(CLI::App& app, CliFlags* flags) {
  CliCommands commands{};
  AddGlobalFlags(app, flags);
  AddJobCommands(app, flags, &commands);
  AddClusterCommands(app, flags, &commands);
  AddDataCommands(app, flags, &commands);
  AddAccessCommands(app, flags, &commands);
  return commands;
}

}  // namespace stoke::client
