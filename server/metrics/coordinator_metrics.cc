#include "server/metrics/coordinator_metrics.h"

#include <CivetServer.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <cstring>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "proto/stoke/v1/limits.h"
#include "security/token_hash.h"
#include "server/common/device_label.h"
#include "server/metrics/process_readings.h"

namespace stoke::server {
namespace {

std::string Lower(const std::string& enum_name, const std::string& prefix) {
  return absl::AsciiStrToLower(enum_name.substr(prefix.size()));
}

bool Running(const v1::Job& job) { return job.state() == v1::JOB_STATE_RUNNING; }

// The per-job gauges, all labelled {job_id}. `live`: only meaningful while the job runs
// (throughput); 0 otherwise, so a finished job's last rate does not linger.
struct JobGaugeDef {
  const char* name;
  const char* help;
  bool live;
  double (*value)(const v1::Job&);
};

const v1::MetricSample& M(const v1::Job& j) { return j.latest_metrics(); }

constexpr JobGaugeDef kJobGauges[] = {
    {"stoke_job_samples_per_second", "Training throughput over the latest window, all ranks", true,
     [](const v1::Job& j) { return M(j).samples_per_second(); }},
    {"stoke_job_tokens_per_second", "Language models: tokens trained per second, all ranks", true,
     [](const v1::Job& j) { return M(j).tokens_per_second(); }},
    {"stoke_job_model_flops_per_second",
     "Model FLOP/s achieved per device (PaLM count: 6 per weight per token plus attention)", true,
     [](const v1::Job& j) { return M(j).achieved_flops(); }},
    {"stoke_job_mfu_ratio", "Model FLOP/s over the device's dense bf16 peak, 0 to 1 (0: unknown)",
     true, [](const v1::Job& j) { return M(j).mfu(); }},
    {"stoke_job_step_seconds", "Mean optimizer step time over the latest window, rank 0", true,
     [](const v1::Job& j) { return M(j).step_seconds(); }},
    {"stoke_job_data_wait_ratio", "Share of step time waiting for the next batch, 0 to 1", true,
     [](const v1::Job& j) { return M(j).data_wait_ratio(); }},
    {"stoke_job_comm_wait_ratio",
     "Share of step time waiting for gradient all-reduces backward did not hide, 0 to 1", true,
     [](const v1::Job& j) { return M(j).comm_wait_ratio(); }},
    {"stoke_job_compute_ratio", "Share of step time neither waiting for data nor for all-reduces",
     true,
     [](const v1::Job& j) {
       return M(j).step_seconds() > 0
                  ? std::max(0.0, 1.0 - M(j).data_wait_ratio() - M(j).comm_wait_ratio())
                  : 0.0;
     }},
    {"stoke_job_loss", "Mean training loss over the latest window", false,
     [](const v1::Job& j) { return M(j).loss(); }},
    {"stoke_job_learning_rate", "Learning rate at the end of the latest window", false,
     [](const v1::Job& j) { return M(j).learning_rate(); }},
    // With stoke_job_loss, what a loss-against-step plot (the job dashboard's) needs.
    {"stoke_job_step", "Optimizer steps done, at the latest window", false,
     [](const v1::Job& j) { return static_cast<double>(M(j).step()); }},
    {"stoke_job_progress_ratio", "Steps done over total steps, 0 to 1", false,
     [](const v1::Job& j) {
       return M(j).total_steps() ? static_cast<double>(M(j).step()) / M(j).total_steps() : 0.0;
     }},
    {"stoke_job_devices", "Devices the job holds", true,
     [](const v1::Job& j) { return static_cast<double>(j.placement_size()); }},
    {"stoke_job_restarts", "Attempts re-queued after a failure", false,
     [](const v1::Job& j) { return static_cast<double>(j.restarts()); }},
    {"stoke_job_memory_allocated_bytes", "Bytes held by tensors on rank 0's GPU", false,
     [](const v1::Job& j) { return static_cast<double>(M(j).memory_allocated_bytes()); }},
    {"stoke_job_memory_reserved_bytes", "Bytes the caching allocator holds on rank 0's GPU", false,
     [](const v1::Job& j) { return static_cast<double>(M(j).memory_reserved_bytes()); }},
    {"stoke_job_memory_peak_bytes", "Most bytes ever held by tensors on rank 0's GPU", false,
     [](const v1::Job& j) { return static_cast<double>(M(j).memory_peak_bytes()); }},
    {"stoke_job_allocator_retries",
     "Allocations the caching allocator retried after freeing its cache (fragmentation)", false,
     [](const v1::Job& j) { return static_cast<double>(M(j).allocator_retries()); }},
    {"stoke_job_skipped_steps", "fp16 jobs: optimizer steps skipped for overflowing gradients",
     false, [](const v1::Job& j) { return static_cast<double>(M(j).skipped_steps()); }},
    {"stoke_job_loss_scale", "fp16 jobs: the dynamic loss scale now", false,
     [](const v1::Job& j) { return M(j).loss_scale(); }},
    {"stoke_job_eval_loss", "Loss on the held-out split at the latest evaluation", false,
     [](const v1::Job& j) { return j.latest_eval().eval().loss(); }},
    {"stoke_job_eval_accuracy_ratio", "Classifiers: accuracy at the latest evaluation, 0 to 1",
     false, [](const v1::Job& j) { return j.latest_eval().eval().accuracy(); }},
    {"stoke_job_eval_perplexity", "Language models: perplexity at the latest evaluation", false,
     [](const v1::Job& j) { return j.latest_eval().eval().perplexity(); }},
};

constexpr v1::Diagnosis kDiagnoses[] = {v1::DIAGNOSIS_INPUT_BOUND, v1::DIAGNOSIS_LAUNCH_BOUND,
                                        v1::DIAGNOSIS_MEMORY_GROWING, v1::DIAGNOSIS_STRAGGLER};

struct DeviceGaugeDef {
  const char* name;
  const char* help;
  std::optional<double> (*value)(const v1::DeviceStats&);
};

constexpr DeviceGaugeDef kDeviceGauges[] = {
    {"stoke_device_utilization_ratio",
     "Share of time a kernel ran (GPUs) or of the machine's cores busy (CPU workers), 0 to 1",
     [](const v1::DeviceStats& s) -> std::optional<double> { return s.utilization(); }},
    {"stoke_device_memory_used_bytes", "Device memory in use (CPU workers: resident memory)",
     [](const v1::DeviceStats& s) -> std::optional<double> {
       return static_cast<double>(s.memory_used_bytes());
     }},
    {"stoke_device_memory_total_bytes", "Device memory (CPU workers: the machine's)",
     [](const v1::DeviceStats& s) -> std::optional<double> {
       return static_cast<double>(s.memory_total_bytes());
     }},
    {"stoke_device_sm_clock_hertz", "SM clock (CPU workers: the cores' mean clock)",
     [](const v1::DeviceStats& s) -> std::optional<double> {
       return s.has_sm_clock_hz() ? std::optional<double>(s.sm_clock_hz()) : std::nullopt;
     }},
    {"stoke_device_power_watts", "Board power draw (GPUs)",
     [](const v1::DeviceStats& s) -> std::optional<double> {
       return s.has_power_watts() ? std::optional<double>(s.power_watts()) : std::nullopt;
     }},
    {"stoke_device_temperature_celsius", "GPU temperature",
     [](const v1::DeviceStats& s) -> std::optional<double> {
       return s.has_temperature_celsius() ? std::optional<double>(s.temperature_celsius())
                                          : std::nullopt;
     }},
};

// What /readyz reports. civetweb's callbacks carry no user data, so the state is the
// process's: one coordinator serves /metrics per process.
std::atomic<bool> g_leader{true};
std::atomic<bool> g_draining{false};

// Probes that cannot speak TLS gRPC: /healthz (the process answers) and /readyz (it
// serves: leads, and is not draining), answered before civetweb's own handlers and
// without --metrics-token, since they say nothing about jobs.
int AnswerProbe(mg_connection* connection) {
  const mg_request_info* request = mg_get_request_info(connection);
  const char* uri = request != nullptr ? request->local_uri : nullptr;
  if (uri == nullptr || (std::strcmp(uri, "/healthz") != 0 && std::strcmp(uri, "/readyz") != 0)) {
    return 0;  // /metrics and the rest: civetweb's handlers
  }
  int status = 200;
  const char* body = "ok\n";
  if (std::strcmp(uri, "/readyz") == 0 && g_draining.load()) {
    status = 503;
    body = "draining: the coordinator is shutting down\n";
  } else if (std::strcmp(uri, "/readyz") == 0 && !g_leader.load()) {
    status = 503;
    body = "standby: waiting for the leader lease\n";
  }
  mg_printf(connection,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n%s",
            status, status == 200 ? "OK" : "Service Unavailable", std::strlen(body), body);
  return status;
}

// What trains: "script" for a script job, else the model's kind ("mlp", "python", ...).
std::string ModelName(const v1::JobSpec& spec) {
  if (spec.has_command()) return "script";
  const auto* field = v1::ModelSpec::descriptor()->FindFieldByNumber(spec.model().kind_case());
  return field != nullptr ? field->name() : "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> CoordinatorMetrics::Start(
    const Options& options, SnapshotFn snapshot) {
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!options.address.empty()) {
    try {
      static CivetCallbacks callbacks;
      callbacks.begin_request = AnswerProbe;
      exposer = std::make_unique<prometheus::Exposer>(options.address, 2, &callbacks);
      if (!options.token.empty()) {
        exposer->RegisterAuth(
            [token = options.token](const std::string&, const std::string& password) {
              return security::ConstantTimeEquals(password, token);
            },
            "stoke", "/metrics");
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("--metrics-address ", options.address, ": cannot listen: ", e.what()));
    }
  }
  auto metrics = std::unique_ptr<CoordinatorMetrics>(
      new CoordinatorMetrics(options, std::move(exposer), std::move(snapshot)));
  if (metrics->exposer_) {
    auto ports = metrics->exposer_->GetListeningPorts();
    if (ports.empty()) {
      return absl::UnavailableError(
          absl::StrCat("--metrics-address ", options.address, ": not listening"));
    }
    metrics->address_ =
        absl::StrCat(options.address.substr(0, options.address.rfind(':')), ":", ports.front());
  }
  return metrics;
}

CoordinatorMetrics::GaugeFamily& CoordinatorMetrics::Gauge(const std::string& name,
                                                           const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
}

CoordinatorMetrics::CoordinatorMetrics(const Options& options,
                                       std::unique_ptr<prometheus::Exposer> exposer,
                                       SnapshotFn snapshot)
    : options_(options),
      exposer_(std::move(exposer)),
      registry_(std::make_shared<prometheus::Registry>()),
      snapshot_(std::move(snapshot)) {
  RegisterClusterFamilies();
  RegisterJobFamilies();
  RegisterServiceFamilies();
  AddFixedSeries();
  RegisterProcessFamilies();
  RefreshProcess();
  scrape_ = std::make_shared<ScrapeRefresh>(this);
  if (exposer_) exposer_->RegisterCollectable(scrape_);
  if (snapshot_) refresher_ = std::thread([this] { RefreshLoop(); });
}

// The cluster and the scheduler: leadership, jobs and workers by state, the queue, quotas
// and fair share.
void CoordinatorMetrics::RegisterClusterFamilies() {
  leader_ = &Gauge("stoke_coordinator_leader",
                   "1 on the coordinator that serves; 0 on a standby waiting for the leader "
                   "lease of a shared (PostgreSQL) store")
                 .Add({});
  leader_->Set(options_.leader ? 1 : 0);
  g_leader = options_.leader;
  jobs_ = &Gauge("stoke_jobs", "Unfinished jobs by state");
  queue_length_ =
      &Gauge("stoke_queue_length", "Jobs waiting for devices (pending, restarting or preempted)");
  workers_ = &Gauge("stoke_workers", "Attached workers by state");
  quota_used_ = &Gauge("stoke_quota_used_devices",
                       "Devices a quota group's running jobs hold now, by type (gpu, cpu)");
  quota_guaranteed_ =
      &Gauge("stoke_quota_guaranteed_devices", "Devices guaranteed to a quota group, by type");
  owner_recent_use_ = &Gauge("stoke_owner_recent_device_seconds",
                             "An owner's recent device use for fair share: device seconds, each "
                             "counting half as much per half-life since");
}

// Each job's series (the job gauge table, diagnoses, devices, stragglers, its name,
// reported scalars, skipped samples), the device table, and start-up times.
void CoordinatorMetrics::RegisterJobFamilies() {
  for (const JobGaugeDef& def : kJobGauges) job_families_.push_back(&Gauge(def.name, def.help));
  job_diagnosis_ = &Gauge("stoke_job_diagnosis",
                          "1 while the coordinator diagnoses the job so (input_bound: waits for "
                          "data; launch_bound: GPU busy at low FLOP/s; memory_growing; "
                          "straggler: one rank holds the others back)");
  job_device_ = &Gauge("stoke_job_device_info",
                       "1 for each device a running job holds (join on host and gpu)");
  job_straggler_ = &Gauge("stoke_job_straggler",
                          "1 while a rank of a job of several ranks is slower than its peers for "
                          "5 windows in a row; cause: compute (the others wait for it) or "
                          "allreduce (it waits on its link); absent otherwise");
  job_info_ = &Gauge("stoke_job_info",
                     "1 for each job with series here, labelled with its name, owner and model "
                     "(join on job_id to pick jobs by name)");
  job_reported_ = &Gauge("stoke_job_reported",
                         "Script jobs: the latest value of each scalar the program reports "
                         "(stoke.report), by name; at most 32 names a job");
  job_samples_skipped_ = &prometheus::BuildCounter()
                              .Name("stoke_job_samples_skipped_total")
                              .Help(
                                  "Training samples skipped because their file could not be "
                                  "read or decoded (a damaged image), all attempts")
                              .Register(*registry_);
  for (const DeviceGaugeDef& def : kDeviceGauges) {
    device_families_[def.name] = &Gauge(def.name, def.help);
  }
  // Warm workers start in about a second; cold GPU jobs with large data take minutes.
  job_startup_ = &prometheus::BuildHistogram()
                      .Name("stoke_job_startup_seconds")
                      .Help(
                          "Time from a job attempt entering the queue to its first training "
                          "step completing (for attempt 1: from the submit)")
                      .Register(*registry_)
                      .Add({}, prometheus::Histogram::BucketBoundaries{0.1, 0.25, 0.5, 1, 2, 5, 10,
                                                                       30, 60, 120, 300, 600});
}

// The coordinator as a service: gRPC calls, refused worker reports, preemptions and the
// telemetry queue.
void CoordinatorMetrics::RegisterServiceFamilies() {
  rpc_requests_ = &prometheus::BuildCounter()
                       .Name("stoke_rpc_requests_total")
                       .Help("gRPC calls answered, by method and status code")
                       .Register(*registry_);
  rpc_duration_ = &prometheus::BuildHistogram()
                       .Name("stoke_rpc_duration_seconds")
                       .Help("Time from receiving a unary gRPC call to answering it")
                       .Register(*registry_);
  rpc_open_streams_ = &Gauge("stoke_rpc_open_streams",
                             "Streaming calls open now (WatchJob: watchers; Attach: workers)");
  refused_reports_ = &prometheus::BuildCounter()
                          .Name("stoke_worker_reports_refused_total")
                          .Help(
                              "Messages from workers about jobs not assigned to them (stale "
                              "or forged), refused")
                          .Register(*registry_)
                          .Add({});
  preemptions_ = &prometheus::BuildCounter()
                      .Name("stoke_preemptions_total")
                      .Help("Running jobs stopped at a step boundary for jobs of higher priority")
                      .Register(*registry_)
                      .Add({});
  preemption_lost_ = &prometheus::BuildCounter()
                          .Name("stoke_preemption_lost_seconds_total")
                          .Help(
                              "Device seconds preemptions cost their jobs: stopping, and any "
                              "steps trained again")
                          .Register(*registry_)
                          .Add({});
  telemetry_dropped_ = &prometheus::BuildCounter()
                            .Name("stoke_telemetry_events_dropped_total")
                            .Help(
                                "Metric samples and log lines not stored: the telemetry queue "
                                "was full (a slow disk) or the store refused them")
                            .Register(*registry_)
                            .Add({});
  telemetry_queued_ = &Gauge("stoke_telemetry_queue_events",
                             "Metric samples and log lines received and not yet stored");
}

// Series that exist from the start, whatever happens: every job and worker state, the
// queue, the build, and finished jobs by final state.
void CoordinatorMetrics::AddFixedSeries() {
  // Every state is always present (0 when empty), so dashboards never show gaps.
  for (int s = v1::JOB_STATE_PENDING; s <= v1::JOB_STATE_PREEMPTED; ++s) {
    auto state = static_cast<v1::JobState>(s);
    if (state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
        state == v1::JOB_STATE_CANCELLED) {
      continue;
    }
    jobs_by_state_[s] = &jobs_->Add({{"state", Lower(v1::JobState_Name(state), "JOB_STATE_")}});
  }
  for (int s = v1::WORKER_STATE_IDLE; s <= v1::WORKER_STATE_DRAINING; ++s) {
    workers_by_state_[s] = &workers_->Add(
        {{"state", Lower(v1::WorkerState_Name(static_cast<v1::WorkerState>(s)), "WORKER_STATE_")}});
  }
  queue_length_->Add({});
  Gauge("stoke_build_info", "1, labelled with the coordinator's version and the commit built")
      .Add({{"version", STOKE_VERSION}, {"commit", STOKE_COMMIT}})
      .Set(1);
  jobs_finished_ = &prometheus::BuildCounter()
                        .Name("stoke_jobs_finished_total")
                        .Help("Jobs that reached a final state since the coordinator started")
                        .Register(*registry_);
  for (const char* state : {"succeeded", "failed", "cancelled"}) {
    finished_by_state_[state] = &jobs_finished_->Add({{"state", state}});
  }
}

// The process_* families Prometheus' own clients export.
void CoordinatorMetrics::RegisterProcessFamilies() {
  process_cpu_ = &prometheus::BuildCounter()
                      .Name("process_cpu_seconds_total")
                      .Help("User and system CPU time spent in seconds")
                      .Register(*registry_)
                      .Add({});
  for (const auto& [name, help] : std::vector<std::pair<const char*, const char*>>{
           {"process_resident_memory_bytes", "Resident memory size in bytes"},
           {"process_virtual_memory_bytes", "Virtual memory size in bytes"},
           {"process_open_fds", "Number of open file descriptors"},
           {"process_max_fds", "Maximum number of open file descriptors"},
           {"process_start_time_seconds",
            "Start time of the process since unix epoch in seconds"}}) {
    process_gauges_[name] = &Gauge(name, help).Add({});
  }
}

CoordinatorMetrics::~CoordinatorMetrics() {
  // No scrape may be running once this is gone: the HTTP server stops first.
  exposer_.reset();
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
    Refresh(snapshot_(), absl::Now());
    lock.lock();
  } while (!stop_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; }));
}

