// The `stoke` subcommands. Each returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/lib/client.h"

namespace stoke::client {

// Exit codes, documented in docs/cli.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitJobFailed = 1,         // the watched job ended FAILED or CANCELLED
  kExitUsage = 2,             // bad arguments or an invalid job file
  kExitUnavailable = 3,       // no coordinator at the address, or it stopped answering
  kExitNotFound = 4,          // no such job
  kExitError = 5,             // anything else the coordinator refused
  kExitUnauthenticated = 6,   // no token, or one the coordinator does not know
  kExitPermissionDenied = 7,  // the token's role or ownership does not allow the call
};

struct CliContext {
  Client& client;
  std::string address;
  bool json = false;
};

// Reads the job file and reports every problem at once: the file's own, then the
// coordinator's (ValidateJob), each placed in the file. Submits the job unless `dry_run`.
int SubmitCommand(CliContext& cli, const std::string& file, bool watch, bool dry_run);
int WatchCommand(CliContext& cli, const std::string& id, uint64_t from_seq);
// `mine`: only the caller's own jobs (asks the coordinator who the caller is).
int ListCommand(CliContext& cli, const std::vector<std::string>& states, uint32_t limit, bool all,
                bool mine);
int StatusCommand(CliContext& cli, const std::string& id);
int CancelCommand(CliContext& cli, const std::string& id, const std::string& reason);
// `stoke quota`: each quota group's use against its guarantee, and owners' fair share.
int QuotaCommand(CliContext& cli);
// `stoke priority ID N`.
int PriorityCommand(CliContext& cli, const std::string& id, int32_t priority);
int ClusterCommand(CliContext& cli);
// Devices and unfinished jobs, refreshed every `interval_seconds` (or once).
int TopCommand(CliContext& cli, bool once, double interval_seconds);
struct LogsOptions {
  bool timestamps = false;
  std::string since;  // a duration back from now, or an RFC 3339 time; empty: everything
};
// Log lines and state changes; with -o json, one JSON object (a JobEvent) per line.
int LogsCommand(CliContext& cli, const std::string& id, bool follow, const LogsOptions& options);
int CheckpointsCommand(CliContext& cli, const std::string& id);
int ExportCommand(CliContext& cli, const std::string& id, const std::string& path, uint64_t step,
                  const std::string& format);
// Local: needs no coordinator.
int TokenizeCommand(const std::string& text_path, const std::string& token_path);
// Local: what Stoke would read from each path (data_inspect.cc); kExitUsage on a problem.
int DataInspectCommand(const std::vector<std::string>& paths);
// Local: prints a new token once, and the tokens-file line that grants it `role`.
// `hosts`: a worker token's hosts (--host), whose workers alone it may register.
// `expires`: when it stops working (a date or an RFC 3339 time); empty: never.
int TokenCreateCommand(const std::string& name, const std::string& role,
                       const std::vector<std::string>& hosts, const std::string& expires);
// Local, on the coordinator's host: removes NAME's line from the tokens file (rewritten
// whole, atomically), then says how to make the coordinator read it again (SIGHUP).
int TokenRevokeCommand(const std::string& name, const std::string& tokens_file);
// The audit log (admins).
int AuditCommand(CliContext& cli, uint32_t limit, bool all);
int WhoAmICommand(CliContext& cli);

// Calls a paged listing (ListJobs, ListAudit) for the first page, or, with `all`, for
// every page, and returns the items of all the pages read in one response whose
// next_page_token is the last page's. `items` gives a response's repeated field.
template <typename Request, typename Response, typename Call, typename Items>
absl::StatusOr<Response> ReadPages(Request request, bool all, Call call, Items items) {
  Response everything;
  for (;;) {
    absl::StatusOr<Response> page = call(request);
    if (!page.ok()) return page.status();
    for (auto& item : *items(*page)) *items(everything)->Add() = std::move(item);
    everything.set_next_page_token(page->next_page_token());
    if (!all || page->next_page_token().empty()) return everything;
    request.set_page_token(page->next_page_token());
  }
}

// Prints the error for a failed call and returns the exit code it deserves.
int Report(const CliContext& cli, const absl::Status& status);

}  // namespace stoke::client
