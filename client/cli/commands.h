// The `stoke` subcommands. Each returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/lib/client.h"

namespace stoke::client {

// Exit codes, documented in the README.
enum ExitCode : int {
  kExitOk = 0,
  kExitJobFailed = 1,    // the watched job ended FAILED or CANCELLED
  kExitUsage = 2,        // bad arguments or an invalid job file
  kExitUnavailable = 3,  // no coordinator at the address, or it stopped answering
  kExitNotFound = 4,     // no such job
  kExitError = 5,        // anything else the coordinator refused
};

struct CliContext {
  Client& client;
  std::string address;
  bool json = false;
};

int SubmitCommand(CliContext& cli, const std::string& file, bool watch);
int WatchCommand(CliContext& cli, const std::string& id, uint64_t from_seq);
int ListCommand(CliContext& cli, const std::vector<std::string>& states, uint32_t limit, bool all);
int StatusCommand(CliContext& cli, const std::string& id);
int CancelCommand(CliContext& cli, const std::string& id, const std::string& reason);
int ClusterCommand(CliContext& cli);
// Devices and unfinished jobs, refreshed every `interval_seconds` (or once).
int TopCommand(CliContext& cli, bool once, double interval_seconds);
int LogsCommand(CliContext& cli, const std::string& id, bool follow);
int CheckpointsCommand(CliContext& cli, const std::string& id);
int ExportCommand(CliContext& cli, const std::string& id, const std::string& path, uint64_t step);
// Local: needs no coordinator.
int TokenizeCommand(const std::string& text_path, const std::string& token_path);

// Prints the error for a failed call and returns the exit code it deserves.
int Report(const CliContext& cli, const absl::Status& status);

}  // namespace stoke::client