std::vector<prometheus::MetricFamily> CoordinatorMetrics::ScrapeRefresh::Collect() const {
  if (metrics_->snapshot_) metrics_->Refresh(metrics_->snapshot_(), absl::Now());
  return metrics_->registry_->Collect();
}

void CoordinatorMetrics::SetLeader(bool leader) {
  leader_->Set(leader ? 1 : 0);
  g_leader = leader;
}

void CoordinatorMetrics::SetDraining() { g_draining = true; }

std::string CoordinatorMetrics::Exposition() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void CoordinatorMetrics::Refresh(const MetricsSnapshot& snapshot, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, int> job_counts;
  int queued = 0;
  for (const auto& job : snapshot.active_jobs) {
    ++job_counts[job.state()];
    if (job.state() == v1::JOB_STATE_PENDING || job.state() == v1::JOB_STATE_RESTARTING ||
        job.state() == v1::JOB_STATE_PREEMPTED) {
      ++queued;
    }
  }
  for (auto& [state, gauge] : jobs_by_state_) gauge->Set(job_counts[state]);
  // The core counts from its start; a counter only grows, so it takes the difference.
  const uint64_t refused = snapshot.cluster.refused_worker_reports();
  if (refused > refused_reports_seen_) {
    refused_reports_->Increment(static_cast<double>(refused - refused_reports_seen_));
    refused_reports_seen_ = refused;
  }
  if (const uint64_t n = snapshot.cluster.preemptions(); n > preemptions_seen_) {
    preemptions_->Increment(static_cast<double>(n - preemptions_seen_));
    preemptions_seen_ = n;
  }
  if (const double lost = snapshot.cluster.preemption_lost_seconds();
      lost > preemption_lost_seen_) {
    preemption_lost_->Increment(lost - preemption_lost_seen_);
    preemption_lost_seen_ = lost;
  }
  const uint64_t dropped = snapshot.cluster.telemetry_events_dropped();
  if (dropped > telemetry_dropped_seen_) {
    telemetry_dropped_->Increment(static_cast<double>(dropped - telemetry_dropped_seen_));
    telemetry_dropped_seen_ = dropped;
  }
  telemetry_queued_->Add({}).Set(static_cast<double>(snapshot.cluster.telemetry_events_queued()));
  // Groups come from the quotas file, fixed while the coordinator runs; owners only grow
  // in number (one series each, as for workers).
  for (const auto& q : snapshot.cluster.quotas()) {
    quota_used_->Add({{"group", q.group()}, {"type", "gpu"}}).Set(q.used_gpus());
    quota_used_->Add({{"group", q.group()}, {"type", "cpu"}}).Set(q.used_cpus());
    quota_guaranteed_->Add({{"group", q.group()}, {"type", "gpu"}}).Set(q.guaranteed_gpus());
    quota_guaranteed_->Add({{"group", q.group()}, {"type", "cpu"}}).Set(q.guaranteed_cpus());
  }
  for (const auto& o : snapshot.cluster.owners()) {
    owner_recent_use_->Add({{"owner", o.owner()}}).Set(3600 * o.recent_device_hours());
  }
  queue_length_->Add({}).Set(queued);
  std::map<int, int> worker_counts;
  for (const auto& w : snapshot.cluster.workers()) ++worker_counts[w.state()];
  for (auto& [state, gauge] : workers_by_state_) gauge->Set(worker_counts[state]);
  RefreshJobs(snapshot.active_jobs, now);
  RefreshDevices(snapshot.cluster);
  RefreshFinished(snapshot.cluster);
  RefreshProcess();
}

