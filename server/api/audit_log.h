// The audit log: every mutating call (submit, cancel, export, worker registration) is
// appended to the store with who made it, from where, when, on what, and how it ended.
// A refused call is recorded too: that is what an audit is for. But a client that needs
// no credential to be refused must not fill the disk with its refusals: past
// kRefusalsPerMinute of one action from one peer host in a minute, refusals are counted,
// and written as one entry when the minute is over ("1825 more refused Attach calls from
// 10.0.0.7 in the minute; the last: ...").
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "server/api/access_control.h"
#include "server/core/clock.h"
#include "server/store/job_store.h"
#include "stoke/v1/coordinator.pb.h"

namespace stoke::server {

class AuditLog {
 public:
  // Refused calls of one action from one peer host written one by one in a minute.
  static constexpr int kRefusalsPerMinute = 10;
  static constexpr uint64_t kPruneEvery = 1000;

  // `max_entries`: the store keeps the newest this many (0: all), pruned every
  // kPruneEvery entries written.
  AuditLog(JobStore& store, Clock& clock, uint64_t max_entries = 0)
      : store_(store), clock_(clock), max_entries_(max_entries) {}
  ~AuditLog() { Flush(); }

  // Never fails the call it records: an entry the store refuses (a full disk) is logged.
  // Returns false for a refusal only counted (past kRefusalsPerMinute), so that the caller
  // logs no line for it either.
  bool Record(const Caller& caller, const std::string& action, const std::string& target,
              const absl::Status& result);
  // Writes the counts of refusals whose minute is over (all of them when `all`).
  void Flush(bool all = true);
  // The entry Record would store, for a call that stores it in its own transaction (a
  // submission, with its new job).
  v1::AuditEntry Entry(const Caller& caller, const std::string& action, const std::string& target,
                       const absl::Status& result) const;
  // Newest first: entries with an id below `before_id` (0: from the newest).
  absl::StatusOr<AuditPage> List(uint64_t before_id, uint32_t limit) {
    return store_.ListAudit(before_id, limit);
  }

 private:
  struct Refusals {
    absl::Time window_start;
    int recorded = 0;
    uint64_t counted = 0;  // beyond the ones recorded
    v1::AuditEntry last;   // the newest counted one
  };
  void FlushLocked(bool all);
  void Append(const v1::AuditEntry& entry);

  JobStore& store_;
  Clock& clock_;
  const uint64_t max_entries_;
  std::mutex mu_;
  std::atomic<uint64_t> appended_{0};  // entries written, for pruning
  // By (peer host, action).
  std::map<std::pair<std::string, std::string>, Refusals> refusals_;
};

}  // namespace stoke::server
