// The per-owner disk quota on job folders (--max-job-bytes-per-owner): a background walk of
// the folders, and what an owner over the limit meets: running jobs failed, submissions
// refused and queued jobs held, until their folders are cleared.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/core/coordinator.h"
#include "server/core/job_folder_usage.h"

namespace stoke::server {
namespace {

// In GiB from one up, else in MiB: a limit and a use read in the same unit.
std::string Bytes(uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  return mib >= 1024 ? absl::StrFormat("%.1f GiB", mib / 1024) : absl::StrFormat("%.1f MiB", mib);
}

}  // namespace

void Coordinator::DiskQuotaLoop() {
  std::unique_lock<std::mutex> lock(tick_mu_);
  do {
    lock.unlock();
    MeasureJobFolders();
    lock.lock();
  } while (!tick_cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.disk_quota_interval),
                              [this] { return stopping_; }));
}

void Coordinator::MeasureJobFolders() {
  // The walk takes no lock: on shared storage it may take seconds. A folder's owner never
  // changes, so each is read from the store once, once its job has ended (with its log's
  // final size: a job's stored log counts with its folder, and leaves the quota with it).
  std::vector<std::string> ended;
  std::map<std::string, uint64_t> usage =
      BytesPerOwner(options_.jobs_dir, [&](const std::string& id) -> std::optional<std::string> {
        if (auto it = folder_owners_.find(id); it != folder_owners_.end()) {
          ended.push_back(id);
          return it->second;
        }
        auto job = store_.GetJob(id);
        if (!job.ok()) return std::nullopt;  // no job's folder: not anyone's to count
        if (IsTerminal(job->state())) {
          ended_log_bytes_[id] = job->log_bytes();
          folder_owners_[id] = job->owner();
          ended.push_back(id);
        }
        return job->owner();
      });
  for (const std::string& id : ended) usage[folder_owners_[id]] += ended_log_bytes_[id];
  std::lock_guard<std::mutex> lock(mu_);
  for (const v1::Job* job : jobs_.Active()) usage[job->owner()] += job->log_bytes();
  owner_folder_bytes_ = std::move(usage);
  // Chosen first: a failed job leaves the active set being walked.
  struct Over {
    std::string job_id;
    uint32_t attempt;
    std::string why;
  };
  std::vector<Over> over;
  for (const v1::Job* job : jobs_.Active()) {
    if (!IsLive(job->state())) continue;
    if (auto why = OverDiskQuota(job->owner())) over.push_back({job->id(), job->attempt(), *why});
  }
  for (const Over& o : over) FailAttempt(o.job_id, o.attempt, o.why, /*retryable=*/false);
}

std::optional<std::string> Coordinator::OverDiskQuota(const std::string& owner) const {
  if (options_.max_job_bytes_per_owner == 0) return std::nullopt;
  auto it = owner_folder_bytes_.find(owner);
  if (it == owner_folder_bytes_.end() || it->second <= options_.max_job_bytes_per_owner) {
    return std::nullopt;
  }
  return absl::StrCat(
      owner.empty() ? "the job folders" : absl::StrCat("owner ", owner, "'s job folders"),
      " (with their jobs' logs) hold ", Bytes(it->second), ", over the limit of ",
      Bytes(options_.max_job_bytes_per_owner),
      " (--max-job-bytes-per-owner); export what you need and remove old jobs' "
      "folders to go on");
}

}  // namespace stoke::server
