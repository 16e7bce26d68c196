// The audit log: every mutating call (submit, cancel, export, worker registration) is
// appended to the store with who made it, from where, when, on what, and how it ended.
// A refused call is recorded too: that is what an audit is for.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "server/api/access_control.h"
#include "server/core/clock.h"
#include "server/store/job_store.h"
#include "stoke/v1/coordinator.pb.h"

namespace stoke::server {

class AuditLog {
 public:
  AuditLog(JobStore& store, Clock& clock) : store_(store), clock_(clock) {}

  // Never fails the call it records: an entry the store refuses (a full disk) is logged.
  void Record(const Caller& caller, const std::string& action, const std::string& target,
              const absl::Status& result);
  // The entry Record would store, for a call that stores it in its own transaction (a
  // submission, with its new job).
  v1::AuditEntry Entry(const Caller& caller, const std::string& action, const std::string& target,
                       const absl::Status& result) const;
  // Newest first: entries with an id below `before_id` (0: from the newest).
  absl::StatusOr<AuditPage> List(uint64_t before_id, uint32_t limit) {
    return store_.ListAudit(before_id, limit);
  }

 private:
  JobStore& store_;
  Clock& clock_;
};

}  // namespace stoke::server