void CoordinatorMetrics::RefreshFinished(const v1::Cluster& cluster) {
  // The core counts from its start; a counter only grows, so it takes the difference.
  for (const auto& [state, count] : cluster.jobs_finished()) {
    auto it = finished_by_state_.find(state);
    if (it == finished_by_state_.end()) continue;
    uint64_t& seen = finished_seen_[state];
    if (count > seen) it->second->Increment(static_cast<double>(count - seen));
    seen = std::max(seen, count);
  }
}

void CoordinatorMetrics::RefreshProcess() {
  const std::optional<ProcessReadings> r = ReadProcess();
  if (!r) return;
  if (r->cpu_seconds > process_cpu_seen_) {
    process_cpu_->Increment(r->cpu_seconds - process_cpu_seen_);
    process_cpu_seen_ = r->cpu_seconds;
  }
  process_gauges_["process_resident_memory_bytes"]->Set(r->resident_bytes);
  process_gauges_["process_virtual_memory_bytes"]->Set(r->virtual_bytes);
  process_gauges_["process_open_fds"]->Set(r->open_fds);
  process_gauges_["process_max_fds"]->Set(r->max_fds);
  process_gauges_["process_start_time_seconds"]->Set(r->start_time_seconds);
}

void CoordinatorMetrics::SetJob(JobSeries& series, const v1::Job& job, bool finished) {
  const bool live = !finished && Running(job);
  for (size_t i = 0; i < std::size(kJobGauges); ++i) {
    series.gauges[i]->Set(kJobGauges[i].live && !live ? 0.0 : kJobGauges[i].value(job));
  }
  std::set<int> now(job.latest_metrics().diagnoses().begin(),
                    job.latest_metrics().diagnoses().end());
  for (size_t i = 0; i < std::size(kDiagnoses); ++i) {
    series.diagnoses[i]->Set(live && now.count(kDiagnoses[i]) ? 1 : 0);
  }
  SetPlacements(series, job, finished);
  SetStragglers(series, job, live);
  CountSkippedSamples(series, job);
  SetReportedScalars(series, job);
}

