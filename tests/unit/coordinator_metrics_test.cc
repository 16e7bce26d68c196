// /metrics as Prometheus reads it, for a known state of the cluster: exact sample lines,
// series that follow jobs and devices, finished jobs kept for the retention and then
// dropped, so that label sets stay bounded however many jobs run.
#include "server/metrics/coordinator_metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace stoke::server {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

v1::Job RunningJob(const std::string& id) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_restarts(1);
  job.set_owner("alice");
  job.mutable_spec()->set_name("resnet \"sweep\"");
  job.mutable_spec()->mutable_model()->mutable_resnet();
  auto* p = job.add_placement();
  p->set_rank(0);
  p->set_worker_id("gpu-host/cuda:1");
  p->set_host("gpu-host");
  p->mutable_device()->set_type(v1::DEVICE_TYPE_CUDA);
  p->mutable_device()->set_index(1);
  p->mutable_device()->set_uuid("GPU-1234");
  auto* m = job.mutable_latest_metrics();
  m->set_step(250);
  m->set_total_steps(1000);
  m->set_loss(0.5);
  m->set_samples_per_second(1200);
  m->set_tokens_per_second(1200 * 1024);
  m->set_achieved_flops(4e14);
  m->set_mfu(0.4);
  m->set_step_seconds(0.25);
  m->set_data_wait_ratio(0.125);
  m->set_comm_wait_ratio(0.125);
  m->set_learning_rate(0.001);
  m->set_memory_allocated_bytes(1000);
  m->add_diagnoses(v1::DIAGNOSIS_INPUT_BOUND);
  job.mutable_latest_eval()->mutable_eval()->set_accuracy(0.875);
  return job;
}

v1::Worker GpuWorker() {
  v1::Worker w;
  w.set_id("gpu-host/cuda:1");
  w.set_host("gpu-host");
  w.set_state(v1::WORKER_STATE_BUSY);
  w.mutable_device()->set_type(v1::DEVICE_TYPE_CUDA);
  w.mutable_device()->set_index(1);
  w.mutable_device()->set_uuid("GPU-1234");
  w.mutable_device()->set_name("NVIDIA H200");
  auto* s = w.mutable_device_stats();
  s->set_utilization(0.97);
  s->set_memory_used_bytes(2048);
  s->set_memory_total_bytes(4096);
  s->set_sm_clock_hz(1.98e9);
  s->set_power_watts(650.5);
  s->set_temperature_celsius(61);
  s->set_source("nvml");
  return w;
}

v1::Worker CpuWorker() {
  v1::Worker w;
  w.set_id("cpu-host/cpu:0");
  w.set_host("cpu-host");
  w.set_state(v1::WORKER_STATE_IDLE);
  auto* s = w.mutable_device_stats();
  s->set_utilization(0.5);
  s->set_memory_used_bytes(100);
  s->set_memory_total_bytes(1000);
  s->set_source("procfs");
  return w;
}

std::unique_ptr<CoordinatorMetrics> Metrics(absl::Duration retention = absl::Minutes(10)) {
  CoordinatorMetrics::Options options;
  options.finished_job_retention = retention;
  return *CoordinatorMetrics::Start(options, nullptr);
}

