// Files stoke-coordinator writes in its data dir for other processes to read: the
// addresses it listens on (coordinator.address, metrics.address), which tools, tests and
// restarted local workers poll for, and the local workers' join token (local-worker.token),
// which only this user may read.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoke::server {

// Writes `text` to a temporary file beside `path`, then renames it over `path`: a reader
// never sees one half written. UNAVAILABLE naming `path` when it cannot be written (a full
// disk), with no temporary file left behind.
absl::Status WriteAtomically(const std::string& path, const std::string& text);

// The local workers' join token kept at `path`: the one there when it is this user's own
// file that no one else may read (kept across restarts, so that workers left training by
// the previous coordinator reattach with it), else a new one written there with mode 0600.
absl::StatusOr<std::string> LocalWorkerToken(const std::string& path);

}  // namespace stoke::server