// Which devices it holds: present while it runs, gone when it stops.
void CoordinatorMetrics::SetPlacements(JobSeries& series, const v1::Job& job, bool finished) {
  std::set<std::string> held;
  if (!finished) {
    for (const auto& p : job.placement()) {
      held.insert(p.worker_id());
      if (series.placements.count(p.worker_id())) continue;
      series.placements[p.worker_id()] = &job_device_->Add({{"job_id", job.id()},
                                                            {"host", p.host()},
                                                            {"gpu", DeviceLabel(p.device())},
                                                            {"uuid", p.device().uuid()},
                                                            {"rank", std::to_string(p.rank())},
                                                            {"worker", p.worker_id()}});
      series.placements[p.worker_id()]->Set(1);
    }
  }
  for (auto it = series.placements.begin(); it != series.placements.end();) {
    if (held.count(it->first)) {
      ++it;
    } else {
      job_device_->Remove(it->second);
      it = series.placements.erase(it);
    }
  }
}

// Each straggler while it straggles (and the job runs): a rank that recovers, or whose
// cause changes, loses its series rather than keeping one at 0.
void CoordinatorMetrics::SetStragglers(JobSeries& series, const v1::Job& job, bool live) {
  std::set<prometheus::Labels> straggling;
  if (live) {
    for (const auto& st : job.stragglers()) {
      prometheus::Labels labels{
          {"job_id", job.id()},
          {"rank", std::to_string(st.rank())},
          {"host", st.host()},
          {"device", DeviceLabel(st.device())},
          {"cause", Lower(v1::StragglerCause_Name(st.cause()), "STRAGGLER_CAUSE_")}};
      straggling.insert(labels);
      auto& gauge = series.stragglers[labels];
      if (gauge == nullptr) gauge = &job_straggler_->Add(labels);
      gauge->Set(1);
    }
  }
  for (auto it = series.stragglers.begin(); it != series.stragglers.end();) {
    if (straggling.count(it->first)) {
      ++it;
    } else {
      job_straggler_->Remove(it->second);
      it = series.stragglers.erase(it);
    }
  }
}

