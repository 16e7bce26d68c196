// The coordinator's Prometheus endpoint: /metrics on --metrics-address, beside /healthz
// and /readyz for probes. Families are built once and refreshed from a snapshot of the
// core each second (so a job shorter than the scrape interval still leaves its series for
// the retention) and again at each scrape (so a scrape at any interval sees the state at
// its own time). Labels stay few and bounded: `job_id` series live
// while the job runs and for a retention after it finishes, device series while their
// worker is attached, RPC series per method and status code. Every metric is listed,
// with its unit, in docs/metrics.md.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/api/rpc_observer.h"
#include "stoke/v1/coordinator.pb.h"

namespace stoke::server {

struct MetricsSnapshot {
  v1::Cluster cluster;
  std::vector<v1::Job> active_jobs;
};

class CoordinatorMetrics final : public RpcObserver {
 public:
  using SnapshotFn = std::function<MetricsSnapshot()>;
  struct Options {
    // host:port; port 0 picks one. Empty: no HTTP listener (tests read Exposition()).
    std::string address;
    // How long a finished job's series stay (its last values, throughput at 0).
    absl::Duration finished_job_retention = absl::Minutes(10);
    // When set, /metrics answers only requests that carry it as the HTTP basic-auth
    // password (Prometheus: basic_auth with password_file); any user name.
    std::string token;
    // False for a standby coordinator waiting for the leader lease (SetLeader(true) once
    // it leads): stoke_coordinator_leader says which one of a pair serves.
    bool leader = true;
  };

  // Listens (if an address is given) and, with a snapshot function, refreshes from it
  // every second and at each scrape.
  static absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> Start(const Options& options,
                                                                   SnapshotFn snapshot);
  ~CoordinatorMetrics() override;

  // host:port actually bound.
  const std::string& address() const { return address_; }
  // Applies one snapshot taken at `now` (the refresher every second, and each scrape).
  void Refresh(const MetricsSnapshot& snapshot, absl::Time now);
  // This coordinator took the leader lease (or lost it); /readyz follows.
  void SetLeader(bool leader);
  // It is shutting down: /readyz answers 503 from now on (/healthz stays 200).
  void SetDraining();
  // Everything registered, in Prometheus text format (what /metrics serves).
  std::string Exposition() const;

  // RpcObserver: gRPC's threads call these.
  void OnUnaryFinished(const std::string& method, const std::string& code, double seconds) override;
  void OnStreamOpened(const std::string& method) override;
  void OnStreamFinished(const std::string& method, const std::string& code) override;

 private:
  using GaugeFamily = prometheus::Family<prometheus::Gauge>;
  struct JobSeries {
    std::vector<prometheus::Gauge*> gauges;                // one per job gauge family, in order
    std::vector<prometheus::Gauge*> diagnoses;             // one per diagnosis
    std::map<std::string, prometheus::Gauge*> placements;  // by worker id
    std::map<prometheus::Labels, prometheus::Gauge*> stragglers;  // while each straggles
    std::map<std::string, prometheus::Gauge*> reported;           // script jobs' scalars, by name
    prometheus::Counter* samples_skipped = nullptr;
    prometheus::Gauge* info = nullptr;  // stoke_job_info
    uint64_t samples_skipped_seen = 0;  // the attempt's count last added to the counter
    v1::Job last;
    std::optional<absl::Time> finished_at;
    uint32_t startup_observed_attempt = 0;  // its start-up is in the histogram
  };
  struct DeviceSeries {
    prometheus::Labels labels;
    std::map<std::string, prometheus::Gauge*> gauges;  // by family name, added when reported
  };

  CoordinatorMetrics(const Options& options, std::unique_ptr<prometheus::Exposer> exposer,
                     SnapshotFn snapshot);
  // What the exposer collects: the registry, refreshed first.
  class ScrapeRefresh final : public prometheus::Collectable {
   public:
    explicit ScrapeRefresh(CoordinatorMetrics* metrics) : metrics_(metrics) {}
    std::vector<prometheus::MetricFamily> Collect() const override;

