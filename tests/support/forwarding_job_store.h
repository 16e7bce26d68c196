// A job store that hands every call to a real one: tests derive from it to put a failure
// or a delay in front of the few calls they care about (a full disk, a slow batch write),
// and everything else behaves as the real store does.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/store/job_store.h"

namespace stoke::testing {

class ForwardingJobStore : public server::JobStore {
 public:
  explicit ForwardingJobStore(std::unique_ptr<server::JobStore> inner) : inner_(std::move(inner)) {}

  absl::StatusOr<v1::Job> CreateJob(v1::Job job, absl::Span<const v1::JobEvent> events) override {
    return inner_->CreateJob(std::move(job), events);
  }
  absl::StatusOr<v1::Job> CreateAuditedJob(v1::Job job, absl::Span<const v1::JobEvent> events,
                                           v1::AuditEntry audit) override {
    return inner_->CreateAuditedJob(std::move(job), events, std::move(audit));
  }
  absl::Status Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) override {
    return inner_->Commit(job, events);
  }
  absl::Status CommitBatch(absl::Span<const server::JobUpdate> updates) override {
    return inner_->CommitBatch(updates);
  }
  absl::StatusOr<v1::Job> GetJob(const std::string& id) override { return inner_->GetJob(id); }
  absl::StatusOr<v1::Job> FindJobByRequestId(const std::string& request_id) override {
    return inner_->FindJobByRequestId(request_id);
  }
  absl::StatusOr<server::JobPage> ListJobs(const server::JobQuery& query) override {
    return inner_->ListJobs(query);
  }
  absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(const std::string& job_id, uint64_t from_seq,
                                                       uint32_t limit) override {
    return inner_->ReadEvents(job_id, from_seq, limit);
  }
  absl::Status AppendAudit(const v1::AuditEntry& entry) override {
    return inner_->AppendAudit(entry);
  }
  absl::Status PruneAudit(uint64_t keep) override { return inner_->PruneAudit(keep); }
  absl::StatusOr<server::AuditPage> ListAudit(uint64_t before_id, uint32_t limit) override {
    return inner_->ListAudit(before_id, limit);
  }
  absl::StatusOr<std::string> BindWorkerCredential(const std::string& worker_id,
                                                   const std::string& credential) override {
    return inner_->BindWorkerCredential(worker_id, credential);
  }
  absl::Status PutCode(const std::string& sha256, const std::string& bundle) override {
    return inner_->PutCode(sha256, bundle);
  }
  absl::StatusOr<std::string> GetCode(const std::string& sha256) override {
    return inner_->GetCode(sha256);
  }

 private:
  std::unique_ptr<server::JobStore> inner_;
};

}  // namespace stoke::testing
