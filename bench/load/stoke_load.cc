// stoke-load: drives a running coordinator over loopback the way a busy cluster would,
// and measures it (bench/load.sh starts the coordinator and runs this; BENCHMARKS.md,
// "Control plane under load", has the figures). In order:
//   1. --backlog jobs are submitted, and queue;
//   2. --workers simulated workers attach over WorkerLink, heartbeat, and run each job
//      they are assigned for --job-length-ms, reporting every --report-interval-ms;
//   3. --watchers WatchJob streams follow the queue, one job each, taking the next job
//      when theirs ends;
//   4. for --duration seconds, SubmitJob at --submit-rate, GetJob at --get-rate and
//      ListJobs at --list-rate, open loop (a slow answer delays no later call).
// Then it reads every job's timestamps (submit to scheduled), the coordinator's CPU time
// and peak memory (/proc/--coordinator-pid), its /metrics, and compares each watcher's
// events with the events the store holds. Prints key=value lines and one Markdown table
// row; exits 1 when a submission failed or a watcher missed a state change.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/load/job_watch.h"
#include "bench/load/latencies.h"
#include "bench/load/process_stats.h"
#include "bench/load/simulated_worker.h"
#include "client/lib/client.h"
#include "stoke/v1/coordinator.grpc.pb.h"
#include "stoke/v1/worker_link.grpc.pb.h"

namespace stoke::load {
namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::string coordinator;
  int coordinator_pid = 0;
  std::string metrics_address;
  std::string label = "coordinator";
  int workers = 64;
  int backlog = 1000;
  double submit_rate = 50;
  double duration_s = 60;
  int watchers = 500;
  double get_rate = 50;
  double list_rate = 10;
  int job_length_ms = 500;
  int report_interval_ms = 200;
  int samples_per_report = 1;
  int channels = 8;
  bool header = false;
};

v1::JobSpec LoadJobSpec(int n) {
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("load-", n));
  spec.mutable_model()->mutable_mlp()->add_hidden(32);
  spec.mutable_data()->mutable_synthetic()->set_features(16);
  spec.mutable_training()->set_steps(1000);
  spec.mutable_training()->set_batch_size(32);
  return spec;
}

double Seconds(const google::protobuf::Timestamp& t) {
  return static_cast<double>(t.seconds()) + static_cast<double>(t.nanos()) * 1e-9;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, int n) {
  grpc::ChannelArguments args;
  // Distinct arguments: a connection of its own, as separate client processes have.
  args.SetInt("stoke.load.channel", n);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// The watchers: a fixed number of streams, each taking the next job of the queue when its
// own job's stream ends. Finished streams are kept for the comparison afterwards.
class WatchPool {
 public:
  WatchPool(std::vector<std::unique_ptr<v1::Coordinator::Stub>>& stubs, int size)
      : stubs_(stubs), slots_(size) {}

  void Enqueue(const std::string& job_id) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job_id);
  }
  // Replaces ended streams with new ones on queued jobs.
  void Refill() {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < slots_.size(); ++i) {
      auto& slot = slots_[i];
      if (slot && !slot->done()) continue;
      if (slot) ended_.push_back(std::move(slot));
      if (queue_.empty()) continue;
      slot = std::make_unique<JobWatch>(*stubs_[i % stubs_.size()], queue_.front());
      queue_.pop_front();
      slot->Start();
    }
  }
  // Ends every stream still open; returns every stream there was.
  std::vector<std::unique_ptr<JobWatch>> Close() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& slot : slots_) {
      if (!slot) continue;
      slot->Cancel();
      ended_.push_back(std::move(slot));
    }
    return std::move(ended_);
  }

 private:
  std::vector<std::unique_ptr<v1::Coordinator::Stub>>& stubs_;
  std::mutex mu_;
  std::deque<std::string> queue_;
  std::vector<std::unique_ptr<JobWatch>> slots_;
  std::vector<std::unique_ptr<JobWatch>> ended_;
};

struct WatchCheck {
  uint64_t watches = 0, completed = 0, errors = 0;
  uint64_t events = 0, dropped = 0, state_changes_dropped = 0;
  std::string first_error;
};