// The worker counts per attempt; the counter sums the attempts (a smaller count than the
// last one seen is a new attempt's).
void CoordinatorMetrics::CountSkippedSamples(JobSeries& series, const v1::Job& job) {
  const uint64_t skipped = job.latest_metrics().samples_skipped();
  if (skipped < series.samples_skipped_seen) series.samples_skipped_seen = 0;
  if (skipped > series.samples_skipped_seen) {
    if (series.samples_skipped == nullptr) {
      series.samples_skipped = &job_samples_skipped_->Add({{"job_id", job.id()}});
    }
    series.samples_skipped->Increment(static_cast<double>(skipped - series.samples_skipped_seen));
    series.samples_skipped_seen = skipped;
  }
}

// A name once reported keeps its series (the worker sends every name's latest value);
// the worker admits at most kMaxReportedScalars names, and so does this.
void CoordinatorMetrics::SetReportedScalars(JobSeries& series, const v1::Job& job) {
  for (const auto& [name, value] : job.latest_metrics().scalars()) {
    auto& gauge = series.reported[name];
    if (gauge == nullptr) {
      if (series.reported.size() > v1::kMaxReportedScalars) {
        series.reported.erase(name);
        continue;
      }
      gauge = &job_reported_->Add({{"job_id", job.id()}, {"name", name}});
    }
    gauge->Set(value);
  }
}