// Sample lines (no comments) that start with `prefix`.
std::vector<std::string> Lines(const std::string& exposition, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#' && line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

bool Has(const std::string& exposition, const std::string& line) {
  return !Lines(exposition, line).empty() && Lines(exposition, line).front().size() == line.size();
}

TEST(CoordinatorMetrics, ExpositionOfAKnownState) {
  auto metrics = Metrics();
  MetricsSnapshot snapshot;
  *snapshot.cluster.add_workers() = GpuWorker();
  *snapshot.cluster.add_workers() = CpuWorker();
  snapshot.active_jobs.push_back(RunningJob("7"));
  v1::Job queued;
  queued.set_id("8");
  queued.set_state(v1::JOB_STATE_PENDING);
  snapshot.active_jobs.push_back(queued);
  metrics->Refresh(snapshot, kT0);
  const std::string text = metrics->Exposition();

  for (const char* line : {
           "stoke_coordinator_leader 1",
           "stoke_jobs{state=\"running\"} 1",
           "stoke_jobs{state=\"pending\"} 1",
           "stoke_jobs{state=\"restarting\"} 0",
           "stoke_queue_length 1",
           "stoke_workers{state=\"busy\"} 1",
           "stoke_workers{state=\"idle\"} 1",
           "stoke_job_samples_per_second{job_id=\"7\"} 1200",
           // The name escaped as the text format wants.
           "stoke_job_info{job_id=\"7\",model=\"resnet\",name=\"resnet "
           "\\\"sweep\\\"\",owner=\"alice\"} 1",
           "stoke_job_tokens_per_second{job_id=\"7\"} 1228800",
           "stoke_job_model_flops_per_second{job_id=\"7\"} 400000000000000",
           "stoke_job_mfu_ratio{job_id=\"7\"} 0.4",
           "stoke_job_step_seconds{job_id=\"7\"} 0.25",
           "stoke_job_compute_ratio{job_id=\"7\"} 0.75",
           "stoke_job_progress_ratio{job_id=\"7\"} 0.25",
           "stoke_job_restarts{job_id=\"7\"} 1",
           "stoke_job_eval_accuracy_ratio{job_id=\"7\"} 0.875",
           "stoke_job_diagnosis{diagnosis=\"input_bound\",job_id=\"7\"} 1",
           "stoke_job_diagnosis{diagnosis=\"launch_bound\",job_id=\"7\"} 0",
           "stoke_job_device_info{gpu=\"cuda:1\",host=\"gpu-host\",job_id=\"7\",rank=\"0\","
           "uuid=\"GPU-1234\",worker=\"gpu-host/cuda:1\"} 1",
           "stoke_device_utilization_ratio{gpu=\"cuda:1\",host=\"gpu-host\",name=\"NVIDIA "
           "H200\",uuid=\"GPU-1234\",worker=\"gpu-host/cuda:1\"} 0.97",
           "stoke_device_power_watts{gpu=\"cuda:1\",host=\"gpu-host\",name=\"NVIDIA "
           "H200\",uuid=\"GPU-1234\",worker=\"gpu-host/cuda:1\"} 650.5",
           "stoke_device_sm_clock_hertz{gpu=\"cuda:1\",host=\"gpu-host\",name=\"NVIDIA "
           "H200\",uuid=\"GPU-1234\",worker=\"gpu-host/cuda:1\"} 1980000000",
           "stoke_device_memory_used_bytes{gpu=\"cpu:0\",host=\"cpu-host\",name=\"\",uuid=\"\","
           "worker=\"cpu-host/cpu:0\"} 100",
       }) {
    EXPECT_TRUE(Has(text, line)) << "missing: " << line << "\n" << text;
  }
  // The queued job, never placed, has no series of its own (a loss of 0, say); the CPU
  // worker reports no power.
  EXPECT_EQ(Lines(text, "stoke_job_samples_per_second{job_id=\"8\"}").size(), 0u) << text;
  EXPECT_EQ(text.find("job_id=\"8\""), std::string::npos) << text;
  EXPECT_EQ(Lines(text, "stoke_device_power_watts{gpu=\"cpu:0\"").size(), 0u) << text;
}

// Who is serving (version and commit), how the process fares (the standard process_*
// series), and how many jobs ended in each final state: a counter taken from the core's
// counts, so a failure rate can be alerted on.
TEST(CoordinatorMetrics, BuildProcessAndFinishedJobSeries) {
  auto metrics = Metrics();
  std::string text = metrics->Exposition();
  EXPECT_TRUE(Has(text, std::string("stoke_build_info{commit=\"") + STOKE_COMMIT + "\",version=\"" +
                            STOKE_VERSION + "\"} 1"))
      << text;
  for (const char* state : {"succeeded", "failed", "cancelled"}) {
    EXPECT_TRUE(Has(text, std::string("stoke_jobs_finished_total{state=\"") + state + "\"} 0"))
        << text;
  }
  auto value = [&](const std::string& name) {
    const std::vector<std::string> lines = Lines(metrics->Exposition(), name + " ");
    return lines.empty() ? -1.0 : std::stod(lines.front().substr(name.size() + 1));
  };
  EXPECT_GT(value("process_resident_memory_bytes"), 1e6);
  EXPECT_GE(value("process_virtual_memory_bytes"), value("process_resident_memory_bytes"));
  EXPECT_GE(value("process_open_fds"), 3);  // stdin, stdout, stderr at least
  EXPECT_GE(value("process_max_fds"), value("process_open_fds"));
  const double started = value("process_start_time_seconds");
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_GT(started, now - 3600) << "this test process started over an hour ago?";
  EXPECT_LE(started, now + 1);
  EXPECT_GE(value("process_cpu_seconds_total"), 0);

  MetricsSnapshot snapshot;
  (*snapshot.cluster.mutable_jobs_finished())["succeeded"] = 3;
  (*snapshot.cluster.mutable_jobs_finished())["failed"] = 1;
  metrics->Refresh(snapshot, kT0);
  (*snapshot.cluster.mutable_jobs_finished())["succeeded"] = 5;
  metrics->Refresh(snapshot, kT0 + absl::Seconds(1));
  text = metrics->Exposition();
  EXPECT_TRUE(Has(text, "stoke_jobs_finished_total{state=\"succeeded\"} 5")) << text;
  EXPECT_TRUE(Has(text, "stoke_jobs_finished_total{state=\"failed\"} 1")) << text;
}

// A queue of thousands costs a scrape nothing per job: stoke_jobs counts them.
TEST(CoordinatorMetrics, QueuedJobsAddNothingToTheScrapeUntilPlaced) {
  auto metrics = Metrics();
  MetricsSnapshot snapshot;
  snapshot.active_jobs.push_back(RunningJob("7"));
  metrics->Refresh(snapshot, kT0);
  const size_t one_job = metrics->Exposition().size();
  for (int i = 0; i < 5000; ++i) {
    v1::Job queued;
    queued.set_id(std::to_string(100 + i));
    queued.set_state(v1::JOB_STATE_PENDING);
    snapshot.active_jobs.push_back(queued);
  }
  metrics->Refresh(snapshot, kT0 + absl::Seconds(1));
  const std::string text = metrics->Exposition();
  EXPECT_TRUE(Has(text, "stoke_jobs{state=\"pending\"} 5000")) << text.substr(0, 2000);
  EXPECT_LT(text.size(), one_job + 200) << "the scrape grew by " << text.size() - one_job;
  // Placed once, a job keeps its series while it waits again (a restart).
  snapshot.active_jobs[1].set_attempt(1);
  metrics->Refresh(snapshot, kT0 + absl::Seconds(2));
  snapshot.active_jobs[1].set_state(v1::JOB_STATE_RESTARTING);
  metrics->Refresh(snapshot, kT0 + absl::Seconds(3));
  EXPECT_TRUE(Has(metrics->Exposition(), "stoke_job_restarts{job_id=\"100\"} 0"));
}

// Each attempt's start-up lands in the histogram once, however many refreshes see it.
TEST(CoordinatorMetrics, EachAttemptsStartUpIsObservedOnce) {
  auto metrics = Metrics();
  MetricsSnapshot snapshot;
  v1::Job job = RunningJob("7");
  job.set_attempt(1);
  snapshot.active_jobs = {job};
  metrics->Refresh(snapshot, kT0);
  EXPECT_TRUE(Has(metrics->Exposition(), "stoke_job_startup_seconds_count 0"));

  job.mutable_startup()->set_seconds(1.5);
  snapshot.active_jobs = {job};
  metrics->Refresh(snapshot, kT0 + absl::Seconds(1));
  metrics->Refresh(snapshot, kT0 + absl::Seconds(2));
  std::string text = metrics->Exposition();
  EXPECT_TRUE(Has(text, "stoke_job_startup_seconds_count 1")) << text;
  EXPECT_TRUE(Has(text, "stoke_job_startup_seconds_sum 1.5")) << text;
  EXPECT_TRUE(Has(text, "stoke_job_startup_seconds_bucket{le=\"1\"} 0")) << text;
  EXPECT_TRUE(Has(text, "stoke_job_startup_seconds_bucket{le=\"2\"} 1")) << text;

  job.set_attempt(2);  // restarted: its new start-up counts too
  job.mutable_startup()->set_seconds(0.5);
  snapshot.active_jobs = {job};
  metrics->Refresh(snapshot, kT0 + absl::Seconds(3));
  text = metrics->Exposition();
  EXPECT_TRUE(Has(text, "stoke_job_startup_seconds_count 2")) << text;
  EXPECT_TRUE(Has(text, "stoke_job_startup_seconds_sum 2")) << text;
}

// A straggling rank has a series while it straggles: it goes when the rank recovers, and
// when the job finishes (no series left at 0).
TEST(CoordinatorMetrics, AStragglerHasASeriesOnlyWhileItStraggles) {
  auto metrics = Metrics();
  v1::Job job = RunningJob("7");
  auto* straggler = job.add_stragglers();
  straggler->set_rank(1);
  straggler->set_host("host-b");
  straggler->mutable_device()->set_type(v1::DEVICE_TYPE_CUDA);
  straggler->mutable_device()->set_index(1);
  straggler->set_cause(v1::STRAGGLER_CAUSE_COMPUTE);
  job.mutable_latest_metrics()->add_diagnoses(v1::DIAGNOSIS_STRAGGLER);
  MetricsSnapshot snapshot;
  snapshot.active_jobs = {job};
  metrics->Refresh(snapshot, kT0);
  std::string text = metrics->Exposition();
  const std::string line =
      "stoke_job_straggler{cause=\"compute\",device=\"cuda:1\",host=\"host-b\",job_id=\"7\","
      "rank=\"1\"} 1";
  EXPECT_TRUE(Has(text, line)) << text;
  EXPECT_TRUE(Has(text, "stoke_job_diagnosis{diagnosis=\"straggler\",job_id=\"7\"} 1")) << text;

  const v1::Straggler named = *straggler;
  job.clear_stragglers();  // recovered
  snapshot.active_jobs = {job};
  metrics->Refresh(snapshot, kT0 + absl::Seconds(1));
  EXPECT_TRUE(Lines(metrics->Exposition(), "stoke_job_straggler{").empty())
      << metrics->Exposition();

  *job.add_stragglers() = named;
  snapshot.active_jobs = {job};
  metrics->Refresh(snapshot, kT0 + absl::Seconds(2));
  EXPECT_TRUE(Has(metrics->Exposition(), line)) << metrics->Exposition();
  snapshot.active_jobs.clear();  // finished, its other series kept for the retention
  metrics->Refresh(snapshot, kT0 + absl::Seconds(3));
  text = metrics->Exposition();
  EXPECT_TRUE(Lines(text, "stoke_job_straggler{").empty()) << text;
  EXPECT_TRUE(Has(text, "stoke_job_restarts{job_id=\"7\"} 1")) << text;
}

// Prometheus scrapes both coordinators of a pair: the standby answers, and says it waits.
TEST(CoordinatorMetrics, AStandbySaysSoUntilItLeads) {
  CoordinatorMetrics::Options options;
  options.leader = false;
  auto metrics = *CoordinatorMetrics::Start(options, nullptr);
  EXPECT_TRUE(Has(metrics->Exposition(), "stoke_coordinator_leader 0")) << metrics->Exposition();
  metrics->SetLeader(true);
  EXPECT_TRUE(Has(metrics->Exposition(), "stoke_coordinator_leader 1")) << metrics->Exposition();
}

TEST(CoordinatorMetrics, RpcCallsAreCountedTimedAndStreamsTracked) {
  auto metrics = Metrics();
  metrics->OnUnaryFinished("/stoke.v1.Coordinator/SubmitJob", "OK", 0.002);
  metrics->OnUnaryFinished("/stoke.v1.Coordinator/SubmitJob", "OK", 0.003);
  metrics->OnUnaryFinished("/stoke.v1.Coordinator/SubmitJob", "INVALID_ARGUMENT", 0.0001);
  metrics->OnStreamOpened("/stoke.v1.Coordinator/WatchJob");
  metrics->OnStreamOpened("/stoke.v1.Coordinator/WatchJob");
  metrics->OnStreamFinished("/stoke.v1.Coordinator/WatchJob", "CANCELLED");
  const std::string text = metrics->Exposition();
  // Labelled as go-grpc-prometheus and grpc-java label theirs.
  EXPECT_TRUE(Has(text,
                  "stoke_rpc_requests_total{grpc_code=\"OK\",grpc_method=\"SubmitJob\","
                  "grpc_service=\"stoke.v1.Coordinator\"} 2"))
      << text;
  EXPECT_TRUE(Has(text,
                  "stoke_rpc_requests_total{grpc_code=\"INVALID_ARGUMENT\",grpc_method=\""
                  "SubmitJob\",grpc_service=\"stoke.v1.Coordinator\"} 1"))
      << text;
  EXPECT_TRUE(Has(text,
                  "stoke_rpc_duration_seconds_count{grpc_method=\"SubmitJob\",grpc_service=\""
                  "stoke.v1.Coordinator\"} 3"))
      << text;
  EXPECT_TRUE(Has(text,
                  "stoke_rpc_duration_seconds_bucket{grpc_method=\"SubmitJob\",grpc_service=\""
                  "stoke.v1.Coordinator\",le=\"0.0025\"} 2"))
      << text;
  EXPECT_TRUE(Has(text,
                  "stoke_rpc_open_streams{grpc_method=\"WatchJob\",grpc_service=\"stoke.v1."
                  "Coordinator\"} 1"))
      << text;
}

// Two CPU workers on one host report the same device label (cpu:0). Each keeps its own
// series, and when one goes the other's series lives on (they once shared one child,
// which the first removal freed while the second still wrote to it).
TEST(CoordinatorMetrics, WorkersWithTheSameDeviceLabelKeepSeparateSeries) {
  auto metrics = Metrics();
  v1::Worker a = CpuWorker();
  a.set_id("cpu-host/a");
  v1::Worker b = CpuWorker();
  b.set_id("cpu-host/b");
  b.mutable_device_stats()->set_memory_used_bytes(200);
  MetricsSnapshot both;
  *both.cluster.add_workers() = a;
  *both.cluster.add_workers() = b;
  metrics->Refresh(both, kT0);
  std::string text = metrics->Exposition();
  EXPECT_EQ(Lines(text, "stoke_device_memory_used_bytes{").size(), 2u) << text;
  EXPECT_TRUE(Has(text,
                  "stoke_device_memory_used_bytes{gpu=\"cpu:0\",host=\"cpu-host\",name=\"\","
                  "uuid=\"\",worker=\"cpu-host/b\"} 200"))
      << text;

  MetricsSnapshot only_b;  // a was evicted
  b.mutable_device_stats()->set_memory_used_bytes(300);
  *only_b.cluster.add_workers() = b;
  metrics->Refresh(only_b, kT0 + absl::Seconds(1));
  metrics->Refresh(only_b, kT0 + absl::Seconds(2));
  text = metrics->Exposition();
  EXPECT_EQ(Lines(text, "stoke_device_memory_used_bytes{").size(), 1u) << text;
  EXPECT_TRUE(Has(text,
                  "stoke_device_memory_used_bytes{gpu=\"cpu:0\",host=\"cpu-host\",name=\"\","
                  "uuid=\"\",worker=\"cpu-host/b\"} 300"))
      << text;
  metrics->Refresh(MetricsSnapshot{}, kT0 + absl::Seconds(3));
  EXPECT_TRUE(Lines(metrics->Exposition(), "stoke_device_").empty());
}

TEST(CoordinatorMetrics, FinishedJobsStayForTheRetentionThenGo) {
  auto metrics = Metrics(absl::Minutes(5));
  MetricsSnapshot running;
  *running.cluster.add_workers() = GpuWorker();
  running.active_jobs.push_back(RunningJob("7"));
  metrics->Refresh(running, kT0);
  MetricsSnapshot done;  // the job finished: no longer active, its worker idle
  *done.cluster.add_workers() = GpuWorker();
  metrics->Refresh(done, kT0 + absl::Seconds(1));
  std::string text = metrics->Exposition();
  EXPECT_TRUE(Has(text, "stoke_job_progress_ratio{job_id=\"7\"} 0.25")) << "kept: " << text;
  EXPECT_TRUE(Has(text, "stoke_job_samples_per_second{job_id=\"7\"} 0")) << "not running: " << text;
  EXPECT_TRUE(Has(text, "stoke_job_diagnosis{diagnosis=\"input_bound\",job_id=\"7\"} 0")) << text;
  EXPECT_TRUE(Lines(text, "stoke_job_device_info{").empty()) << "holds no device: " << text;
  metrics->Refresh(done, kT0 + absl::Minutes(6));
  text = metrics->Exposition();
  // Every series of the job is gone; the start-up histogram, of no job, stays.
  for (const std::string& line : Lines(text, "stoke_job_")) {
    EXPECT_EQ(line.rfind("stoke_job_startup_seconds", 0), 0u) << line;
  }
  EXPECT_EQ(text.find("job_id=\"7\""), std::string::npos) << text;
}

TEST(CoordinatorMetrics, LabelSetsStayBoundedAfterAThousandJobs) {
  auto metrics = Metrics(absl::Minutes(5));
  size_t most_lines = 0;
  for (int i = 0; i < 1000; ++i) {
    // One job runs at a time, a minute each; each finishes as the next starts.
    MetricsSnapshot snapshot;
    *snapshot.cluster.add_workers() = GpuWorker();
    snapshot.active_jobs.push_back(RunningJob(std::to_string(i)));
    metrics->Refresh(snapshot, kT0 + absl::Minutes(i));
    most_lines = std::max(most_lines, Lines(metrics->Exposition(), "stoke_job_").size());
  }
  // The running job and those finished within the retention: at most 6 jobs' series.
  const size_t per_job = Lines(metrics->Exposition(), "stoke_job_samples_per_second{").size();
  EXPECT_EQ(per_job, 6u);
  EXPECT_LE(most_lines, 6u * 32u);  // about 31 series a job
}

}  // namespace
}  // namespace stoke::server
