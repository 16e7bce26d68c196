#include "security/auth_tokens.h"

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace stoke::security {
namespace {

constexpr size_t kMaxNameBytes = 64;
// A tokens file is a few lines per user; anything larger is the wrong file.
constexpr off_t kMaxFileBytes = 1 << 20;

bool IsHashText(const std::string& hash) {
  constexpr std::string_view kPrefix = "sha256:";
  if (hash.size() != kPrefix.size() + 64 || hash.compare(0, kPrefix.size(), kPrefix) != 0) {
    return false;
  }
  for (size_t i = kPrefix.size(); i < hash.size(); ++i) {
    const char c = hash[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
  }
  return "viewer";
}

std::optional<Role> ParseRole(const std::string& name) {
  for (Role role : {Role::kViewer, Role::kSubmitter, Role::kAdmin, Role::kWorker}) {
    if (name == RoleName(role)) return role;
  }
  return std::nullopt;
}

bool IsValidCredentialName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '@' ||
          c == '-')) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(const std::string& text,
                                                       const std::string& path) {
  std::vector<TokenEntry> entries;
  std::set<std::string> names;
  std::map<std::string, std::string> hashes;  // hash -> the name it was first given
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::string line(absl::StripAsciiWhitespace(raw));
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    auto at = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_number, ": ", what));
    };
    if (fields.size() < 3 || fields.size() > 5) {
      return at("expected NAME ROLE sha256:HEX [hosts=HOST,...] [expires=DATE]");
    }
    TokenEntry entry;
    entry.name = fields[0];
    if (!IsValidCredentialName(entry.name)) {
      return at("name: use 1-64 of the characters A-Z a-z 0-9 . _ @ -");
    }
    if (!names.insert(entry.name).second) return at("name " + entry.name + " appears twice");
    auto role = ParseRole(fields[1]);
    if (!role) return at("role: " + fields[1] + " is not viewer, submitter, admin or worker");
    entry.role = *role;
    entry.hash = fields[2];
    if (!IsHashText(entry.hash)) {
      return at(
          "hash: expected sha256: and 64 lowercase hex digits (a token itself never goes here)");
    }
    // One token under two names would be whichever the lookup finds first: its holder's
    // role and audit name would depend on the file's order.
    if (auto [it, fresh] = hashes.emplace(entry.hash, entry.name); !fresh) {
      return at("hash: the same as " + it->second +
                "'s; each credential needs a token of its own (stoke token create)");
    }
    constexpr absl::string_view kHosts = "hosts=";
    constexpr absl::string_view kExpires = "expires=";
    bool hosts_given = false;
    for (size_t f = 3; f < fields.size(); ++f) {
      const std::string& field = fields[f];
      if (absl::StartsWith(field, kHosts) && !hosts_given) {
        if (entry.role != Role::kWorker) return at("hosts= applies to worker tokens only");
        hosts_given = true;
        for (absl::string_view host : absl::StrSplit(field.substr(kHosts.size()), ',')) {
          if (!IsValidCredentialName(absl::StrCat(host))) {
            return at("hosts: a host name is 1-64 of the characters A-Z a-z 0-9 . _ @ -");
          }
          entry.hosts.emplace_back(host);
        }
      } else if (absl::StartsWith(field, kExpires) && !entry.expires) {
        entry.expires = ParseExpiry(field.substr(kExpires.size()));
        if (!entry.expires) {
          return at("expires: " + field.substr(kExpires.size()) +
                    " is no date (2027-01-31) or RFC 3339 time (2027-01-31T12:00:00Z)");
        }
      } else {
        return at("expected hosts=HOST,... or expires=DATE after the hash, each once: " + field);
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::StatusOr<std::vector<TokenEntry>> ReadTokenFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot read the tokens file"));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(path + ": not a regular file");
  // It holds hashes only, so others may read it; one they may write lets them add a token
  // of any role for themselves.
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, ": other users may write it, and so give themselves any role; chmod go-w it"));
  }
  if (st.st_size > kMaxFileBytes) {
    return absl::InvalidArgumentError(path + ": larger than 1 MiB; not a tokens file");
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the tokens file"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseTokenFile(text.str(), path);
}

std::optional<absl::Time> ParseExpiry(const std::string& text) {
  absl::Time time;
  std::string error;
  if (absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &time, &error) ||
      absl::ParseTime(absl::RFC3339_full, text, &time, &error)) {
    return time;
  }
  return std::nullopt;
}

std::string FormatTokenLine(const TokenEntry& entry) {
  std::string line = absl::StrCat(entry.name, " ", RoleName(entry.role), " ", entry.hash);
  if (!entry.hosts.empty()) absl::StrAppend(&line, " hosts=", absl::StrJoin(entry.hosts, ","));
  if (entry.expires) {
    absl::StrAppend(&line, " expires=",
                    absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", *entry.expires, absl::UTCTimeZone()));
  }
  return line;
}

}  // namespace stoke::security
