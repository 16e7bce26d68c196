// A straggler named end to end: a coordinator on loopback, two CPU worker processes, a
// 2-rank job (c10d over Gloo), one worker slowed on purpose through its test hook
// (STOKE_FAULT_SLOW_STEP_MS). The coordinator must name that rank, where it runs and why,
// in GetJob, in `stoke status` and on /metrics, and never name the other one.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tests/support/coordinator_process.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using std::chrono::seconds;

constexpr uint32_t kWindowSteps = 5;

// A worker on `device` (cpu:N: its label on /metrics and in `stoke status`), one thread;
// `slow_step_ms` > 0 sets the test hook in its environment only.
std::unique_ptr<BackgroundProcess> StartWorker(const std::string& coordinator,
                                               const std::string& id, const std::string& device,
                                               int slow_step_ms, const std::string& log) {
  std::vector<std::string> argv;
  if (slow_step_ms > 0) {
    argv = {"env", "STOKE_FAULT_SLOW_STEP_MS=" + std::to_string(slow_step_ms)};
  }
  for (const std::string& arg : {std::string(STOKE_WORKER_BINARY), std::string("--coordinator"),
                                 coordinator, std::string("--device"), device, std::string("--id"),
                                 id, std::string("--threads"), std::string("1")}) {
    argv.push_back(arg);
  }
  return std::make_unique<BackgroundProcess>(argv, BackgroundProcess::Options{log});
}

bool Attached(client::Client& client, const std::string& id) {
  auto cluster = client.GetCluster();
  if (!cluster.ok()) return false;
  return std::any_of(cluster->workers().begin(), cluster->workers().end(),
                     [&](const v1::Worker& w) { return w.id() == id; });
}

std::vector<std::string> LinesStartingWith(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

TEST(Straggler, ARankSlowedOnPurposeIsNamedWithItsHostDeviceAndCause) {
  TempDir dir;
  CoordinatorProcess::Options options;
  options.data_dir = dir.path();
  options.local_workers = "0";
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  auto& client = coordinator->client();
  std::string metrics_address;
  std::ifstream(dir.File("metrics.address")) >> metrics_address;
  ASSERT_FALSE(metrics_address.empty());

  // Each step of the slow worker takes 40 ms more; its peer's steps are a few ms of
  // compute, then a wait for it in the gradient all-reduce.
  auto fast = StartWorker(coordinator->address(), "fast", "cpu:0", 0, dir.File("fast.log"));
  auto slow = StartWorker(coordinator->address(), "slow", "cpu:1", 40, dir.File("slow.log"));
  ASSERT_TRUE(
      WaitFor([&] { return Attached(client, "fast") && Attached(client, "slow"); }, seconds(30)))
      << fast->Log() << slow->Log();

  v1::JobSpec spec;
  spec.set_name("pair");
  spec.mutable_model()->mutable_mlp()->add_hidden(32);
  spec.mutable_data()->mutable_synthetic()->set_features(16);
  spec.mutable_training()->set_steps(1'000'000);  // cancelled once the checks are done
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_resources()->set_gpus(2);
  spec.mutable_metrics()->set_interval_steps(kWindowSteps);
  spec.mutable_distributed()->set_timeout_seconds(20);
  auto submitted = client.SubmitJob(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->id();

  // Named after 5 windows of both ranks; at least 8 windows run first.
  v1::Job job;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto read = client.GetJob(id);
        if (!read.ok()) return false;
        job = *read;
        return job.stragglers_size() > 0 &&
               job.latest_metrics().step() >= uint64_t{8} * kWindowSteps;
      },
      seconds(60)))
      << "state " << v1::JobState_Name(job.state()) << ": " << job.message() << "\n"
      << coordinator->Log() << slow->Log();
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(job.placement_size(), 2);
  uint32_t slow_rank = 2;
  std::string slow_host;
  for (const auto& p : job.placement()) {
    if (p.worker_id() == "slow") {
      slow_rank = p.rank();
      slow_host = p.host();
    }
  }
  ASSERT_LT(slow_rank, 2u);
  const std::string rank = std::to_string(slow_rank);

  ASSERT_EQ(job.stragglers_size(), 1) << "only the slowed rank is named";
  const v1::Straggler& named = job.stragglers(0);
  EXPECT_EQ(named.rank(), slow_rank);
  EXPECT_EQ(named.worker_id(), "slow");
  EXPECT_EQ(named.host(), slow_host);
  EXPECT_EQ(named.device().index(), 1);
  EXPECT_EQ(named.cause(), v1::STRAGGLER_CAUSE_COMPUTE);
  EXPECT_GE(named.windows(), 5u);
  const std::string who = "rank " + rank + " (worker slow on " + slow_host + ", cpu:1)";
  EXPECT_EQ(named.summary().rfind(who + " is a straggler: its compute takes ", 0), 0u)
      << named.summary();
  EXPECT_NE(named.summary().find("the others wait for it in all-reduce"), std::string::npos)
      << named.summary();
  // The diagnosis rides on the job's samples too (the job's latest are rank 0's).
  ASSERT_TRUE(WaitFor(
      [&] {
        auto read = client.GetJob(id);
        const auto& d = read->latest_metrics().diagnoses();
        return std::find(d.begin(), d.end(), v1::DIAGNOSIS_STRAGGLER) != d.end();
      },
      seconds(10)));

  // `stoke status` says it in the ranks' section.
  CommandResult status =
      RunCommand({STOKE_CLI_BINARY, "--address", coordinator->address(), "status", id});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("  straggler  " + who + " is a straggler: its compute takes "),
            std::string::npos)
      << status.out;
  EXPECT_NE(status.out.find("rank " + rank + ": slow on " + slow_host +
                            " cpu:1  [straggler: "
                            "compute, +"),
            std::string::npos)
      << status.out;
  EXPECT_EQ(status.out.find("rank " + std::to_string(1 - slow_rank) + " ("), std::string::npos)
      << "the other rank is not named\n"
      << status.out;

  // /metrics over HTTP: one series, for the slowed rank, cause compute.
  const std::string series = "stoke_job_straggler{cause=\"compute\",device=\"cpu:1\",host=\"" +
                             slow_host + "\",job_id=\"" + id + "\",rank=\"" + rank + "\"} 1";
  std::string text;
  ASSERT_TRUE(WaitFor(
      [&] {
        text = HttpGet(metrics_address, "/metrics");
        return !LinesStartingWith(text, series).empty();
      },
      seconds(10)))
      << text;
  EXPECT_EQ(LinesStartingWith(text, "stoke_job_straggler{").size(), 1u) << text;

  // The job's log says it too, once.
  auto cancelled = client.CancelJob(id, "straggler test done");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  int said = 0;
  auto watch = client.WatchJob(id, {}, [&](const v1::JobEvent& e) {
    if (e.has_log() && e.log().text().rfind(who + " is a straggler: ", 0) == 0) ++said;
    return true;
  });
  ASSERT_TRUE(watch.ok()) << watch;
  EXPECT_EQ(said, 1);
  // Finished: no one straggles any more.
  EXPECT_EQ(client.GetJob(id)->stragglers_size(), 0);
}

}  // namespace
}  // namespace stoke::testing