   private:
    CoordinatorMetrics* metrics_;
  };

  void RefreshLoop();
  void RefreshJobs(const std::vector<v1::Job>& active, absl::Time now);
  void RefreshDevices(const v1::Cluster& cluster);
  void RefreshFinished(const v1::Cluster& cluster);
  void RefreshProcess();
  // A job's series from its latest state, family by family (the helpers below).
  void SetJob(JobSeries& series, const v1::Job& job, bool finished);
  void SetPlacements(JobSeries& series, const v1::Job& job, bool finished);
  void SetStragglers(JobSeries& series, const v1::Job& job, bool live);
  void CountSkippedSamples(JobSeries& series, const v1::Job& job);
  void SetReportedScalars(JobSeries& series, const v1::Job& job);
  void RemoveJob(JobSeries& series);
  GaugeFamily& Gauge(const std::string& name, const std::string& help);
  // The constructor registers every family once, in these groups, in this order (the
  // order /metrics lists them in).
  void RegisterClusterFamilies();
  void RegisterJobFamilies();
  void RegisterServiceFamilies();
  void AddFixedSeries();
  void RegisterProcessFamilies();

  const Options options_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::string address_;
  SnapshotFn snapshot_;
  std::shared_ptr<ScrapeRefresh> scrape_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread refresher_;

  prometheus::Gauge* leader_ = nullptr;
  // Cluster and scheduler.
  GaugeFamily* jobs_ = nullptr;
  GaugeFamily* queue_length_ = nullptr;
  GaugeFamily* workers_ = nullptr;
  GaugeFamily* quota_used_ = nullptr;
  GaugeFamily* quota_guaranteed_ = nullptr;
  GaugeFamily* owner_recent_use_ = nullptr;
  // Jobs: one family per entry of the job gauge table (coordinator_metrics.cc).
  std::vector<GaugeFamily*> job_families_;
  GaugeFamily* job_diagnosis_ = nullptr;
  GaugeFamily* job_device_ = nullptr;
  GaugeFamily* job_straggler_ = nullptr;
  GaugeFamily* job_reported_ = nullptr;
  GaugeFamily* job_info_ = nullptr;
  prometheus::Family<prometheus::Counter>* job_samples_skipped_ = nullptr;
  prometheus::Histogram* job_startup_ = nullptr;
  // Devices: by name (stoke_device_*).
  std::map<std::string, GaugeFamily*> device_families_;
  // API.
  prometheus::Family<prometheus::Counter>* rpc_requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* rpc_duration_ = nullptr;
  GaugeFamily* rpc_open_streams_ = nullptr;
  // Workers.
  prometheus::Counter* refused_reports_ = nullptr;
  uint64_t refused_reports_seen_ = 0;
  prometheus::Counter* preemptions_ = nullptr;
  uint64_t preemptions_seen_ = 0;
  prometheus::Counter* preemption_lost_ = nullptr;
  double preemption_lost_seen_ = 0;
  // Jobs finished since the coordinator started, by final state.
  prometheus::Family<prometheus::Counter>* jobs_finished_ = nullptr;
  std::map<std::string, prometheus::Counter*> finished_by_state_;
  std::map<std::string, uint64_t> finished_seen_;
  // This process (process_*).
  prometheus::Counter* process_cpu_ = nullptr;
  double process_cpu_seen_ = 0;
  std::map<std::string, prometheus::Gauge*> process_gauges_;  // by family name
  // Telemetry writer.
  prometheus::Counter* telemetry_dropped_ = nullptr;
  uint64_t telemetry_dropped_seen_ = 0;
  GaugeFamily* telemetry_queued_ = nullptr;

  mutable std::mutex mu_;  // guards everything below and the families' children
  std::map<int, prometheus::Gauge*> jobs_by_state_;
  std::map<int, prometheus::Gauge*> workers_by_state_;
  std::map<std::string, JobSeries> job_series_;
  std::map<std::string, DeviceSeries> device_series_;  // by worker id
};

}  // namespace stoke::server
