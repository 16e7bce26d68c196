// The coordinator's tokens file (--auth-tokens): one line per credential,
//
//   NAME ROLE sha256:HEX [hosts=HOST,HOST...] [expires=2027-01-31]
//
// ROLE is viewer, submitter or admin for people and services, or worker for the join
// tokens workers attach with. A worker token may name the hosts whose workers it may
// register (each worker's id being HOST or HOST/DEVICE): one token per host, so that a
// token stolen from one host cannot register another host's workers. A token with expires=
// is refused from that moment on (a date: its start, UTC; or an RFC 3339 time). The
// coordinator reads the file again on SIGHUP. Blank lines and lines starting
// with '#' are ignored. The file never holds a token, only its hash (`stoke token create` prints
// both).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace stoke::security {

// Ordered: each user role may do what the ones before it may. kWorker stands apart: it
// may attach as a worker and nothing else, and no user role may attach.
enum class Role { kViewer, kSubmitter, kAdmin, kWorker };

const char* RoleName(Role role);
std::optional<Role> ParseRole(const std::string& name);

struct TokenEntry {
  std::string name;
  Role role = Role::kViewer;
  std::string hash;                     // "sha256:" + 64 hex digits
  std::vector<std::string> hosts = {};  // worker tokens: the hosts it may register; empty: any
  std::optional<absl::Time> expires = std::nullopt;  // refused from then on
};

// "2027-01-31" (the start of that day, UTC) or an RFC 3339 time; nullopt otherwise.
std::optional<absl::Time> ParseExpiry(const std::string& text);

// Errors name the file and line. Names must be unique and made of [A-Za-z0-9._@-].
absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(const std::string& text,
                                                       const std::string& path);
// PERMISSION_DENIED for a file others may write (they could add a token for themselves).
absl::StatusOr<std::vector<TokenEntry>> ReadTokenFile(const std::string& path);

// The line to append to a tokens file for `entry`.
std::string FormatTokenLine(const TokenEntry& entry);

// A name is safe to store, print and use as a label.
bool IsValidCredentialName(const std::string& name);

}  // namespace stoke::security