void CoordinatorMetrics::RemoveJob(JobSeries& series) {
  for (size_t i = 0; i < series.gauges.size(); ++i) job_families_[i]->Remove(series.gauges[i]);
  for (auto* gauge : series.diagnoses) job_diagnosis_->Remove(gauge);
  for (auto& [worker, gauge] : series.placements) job_device_->Remove(gauge);
  for (auto& [labels, gauge] : series.stragglers) job_straggler_->Remove(gauge);
  for (auto& [name, gauge] : series.reported) job_reported_->Remove(gauge);
  if (series.samples_skipped != nullptr) job_samples_skipped_->Remove(series.samples_skipped);
  if (series.info != nullptr) job_info_->Remove(series.info);
}

void CoordinatorMetrics::RefreshJobs(const std::vector<v1::Job>& active, absl::Time now) {
  std::set<std::string> live;
  for (const auto& job : active) {
    auto it = job_series_.find(job.id());
    // A job that has never been placed has nothing to report: thousands queued would
    // each add a series per family (the queue is counted by stoke_jobs{state="pending"}).
    if (it == job_series_.end() && job.state() == v1::JOB_STATE_PENDING && job.attempt() == 0) {
      continue;
    }
    live.insert(job.id());
    if (it == job_series_.end()) {
      JobSeries series;
      series.info = &job_info_->Add({{"job_id", job.id()},
                                     {"name", job.spec().name()},
                                     {"owner", job.owner()},
                                     {"model", ModelName(job.spec())}});
      series.info->Set(1);
      const prometheus::Labels labels{{"job_id", job.id()}};
      for (auto* family : job_families_) series.gauges.push_back(&family->Add(labels));
      for (v1::Diagnosis d : kDiagnoses) {
        series.diagnoses.push_back(&job_diagnosis_->Add(
            {{"job_id", job.id()}, {"diagnosis", Lower(v1::Diagnosis_Name(d), "DIAGNOSIS_")}}));
      }
      it = job_series_.emplace(job.id(), std::move(series)).first;
    }
    it->second.last = job;
    it->second.finished_at.reset();
    // Each attempt's start-up once, as soon as a refresh sees it.
    if (job.has_startup() && it->second.startup_observed_attempt != job.attempt()) {
      job_startup_->Observe(job.startup().seconds());
      it->second.startup_observed_attempt = job.attempt();
    }
    SetJob(it->second, job, /*finished=*/false);
  }
  // Finished jobs keep their last values for the retention, then go, so label sets
  // stay bounded however many jobs have run.
  for (auto it = job_series_.begin(); it != job_series_.end();) {
    JobSeries& series = it->second;
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    if (!series.finished_at) {
      series.finished_at = now;
      SetJob(series, series.last, /*finished=*/true);
    }
    if (now - *series.finished_at >= options_.finished_job_retention) {
      RemoveJob(series);
      it = job_series_.erase(it);
    } else {
      ++it;
    }
  }
}

