// /metrics of a running coordinator: what a dashboard reads while a job trains, valid
// exposition format (promtool agrees), and no series left behind by finished jobs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "tests/support/coordinator_process.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

TEST(Metrics, ShowTheClusterAndARunningJobThenForgetTheJob) {
  TempDir dir;
  TempDir files;
  // A quota group, so that the quota series the dashboards chart exist.
  std::ofstream(files.File("quotas.yaml")) << "groups:\n  research: {owners: [alice], cpus: 1}\n";
  CoordinatorProcess::Options options;
  options.data_dir = dir.path();
  options.extra_args = {"--heartbeat-timeout",    "6", "--metrics-retention", "3", "--quotas",
                        files.File("quotas.yaml")};
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  std::string metrics_address;
  std::ifstream(dir.File("metrics.address")) >> metrics_address;
  ASSERT_FALSE(metrics_address.empty());

  v1::JobSpec spec;
  spec.mutable_model()->mutable_mlp()->add_hidden(32);
  spec.mutable_data()->mutable_synthetic()->set_features(16);
  spec.mutable_training()->set_steps(1'000'000'000);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_metrics()->set_interval_steps(20);
  auto job = coordinator->client().SubmitJob(spec);
  ASSERT_TRUE(job.ok());
  const std::string series = "stoke_job_samples_per_second{job_id=\"" + job->id() + "\"}";

  std::string text;
  ASSERT_TRUE(WaitFor(
      [&] {
        text = HttpGet(metrics_address, "/metrics");
        // Throughput comes with the job's samples, device readings with heartbeats.
        return SampleValue(text, series) > 0 &&
               text.find("\nstoke_device_utilization_ratio{") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << text;
  EXPECT_EQ(SampleValue(text, "stoke_workers{state=\"busy\"}"), 1);
  EXPECT_EQ(SampleValue(text, "stoke_workers{state=\"idle\"}"), 1);
  EXPECT_EQ(SampleValue(text, "stoke_jobs{state=\"running\"}"), 1);
  EXPECT_EQ(SampleValue(text, "stoke_queue_length"), 0);
  EXPECT_GT(SampleValue(text, "stoke_job_loss{job_id=\"" + job->id() + "\"}"), 0);
  EXPECT_EQ(SampleValue(text, "stoke_job_devices{job_id=\"" + job->id() + "\"}"), 1);

  // Prometheus's own linter agrees with the exposition (names, units, help texts).
  // scripts/setup-deps.sh installs it; the GPU machines have no Prometheus.
  if (RunCommand({"/bin/sh", "-c", "command -v promtool"}).exit_code == 0) {
    std::string file = dir.File("scrape.txt");
    std::ofstream(file) << text;
    CommandResult check = RunCommand({"/bin/sh", "-c", "promtool check metrics < " + file});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    EXPECT_EQ(check.out + check.err, "") << "promtool found problems";
  } else {
    std::cerr << "promtool not installed: exposition lint skipped\n";
  }

  // Every metric the dashboards chart is one the coordinator exports.
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(STOKE_SOURCE_DIR) + "/dashboards")) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::string dashboard((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::regex metric_name("stoke_[a-z_]+");
    for (auto it = std::sregex_iterator(dashboard.begin(), dashboard.end(), metric_name);
         it != std::sregex_iterator(); ++it) {
      // CPU workers have no power or temperature to report; GPUs through NVML do. A
      // straggler's series exists only while a rank of several straggles (this job has
      // one; tests/integration/straggler_test.cc scrapes it).
      if (it->str() == "stoke_device_power_watts" ||
          it->str() == "stoke_device_temperature_celsius" || it->str() == "stoke_job_straggler") {
        continue;
      }
      EXPECT_NE(text.find("\n" + it->str()), std::string::npos)
          << entry.path().filename() << " charts " << it->str() << ", which /metrics lacks";
    }
  }

  ASSERT_TRUE(coordinator->client().CancelJob(job->id()).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        text = HttpGet(metrics_address, "/metrics");
        return text.find("job_id=\"" + job->id() + "\"") == std::string::npos && !text.empty();
      },
      std::chrono::seconds(15)))
      << "series of a finished job remain past --metrics-retention:\n"
      << text;
}

}  // namespace
}  // namespace stoke::testing
