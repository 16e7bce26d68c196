#include "server/metrics/coordinator_metrics.h"

#include <prometheus/gauge.h>

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

std::string Lower(const std::string& enum_name, const std::string& prefix) {
  return absl::AsciiStrToLower(enum_name.substr(prefix.size()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> CoordinatorMetrics::Start(
    const std::string& address, SnapshotFn snapshot) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-address ", address, ": cannot listen: ", e.what()));
  }
  auto metrics = std::unique_ptr<CoordinatorMetrics>(
      new CoordinatorMetrics(std::move(exposer), std::move(snapshot)));
  auto ports = metrics->exposer_->GetListeningPorts();
  if (ports.empty())
    return absl::UnavailableError(absl::StrCat("--metrics-address ", address, ": not listening"));
  metrics->address_ = absl::StrCat(address.substr(0, address.rfind(':')), ":", ports.front());
  return metrics;
}

CoordinatorMetrics::CoordinatorMetrics(std::unique_ptr<prometheus::Exposer> exposer,
                                       SnapshotFn snapshot)
    : exposer_(std::move(exposer)),
      registry_(std::make_shared<prometheus::Registry>()),
      snapshot_(std::move(snapshot)),
      jobs_(prometheus::BuildGauge()
                .Name("stoke_jobs")
                .Help("Unfinished jobs by state")
                .Register(*registry_)),
      queue_length_(prometheus::BuildGauge()
                        .Name("stoke_queue_length")
                        .Help("Jobs waiting for devices (pending or restarting)")
                        .Register(*registry_)),
      workers_(prometheus::BuildGauge()
                   .Name("stoke_workers")
                   .Help("Attached workers by state")
                   .Register(*registry_)),
      job_samples_per_second_(prometheus::BuildGauge()
                                  .Name("stoke_job_samples_per_second")
                                  .Help("Training throughput of a running job, all ranks")
                                  .Register(*registry_)),
      job_loss_(prometheus::BuildGauge()
                    .Name("stoke_job_loss")
                    .Help("Mean training loss over the job's latest metrics window")
                    .Register(*registry_)),
      job_progress_(prometheus::BuildGauge()
                        .Name("stoke_job_progress_ratio")
                        .Help("Steps done over total steps, 0 to 1")
                        .Register(*registry_)),
      job_devices_(prometheus::BuildGauge()
                       .Name("stoke_job_devices")
                       .Help("Devices the job holds")
                       .Register(*registry_)) {
  // Every state is always present (0 when empty), so dashboards never show gaps.
  for (int s = v1::JOB_STATE_PENDING; s <= v1::JOB_STATE_RESTARTING; ++s) {
    auto state = static_cast<v1::JobState>(s);
    if (state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
        state == v1::JOB_STATE_CANCELLED) {
      continue;
    }
    jobs_by_state_[s] = &jobs_.Add({{"state", Lower(v1::JobState_Name(state), "JOB_STATE_")}});
  }
  for (int s = v1::WORKER_STATE_IDLE; s <= v1::WORKER_STATE_DRAINING; ++s) {
    workers_by_state_[s] = &workers_.Add(
        {{"state", Lower(v1::WorkerState_Name(static_cast<v1::WorkerState>(s)), "WORKER_STATE_")}});
  }
  queue_length_.Add({});
  exposer_->RegisterCollectable(registry_);
  if (snapshot_) refresher_ = std::thread([this] { RefreshLoop(); });
}

CoordinatorMetrics::~CoordinatorMetrics() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (refresher_.joinable()) refresher_.join();
}

void CoordinatorMetrics::RefreshLoop() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  do {
    lock.unlock();
    Refresh(snapshot_());
    lock.lock();
  } while (!stop_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; }));
}

void CoordinatorMetrics::Refresh(const MetricsSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, int> job_counts;
  int queued = 0;
  for (const auto& job : snapshot.active_jobs) {
    ++job_counts[job.state()];
    if (job.state() == v1::JOB_STATE_PENDING || job.state() == v1::JOB_STATE_RESTARTING) ++queued;
  }
  for (auto& [state, gauge] : jobs_by_state_) gauge->Set(job_counts[state]);
  queue_length_.Add({}).Set(queued);

  std::map<int, int> worker_counts;
  for (const auto& w : snapshot.cluster.workers()) ++worker_counts[w.state()];
  for (auto& [state, gauge] : workers_by_state_) gauge->Set(worker_counts[state]);

  std::set<std::string> live;
  for (const auto& job : snapshot.active_jobs) {
    live.insert(job.id());
    auto it = job_series_.find(job.id());
    if (it == job_series_.end()) {
      const prometheus::Labels labels{{"job", job.id()}};
      it = job_series_
               .emplace(job.id(),
                        JobSeries{&job_samples_per_second_.Add(labels), &job_loss_.Add(labels),
                                  &job_progress_.Add(labels), &job_devices_.Add(labels)})
               .first;
    }
    const auto& m = job.latest_metrics();
    const bool running = job.state() == v1::JOB_STATE_RUNNING;
    it->second.samples_per_second->Set(running ? m.samples_per_second() : 0);
    it->second.loss->Set(m.loss());
    it->second.progress->Set(m.total_steps() ? static_cast<double>(m.step()) / m.total_steps() : 0);
    it->second.devices->Set(job.placement_size());
  }
  // A finished job's series go, so label sets stay bounded however many jobs have run.
  for (auto it = job_series_.begin(); it != job_series_.end();) {
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    job_samples_per_second_.Remove(it->second.samples_per_second);
    job_loss_.Remove(it->second.loss);
    job_progress_.Remove(it->second.progress);
    job_devices_.Remove(it->second.devices);
    it = job_series_.erase(it);
  }
}

}  // namespace stoke::server
