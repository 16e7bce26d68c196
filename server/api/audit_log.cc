#include "server/api/audit_log.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "server/common/time_util.h"

namespace stoke::server {
namespace {

// Entries are small whatever the caller sent: a refused call's message may echo input.
constexpr size_t kMaxResultBytes = 512;
constexpr size_t kMaxTargetBytes = 256;

// Cuts at a character boundary: a stored entry must stay valid UTF-8 to be read back.
std::string Truncated(std::string text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text;
}

}  // namespace

void AuditLog::Record(const Caller& caller, const std::string& action, const std::string& target,
                      const absl::Status& result) {
  const v1::AuditEntry entry = Entry(caller, action, target, result);
  if (auto s = store_.AppendAudit(entry); !s.ok()) {
    spdlog::error("audit entry not stored ({} {} by {}): {}", action, target, caller.name,
                  s.ToString());
  }
}

v1::AuditEntry AuditLog::Entry(const Caller& caller, const std::string& action,
                               const std::string& target, const absl::Status& result) const {
  v1::AuditEntry entry;
  *entry.mutable_time() = ToProto(clock_.Now());
  entry.set_who(caller.name);
  entry.set_role(security::RoleName(caller.role));
  entry.set_action(action);
  entry.set_target(Truncated(target, kMaxTargetBytes));
  entry.set_result(Truncated(
      result.ok() ? "OK"
                  : absl::StrCat(absl::StatusCodeToString(result.code()), ": ", result.message()),
      kMaxResultBytes));
  entry.set_peer(caller.peer);
  return entry;
}

}  // namespace stoke::server
