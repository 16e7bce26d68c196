// The command line of `stoke`: the flags every command takes (where the coordinator is,
// how to show results) and each command's own arguments, in one struct whose in-class
// defaults are the ones --help shows; and the commands themselves, so that main can see
// which one was named.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "client/cli/cli_config.h"
#include "client/cli/commands.h"
#include "client/lib/client.h"

namespace stoke::client {

struct CliFlags {
  // Every command's: where the coordinator is and how to show what it says. The address
  // and the CA fall back on the environment, then the config file (ConnectionOptions).
  std::string address;
  std::string tls_ca;
  std::string config_path = DefaultCliConfigPath();
  std::string output = "text";

  // The commands' arguments; commands that take the same one share its field.
  std::string file;  // submit
  std::string id;    // every command about one job
  std::string reason;
  bool watch = false;
  bool dry_run = false;  // submit: check only
  bool all = false;
  bool follow = false;
  bool mine = false;
  bool once = false;
  uint64_t from_seq = WatchOptions{}.from_seq;
  uint32_t limit = 20;  // list and audit: a page
  std::vector<std::string> states;
  int32_t priority = 0;
  double interval_seconds = 2.0;  // top
  LogsOptions logs;
  std::string out_path;  // export's file, tokenize's token file
  uint64_t step = 0;     // export: 0 for the newest checkpoint
  std::string export_format = "default";
  std::string text_path;
  std::vector<std::string> data_paths;
  std::string token_name;
  std::string token_role;
  std::vector<std::string> token_hosts;
  std::string token_expires;
  std::string tokens_file;
};

// Each command of `stoke`, as CLI11 parsed it (`*command` is true for the one named).
struct CliCommands {
  // Local: they need no coordinator.
  CLI::App* tokenize;
  CLI::App* data_inspect;
  CLI::App* token_create;
  CLI::App* token_revoke;
  // They call the coordinator.
  CLI::App* submit;
  CLI::App* watch;
  CLI::App* list;
  CLI::App* audit;
  CLI::App* whoami;
  CLI::App* status;
  CLI::App* cancel;
  CLI::App* priority;
  CLI::App* quota;
  CLI::App* cluster;
  CLI::App* top;
  CLI::App* logs;
  CLI::App* checkpoints;
  CLI::App* export_model;
};

// Adds the flags and every command of `stoke` to `app`, writing into `flags`.
CliCommands AddCliFlags(CLI::App& app, CliFlags* flags);

}  // namespace stoke::client
