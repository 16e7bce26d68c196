// The coordinator's Prometheus endpoint: /metrics on --metrics-address. Families are
// built once; a background thread refreshes them each second from a snapshot of the core,
// so scrapes and training never wait on each other. Label sets stay small: job series
// exist only while the job is unfinished.
#pragma once

#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "stoke/v1/coordinator.pb.h"

namespace stoke::server {

struct MetricsSnapshot {
  v1::Cluster cluster;
  std::vector<v1::Job> active_jobs;
};

class CoordinatorMetrics {
 public:
  using SnapshotFn = std::function<MetricsSnapshot()>;

  // Listens on `address` (host:port; port 0 picks one) and refreshes from `snapshot`.
  static absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> Start(const std::string& address,
                                                                   SnapshotFn snapshot);
  ~CoordinatorMetrics();

  // host:port actually bound.
  const std::string& address() const { return address_; }
  // Applies one snapshot (the refresher calls this every second; tests call it directly).
  void Refresh(const MetricsSnapshot& snapshot);

 private:
  CoordinatorMetrics(std::unique_ptr<prometheus::Exposer> exposer, SnapshotFn snapshot);
  void RefreshLoop();

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::string address_;
  SnapshotFn snapshot_;

  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& queue_length_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Gauge>& job_samples_per_second_;
  prometheus::Family<prometheus::Gauge>& job_loss_;
  prometheus::Family<prometheus::Gauge>& job_progress_;
  prometheus::Family<prometheus::Gauge>& job_devices_;

  std::mutex mu_;  // guards the cached children below
  std::map<int, prometheus::Gauge*> jobs_by_state_;
  std::map<int, prometheus::Gauge*> workers_by_state_;
  struct JobSeries {
    prometheus::Gauge* samples_per_second;
    prometheus::Gauge* loss;
    prometheus::Gauge* progress;
    prometheus::Gauge* devices;
  };
  std::map<std::string, JobSeries> job_series_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread refresher_;
};

}  // namespace stoke::server