// Reads from the store (a WatchJob replay from the first event) what each watcher should
// have seen, up to the last event it saw (to the end for a stream that ended by itself).
WatchCheck CheckWatches(client::Client& client,
                        const std::vector<std::unique_ptr<JobWatch>>& watches) {
  WatchCheck check;
  std::mutex mu;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < watches.size(); i = next++) {
      const JobWatch& watch = *watches[i];
      const auto received = watch.received();
      const bool completed = watch.finished();
      uint64_t last = 0;
      std::set<uint64_t> seen;
      for (const auto& r : received) {
        seen.insert(r.seq);
        last = std::max(last, r.seq);
      }
      uint64_t dropped = 0, state_dropped = 0;
      std::string error;
      if (last > 0 || completed) {
        client::WatchOptions options;
        options.reconnect_for = std::chrono::seconds(10);
        absl::Status s = client.WatchJob(watch.job_id(), options, [&](const v1::JobEvent& e) {
          if (!completed && e.seq() > last) return false;
          if (!seen.count(e.seq())) {
            ++dropped;
            if (e.has_state_change()) ++state_dropped;
          }
          return completed || e.seq() < last;
        });
        if (!s.ok()) error = s.ToString();
      }
      std::lock_guard<std::mutex> lock(mu);
      ++check.watches;
      if (completed) ++check.completed;
      check.events += received.size();
      check.dropped += dropped;
      check.state_changes_dropped += state_dropped;
      const std::string stream_error = watch.error();
      if (!error.empty() || !stream_error.empty()) {
        ++check.errors;
        if (check.first_error.empty()) {
          check.first_error =
              absl::StrCat("job ", watch.job_id(), ": ", error.empty() ? stream_error : error);
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  return check;
}

int Run(const Settings& settings) {
  client::ClientOptions client_options;
  client_options.address = settings.coordinator;
  auto connected = client::Client::Connect(client_options);
  if (!connected.ok()) {
    std::fprintf(stderr, "stoke-load: %s\n", connected.status().ToString().c_str());
    return 2;
  }
  client::Client& client = **connected;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int i = 0; i < settings.channels; ++i) {
    stubs.push_back(v1::Coordinator::NewStub(NewChannel(settings.coordinator, i)));
  }

  // 1. The backlog.
  std::mutex ids_mu;
  std::vector<std::string> ids;  // every accepted job, for GetJob
  std::set<std::string> steady_ids;
  WatchPool watches(stubs, settings.watchers);
  uint64_t backlog_failed = 0;
  std::string first_failure;
  for (int i = 0; i < settings.backlog; ++i) {
    auto job = client.SubmitJob(LoadJobSpec(i));
    if (!job.ok()) {
      if (first_failure.empty()) first_failure = job.status().ToString();
      ++backlog_failed;
      continue;
    }
    ids.push_back(job->id());
    watches.Enqueue(job->id());
  }
  std::fprintf(stderr, "stoke-load: %zu jobs queued\n", ids.size());

  // 2. The workers, each on a connection of its own as separate processes would be.
  SimulatedWorker::Options worker_options;
  worker_options.host = "load-host";
  worker_options.job_length = std::chrono::milliseconds(settings.job_length_ms);
  worker_options.report_interval = std::chrono::milliseconds(settings.report_interval_ms);
  worker_options.samples_per_report = settings.samples_per_report;
  std::vector<std::unique_ptr<v1::WorkerLink::Stub>> worker_stubs;
  std::vector<std::unique_ptr<SimulatedWorker>> workers;
  for (int i = 0; i < settings.workers; ++i) {
    worker_stubs.push_back(
        v1::WorkerLink::NewStub(NewChannel(settings.coordinator, settings.channels + i)));
    workers.push_back(std::make_unique<SimulatedWorker>(
        *worker_stubs.back(), absl::StrCat("load-worker-", i), worker_options));
    workers.back()->Attach();
  }
  std::atomic<bool> ticking{true};
  std::thread ticker([&] {
    while (ticking) {
      const auto now = Clock::now();
      for (auto& w : workers) w->Tick(now);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const auto attach_deadline = Clock::now() + std::chrono::seconds(60);
  auto all_registered = [&] {
    for (auto& w : workers)
      if (!w->registered()) return false;
    return true;
  };
  while (!all_registered() && Clock::now() < attach_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!all_registered()) {
    std::fprintf(stderr, "stoke-load: not every worker registered within 60 s\n");
    ticking = false;
    ticker.join();
    return 1;
  }

  // 3 and 4. Watchers, and the steady load.
  std::atomic<bool> watching{true};
  std::thread refiller([&] {
    while (watching) {
      watches.Refill();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto usage_before = settings.coordinator_pid > 0 ? ReadProcessUsage(settings.coordinator_pid)
                                                   : absl::StatusOr<ProcessUsage>(ProcessUsage{});
  const double wall_start =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  Latencies submit_ms, get_ms, list_ms;
  std::atomic<uint64_t> submitted{0}, accepted{0}, rejected{0}, reads_failed{0};
  std::atomic<int> in_flight{0};
  std::mutex failure_mu;
  std::string first_rejection;
  std::mt19937_64 random(42);
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(settings.duration_s));
  auto period = [](double rate) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / rate));
  };
  const auto far = end + std::chrono::hours(1);
  Clock::time_point next_submit = settings.submit_rate > 0 ? start : far;
  Clock::time_point next_get = settings.get_rate > 0 ? start : far;
  Clock::time_point next_list = settings.list_rate > 0 ? start : far;
  uint64_t stub_turn = 0;
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(30); };
  int steady_n = settings.backlog;
  while (true) {
    const auto due = std::min({next_submit, next_get, next_list});
    if (due >= end) break;
    std::this_thread::sleep_until(due);
    v1::Coordinator::Stub& stub = *stubs[stub_turn++ % stubs.size()];
    if (due == next_submit) {
      next_submit += period(settings.submit_rate);
      struct Call {
        grpc::ClientContext context;
        v1::SubmitJobRequest request;
        v1::SubmitJobResponse response;
        Clock::time_point sent;
      };
      auto* call = new Call;
      call->context.set_deadline(deadline());
      *call->request.mutable_spec() = LoadJobSpec(steady_n++);
      ++submitted;
      ++in_flight;
      call->sent = Clock::now();
      stub.async()->SubmitJob(&call->context, &call->request, &call->response,
                              [&, call](grpc::Status s) {
                                submit_ms.Add(Ms(Clock::now() - call->sent));
                                if (s.ok()) {
                                  ++accepted;
                                  {
                                    std::lock_guard<std::mutex> lock(ids_mu);
                                    ids.push_back(call->response.job().id());
                                    steady_ids.insert(call->response.job().id());
                                  }
                                  watches.Enqueue(call->response.job().id());
                                } else {
                                  ++rejected;
                                  std::lock_guard<std::mutex> lock(failure_mu);
                                  if (first_rejection.empty()) first_rejection = s.error_message();
                                }
                                delete call;
                                --in_flight;
                              });
    } else if (due == next_get) {
      next_get += period(settings.get_rate);
      struct Call {
        grpc::ClientContext context;
        v1::GetJobRequest request;
        v1::Job response;
        Clock::time_point sent;
      };
      std::string id;
      {
        std::lock_guard<std::mutex> lock(ids_mu);
        if (ids.empty()) continue;
        id = ids[random() % ids.size()];
      }
      auto* call = new Call;
      call->context.set_deadline(deadline());
      call->request.set_id(id);
      ++in_flight;
      call->sent = Clock::now();
      stub.async()->GetJob(&call->context, &call->request, &call->response,
                           [&, call](grpc::Status s) {
                             get_ms.Add(Ms(Clock::now() - call->sent));
                             if (!s.ok()) ++reads_failed;
                             delete call;
                             --in_flight;
                           });
    } else {
      next_list += period(settings.list_rate);
      struct Call {
        grpc::ClientContext context;
        v1::ListJobsRequest request;
        v1::ListJobsResponse response;
        Clock::time_point sent;
      };
      auto* call = new Call;
      call->context.set_deadline(deadline());
      call->request.set_page_size(50);  // `stoke list`: the newest 50
      ++in_flight;
      call->sent = Clock::now();
      stub.async()->ListJobs(&call->context, &call->request, &call->response,
                             [&, call](grpc::Status s) {
                               list_ms.Add(Ms(Clock::now() - call->sent));
                               if (!s.ok()) ++reads_failed;
                               delete call;
                               --in_flight;
                             });
    }
  }
  const auto wait_until = Clock::now() + std::chrono::seconds(40);
  while (in_flight > 0 && Clock::now() < wait_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  auto usage_after = settings.coordinator_pid > 0 ? ReadProcessUsage(settings.coordinator_pid)
                                                  : absl::StatusOr<ProcessUsage>(ProcessUsage{});
  std::string exposition;
  if (!settings.metrics_address.empty()) {
    auto body = HttpGetBody(settings.metrics_address, "/metrics");
    if (body.ok())
      exposition = *body;
    else
      std::fprintf(stderr, "stoke-load: %s\n", body.status().ToString().c_str());
  }

  // Submit to scheduled, from each job's own timestamps (the coordinator's clock).
  Latencies scheduled_ms;
  uint64_t unscheduled = 0;
  double backlog_drained_s = 0;
  {
    v1::ListJobsRequest page;
    page.set_page_size(1000);
    while (true) {
      auto listed = client.ListJobs(page);
      if (!listed.ok()) {
        std::fprintf(stderr, "stoke-load: %s\n", listed.status().ToString().c_str());
        break;
      }
      for (const auto& job : listed->jobs()) {
        const bool steady = steady_ids.count(job.id()) > 0;
        if (!job.has_start_time()) {
          if (steady) ++unscheduled;
          continue;
        }
        if (steady) {
          scheduled_ms.Add((Seconds(job.start_time()) - Seconds(job.create_time())) * 1000);
        } else {
          backlog_drained_s = std::max(backlog_drained_s, Seconds(job.start_time()) - wall_start);
        }
      }
      if (listed->next_page_token().empty()) break;
      page.set_page_token(listed->next_page_token());
    }
  }

  watching = false;
  refiller.join();
  auto all_watches = watches.Close();
  const WatchCheck check = CheckWatches(client, all_watches);
  ticking = false;
  ticker.join();
  SimulatedWorker::Counts counts;
  for (auto& w : workers) {
    auto c = w->counts();
    counts.assignments += c.assignments;
    counts.finished += c.finished;
    counts.reports += c.reports;
    counts.samples += c.samples;
    w->Detach(/*gracefully=*/false);
    w->Await();
  }

  const double cpu = usage_after.ok() && usage_before.ok()
                         ? usage_after->cpu_seconds - usage_before->cpu_seconds
                         : 0;
  const double peak_mib =
      usage_after.ok() ? static_cast<double>(usage_after->peak_rss_bytes) / (1 << 20) : 0;
  const double telemetry_dropped = SumOfMetric(exposition, "stoke_telemetry_events_dropped_total");
  const double refused = SumOfMetric(exposition, "stoke_worker_reports_refused_total");
  std::printf("submitted=%llu accepted=%llu rejected=%llu backlog=%zu backlog_failed=%llu\n",
              static_cast<unsigned long long>(submitted.load()),
              static_cast<unsigned long long>(accepted.load()),
              static_cast<unsigned long long>(rejected.load()),
              static_cast<size_t>(settings.backlog - backlog_failed),
              static_cast<unsigned long long>(backlog_failed));
  std::printf("elapsed_s=%.1f submit_calls=%zu get_calls=%zu list_calls=%zu reads_failed=%llu\n",
              elapsed, submit_ms.count(), get_ms.count(), list_ms.count(),
              static_cast<unsigned long long>(reads_failed.load()));
  std::printf("scheduled=%zu unscheduled=%llu backlog_drained_s=%.1f\n", scheduled_ms.count(),
              static_cast<unsigned long long>(unscheduled), backlog_drained_s);
  std::printf("assignments=%llu jobs_finished=%llu reports=%llu samples=%llu\n",
              static_cast<unsigned long long>(counts.assignments),
              static_cast<unsigned long long>(counts.finished),
              static_cast<unsigned long long>(counts.reports),
              static_cast<unsigned long long>(counts.samples));
  std::printf(
      "watches=%llu completed=%llu watch_errors=%llu events_received=%llu "
      "events_dropped=%llu state_changes_dropped=%llu\n",
      static_cast<unsigned long long>(check.watches),
      static_cast<unsigned long long>(check.completed),
      static_cast<unsigned long long>(check.errors), static_cast<unsigned long long>(check.events),
      static_cast<unsigned long long>(check.dropped),
      static_cast<unsigned long long>(check.state_changes_dropped));
  std::printf(
      "coordinator_cpu_s=%.1f coordinator_cores=%.2f coordinator_peak_rss_mib=%.0f "
      "telemetry_dropped=%.0f reports_refused=%.0f\n",
      cpu, cpu / elapsed, peak_mib, telemetry_dropped, refused);
  if (settings.header) {
    std::printf(
        "| store | SubmitJob p50 / p99 ms | GetJob p50 / p99 ms | ListJobs p50 / p99 ms | "
        "submit→scheduled p50 / p99 ms (jobs) | backlog scheduled by | coordinator CPU | peak RSS "
        "| "
        "events dropped (state / all / telemetry) |\n"
        "|---|---|---|---|---|---|---|---|---|\n");
  }
  // Jobs still queued when the load ended have no figure; the cell says how many did.
  const std::string scheduled_cell =
      scheduled_ms.count() == 0
          ? absl::StrFormat("none of %d", steady_ids.size())
          : absl::StrFormat("%.0f / %.0f (%d of %d)", scheduled_ms.Percentile(0.5),
                            scheduled_ms.Percentile(0.99), scheduled_ms.count(), steady_ids.size());
  std::printf(
      "| %s | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %s | %.1f s | %.1f s (%.2f "
      "cores) | %.0f MiB | %llu / %llu / %.0f |\n",
      settings.label.c_str(), submit_ms.Percentile(0.5), submit_ms.Percentile(0.99),
      get_ms.Percentile(0.5), get_ms.Percentile(0.99), list_ms.Percentile(0.5),
      list_ms.Percentile(0.99), scheduled_cell.c_str(), backlog_drained_s, cpu, cpu / elapsed,
      peak_mib, static_cast<unsigned long long>(check.state_changes_dropped),
      static_cast<unsigned long long>(check.dropped), telemetry_dropped);

  int rc = 0;
  if (backlog_failed > 0 || rejected > 0) {
    std::fprintf(stderr, "stoke-load: %llu submissions failed; first: %s%s\n",
                 static_cast<unsigned long long>(backlog_failed + rejected), first_failure.c_str(),
                 first_rejection.c_str());
    rc = 1;
  }
  if (submitted != accepted + rejected) {
    std::fprintf(stderr, "stoke-load: %llu submissions unanswered\n",
                 static_cast<unsigned long long>(submitted - accepted - rejected));
    rc = 1;
  }
  if (check.state_changes_dropped > 0) {
    std::fprintf(stderr, "stoke-load: watchers missed %llu state changes\n",
                 static_cast<unsigned long long>(check.state_changes_dropped));
    rc = 1;
  }
  if (check.errors > 0) {
    std::fprintf(stderr, "stoke-load: %llu watch streams failed; first: %s\n",
                 static_cast<unsigned long long>(check.errors), check.first_error.c_str());
    rc = 1;
  }
  return rc;
}

}  // namespace
}  // namespace stoke::load

int main(int argc, char** argv) {
  stoke::load::Settings s;
  CLI::App app{
      "stoke-load: drives a running coordinator with simulated workers, submitters, "
      "readers and watchers, and measures it"};
  app.add_option("--coordinator", s.coordinator, "host:port of the coordinator")->required();
  app.add_option("--coordinator-pid", s.coordinator_pid,
                 "Its process id: CPU time and peak memory are read from /proc");
  app.add_option("--metrics-address", s.metrics_address,
                 "Its /metrics host:port: dropped-event counters are read there");
  app.add_option("--label", s.label, "First cell of the table row (the store)");
  app.add_option("--workers", s.workers, "Simulated workers")->capture_default_str();
  app.add_option("--backlog", s.backlog, "Jobs submitted before the timed load")
      ->capture_default_str();
  app.add_option("--submit-rate", s.submit_rate, "SubmitJob calls per second")
      ->capture_default_str();
  app.add_option("--duration", s.duration_s, "Seconds of timed load")->capture_default_str();
  app.add_option("--watchers", s.watchers, "WatchJob streams open at once")->capture_default_str();
  app.add_option("--get-rate", s.get_rate, "GetJob calls per second")->capture_default_str();
  app.add_option("--list-rate", s.list_rate, "ListJobs calls per second (newest 50)")
      ->capture_default_str();
  app.add_option("--job-length-ms", s.job_length_ms, "How long each simulated job runs")
      ->capture_default_str();
  app.add_option("--report-interval-ms", s.report_interval_ms,
                 "Between a worker's reports (stoke-worker flushes every 200 ms)")
      ->capture_default_str();
  app.add_option("--samples-per-report", s.samples_per_report, "Metric samples per report")
      ->capture_default_str();
  app.add_option("--channels", s.channels, "Client connections for the API calls and watchers")
      ->capture_default_str();
  app.add_flag("--header", s.header, "Print the table's header before its row");
  CLI11_PARSE(app, argc, argv);
  if (s.workers < 1 || s.channels < 1 || s.watchers < 0 || s.backlog < 0 || s.duration_s <= 0 ||
      s.report_interval_ms < 1 || s.job_length_ms < 0) {
    std::fprintf(stderr,
                 "stoke-load: --workers and --channels must be at least 1, --duration "
                 "and --report-interval-ms positive, the rest not negative\n");
    return 2;
  }
  return stoke::load::Run(s);
}