void CoordinatorMetrics::RefreshDevices(const v1::Cluster& cluster) {
  std::set<std::string> attached;
  for (const auto& w : cluster.workers()) {
    if (!w.has_device_stats()) continue;
    // One series per worker id, and the id is among its labels: two workers that report
    // the same device (two `--device cpu` workers on one host) never share a child, so
    // removing one worker's series never frees a gauge the other still caches.
    if (!attached.insert(w.id()).second) continue;
    DeviceSeries& series = device_series_[w.id()];
    if (series.labels.empty()) {
      series.labels = {{"worker", w.id()},
                       {"host", w.host()},
                       {"gpu", DeviceLabel(w.device())},
                       {"uuid", w.device().uuid()},
                       {"name", w.device().name()}};
    }
    for (const DeviceGaugeDef& def : kDeviceGauges) {
      const std::optional<double> value = def.value(w.device_stats());
      auto found = series.gauges.find(def.name);
      if (!value) {
        if (found != series.gauges.end()) {
          device_families_[def.name]->Remove(found->second);
          series.gauges.erase(found);
        }
        continue;
      }
      if (found == series.gauges.end()) {
        found =
            series.gauges.emplace(def.name, &device_families_[def.name]->Add(series.labels)).first;
      }
      found->second->Set(*value);
    }
  }
  for (auto it = device_series_.begin(); it != device_series_.end();) {
    if (attached.count(it->first)) {
      ++it;
      continue;
    }
    for (auto& [name, gauge] : it->second.gauges) device_families_[name]->Remove(gauge);
    it = device_series_.erase(it);
  }
}

