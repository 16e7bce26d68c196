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

bool AuditLog::Record(const Caller& caller, const std::string& action, const std::string& target,
                      const absl::Status& result) {
  const v1::AuditEntry entry = Entry(caller, action, target, result);
  if (!result.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    FlushLocked(/*all=*/false);
    Refusals& r = refusals_[{PeerHost(caller.peer), action}];
    if (r.recorded == 0 && r.counted == 0) r.window_start = clock_.Now();
    if (r.recorded >= kRefusalsPerMinute) {
      ++r.counted;
      r.last = entry;
      return false;
    }
    ++r.recorded;
  }
  Append(entry);
  return true;
}

void AuditLog::Append(const v1::AuditEntry& entry) {
  if (auto s = store_.AppendAudit(entry); !s.ok()) {
    spdlog::error("audit entry not stored ({} {} by {}): {}", entry.action(), entry.target(),
                  entry.who(), s.ToString());
    return;
  }
  const uint64_t appended = ++appended_;
  if (max_entries_ > 0 && appended % kPruneEvery == 0) {
    if (auto s = store_.PruneAudit(max_entries_); !s.ok()) {
      spdlog::error("audit log not pruned to {} entries: {}", max_entries_, s.ToString());
    }
  }
}

void AuditLog::Flush(bool all) {
  std::lock_guard<std::mutex> lock(mu_);
  FlushLocked(all);
}

void AuditLog::FlushLocked(bool all) {
  const absl::Time now = clock_.Now();
  for (auto it = refusals_.begin(); it != refusals_.end();) {
    Refusals& r = it->second;
    if (!all && now - r.window_start < absl::Minutes(1)) {
      ++it;
      continue;
    }
    if (r.counted > 0) {
      v1::AuditEntry summary = r.last;
      summary.set_result(
          Truncated(absl::StrCat(r.counted, " more refused ", it->first.second, " calls from ",
                                 it->first.first, " in the minute from ",
                                 absl::FormatTime(r.window_start), "; the last: ", r.last.result()),
                    kMaxResultBytes));
      spdlog::warn("{}", summary.result());
      Append(summary);
    }
    it = refusals_.erase(it);
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
