// How far off the coordinator's start-time predictions are: simulated workers (the real
// worker protocol; each job trains its spec's steps at a fixed step time) on a real
// coordinator, jobs of known lengths arriving at random (seeded) times, each job's
// predicted start read right after its submission and compared with when it started.
// Prints one Markdown table row: jobs, waits, and the median and 90th-percentile absolute
// errors, also as a share of the median wait.
//   stoke-prediction-error --coordinator HOST:PORT [--workers 4] [--jobs 150] ...
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/load/simulated_worker.h"
#include "stoke/v1/coordinator.grpc.pb.h"

namespace {

using stoke::load::SimulatedWorker;
namespace v1 = stoke::v1;

struct Settings {
  std::string coordinator;
  int workers = 4;
  int jobs = 150;
  double seconds_per_step = 0.001;
  double load = 0.9;  // the devices' share the arrivals ask for, on average
  unsigned seed = 1;
};

double Seconds(const google::protobuf::Timestamp& t) {
  return static_cast<double>(t.seconds()) + t.nanos() / 1e9;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t i = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[i];
}

struct Submitted {
  std::string id;
  double submitted = 0;
  double predicted = -1;  // < 0: no prediction
};

int Run(const Settings& s) {
  auto channel = grpc::CreateChannel(s.coordinator, grpc::InsecureChannelCredentials());
  auto api = v1::Coordinator::NewStub(channel);
  auto link = v1::WorkerLink::NewStub(channel);
  SimulatedWorker::Options options;
  options.job_length = std::nullopt;
  options.seconds_per_step = s.seconds_per_step;
  options.report_interval = std::chrono::milliseconds(100);
  std::vector<std::unique_ptr<SimulatedWorker>> workers;
  for (int i = 0; i < s.workers; ++i) {
    workers.push_back(
        std::make_unique<SimulatedWorker>(*link, "predict-" + std::to_string(i), options));
    workers.back()->Attach();
  }
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done) {
      for (auto& w : workers) w->Tick(SimulatedWorker::Clock::now());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });

  // Lengths of 250 to 4,000 steps; one job in five a gang of two.
  std::mt19937 random(s.seed);
  const std::vector<uint32_t> lengths = {250, 500, 1000, 2000, 4000};
  double mean_device_seconds = 0;
  for (uint32_t steps : lengths) mean_device_seconds += steps * s.seconds_per_step;
  mean_device_seconds = mean_device_seconds / lengths.size() * 1.2;
  std::exponential_distribution<double> gap(s.load * s.workers / mean_device_seconds);
  std::vector<Submitted> submitted;
  for (int n = 0; n < s.jobs; ++n) {
    std::this_thread::sleep_for(std::chrono::duration<double>(gap(random)));
    v1::SubmitJobRequest request;
    v1::JobSpec* spec = request.mutable_spec();
    spec->set_name("predicted");
    spec->mutable_model()->mutable_mlp();
    spec->mutable_data()->mutable_synthetic();
    spec->mutable_training()->set_steps(lengths[random() % lengths.size()]);
    spec->mutable_resources()->set_gpus(random() % 5 == 0 ? 2 : 1);
    grpc::ClientContext context;
    v1::SubmitJobResponse response;
    if (auto status = api->SubmitJob(&context, request, &response); !status.ok()) {
      std::fprintf(stderr, "submit: %s\n", status.error_message().c_str());
      return 1;
    }
    Submitted job{response.job().id(), Seconds(response.job().create_time())};
    grpc::ClientContext get_context;
    v1::GetJobRequest get;
    get.set_id(job.id);
    v1::Job read;
    if (api->GetJob(&get_context, get, &read).ok() && read.has_predicted_start_time()) {
      job.predicted = Seconds(read.predicted_start_time());
    } else if (read.state() != v1::JOB_STATE_PENDING) {
      job.predicted = Seconds(read.start_time());  // placed in the submit call itself
    }
    submitted.push_back(job);
  }
  // Until every job has finished.
  std::vector<double> errors, waits, relative;
  int unpredicted = 0;
  for (const Submitted& job : submitted) {
    v1::Job read;
    for (;;) {
      grpc::ClientContext context;
      v1::GetJobRequest get;
      get.set_id(job.id);
      if (api->GetJob(&context, get, &read).ok() && read.state() == v1::JOB_STATE_SUCCEEDED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const double wait = Seconds(read.start_time()) - job.submitted;
    waits.push_back(wait);
    if (job.predicted < 0) {
      ++unpredicted;
      continue;
    }
    const double error = std::abs(job.predicted - Seconds(read.start_time()));
    if (std::getenv("STOKE_PREDICTION_TRACE") != nullptr) {
      std::fprintf(stderr, "job %s: predicted wait %.2f s, waited %.2f s, steps %llu, gpus %u\n",
                   job.id.c_str(), job.predicted - job.submitted, wait,
                   static_cast<unsigned long long>(read.spec().training().steps()),
                   read.spec().resources().gpus());
    }
    errors.push_back(error);
    if (wait >= 1.0) relative.push_back(error / wait);
  }
  done = true;
  ticker.join();
  for (auto& w : workers) w->Detach(/*gracefully=*/true);
  for (auto& w : workers) w->Await();
  const double median_wait = Percentile(waits, 0.5);
  std::printf(
      "| %d workers, %d jobs, load %.0f%% | %.1f s | %.1f s | %.2f s | %.2f s | %.0f%% | %.0f%% | "
      "%d |\n",
      s.workers, s.jobs, 100 * s.load, median_wait, Percentile(waits, 0.9), Percentile(errors, 0.5),
      Percentile(errors, 0.9), median_wait > 0 ? 100 * Percentile(errors, 0.5) / median_wait : 0.0,
      100 * Percentile(relative, 0.5), unpredicted);
  return 0;
}

// The program, whose exceptions main reports.
int Main(int argc, char** argv) {
  CLI::App app{"stoke-prediction-error: how far off the coordinator's start-time predictions are"};
  Settings s;
  app.add_option("--coordinator", s.coordinator, "host:port of the coordinator")->required();
  app.add_option("--workers", s.workers, "Simulated workers")->capture_default_str();
  app.add_option("--jobs", s.jobs, "Jobs submitted")->capture_default_str();
  app.add_option("--seconds-per-step", s.seconds_per_step, "Each simulated step")
      ->capture_default_str();
  app.add_option("--load", s.load, "Share of the devices the arrivals ask for on average")
      ->capture_default_str();
  app.add_option("--seed", s.seed, "Random seed of lengths and arrivals")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (s.workers < 1 || s.jobs < 1 || s.seconds_per_step <= 0 || s.load <= 0) {
    std::fprintf(stderr,
                 "stoke-prediction-error: --workers and --jobs must be at least 1, "
                 "--seconds-per-step and --load positive\n");
    return 2;
  }
  return Run(s);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-prediction-error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "stoke-prediction-error: an unknown error\n");
  }
  return 1;
}