namespace {

// "/stoke.v1.Coordinator/SubmitJob" as the labels go-grpc-prometheus and grpc-java's
// interceptors use: grpc_service "stoke.v1.Coordinator", grpc_method "SubmitJob". A
// name of another shape ("unknown") is both.
std::map<std::string, std::string> MethodLabels(const std::string& method) {
  const size_t slash = method.rfind('/');
  if (method.empty() || method[0] != '/' || slash == 0 || slash == std::string::npos) {
    return {{"grpc_service", method}, {"grpc_method", method}};
  }
  return {{"grpc_service", method.substr(1, slash - 1)}, {"grpc_method", method.substr(slash + 1)}};
}

std::map<std::string, std::string> WithCode(std::map<std::string, std::string> labels,
                                            const std::string& code) {
  labels.emplace("grpc_code", code);
  return labels;
}

}  // namespace

void CoordinatorMetrics::OnUnaryFinished(const std::string& method, const std::string& code,
                                         double seconds) {
  const auto labels = MethodLabels(method);
  rpc_requests_->Add(WithCode(labels, code)).Increment();
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
  rpc_duration_->Add(labels, kBuckets).Observe(seconds);
}

void CoordinatorMetrics::OnStreamOpened(const std::string& method) {
  rpc_open_streams_->Add(MethodLabels(method)).Increment();
}

void CoordinatorMetrics::OnStreamFinished(const std::string& method, const std::string& code) {
  const auto labels = MethodLabels(method);
  rpc_requests_->Add(WithCode(labels, code)).Increment();
  rpc_open_streams_->Add(labels).Decrement();
}

}  // namespace stoke::server
