// Two real coordinators on one real PostgreSQL store, a real CPU worker and a client that
// both list the two addresses: the leader is killed with SIGKILL while a job trains, the
// standby takes over within 10 s, the worker and the client follow it, and the job
// finishes there: none is lost.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/lib/client.h"
#include "tests/support/coordinator_process.h"
#include "tests/support/http_get.h"
#include "tests/support/postgres_server.h"
#include "tests/support/store_factories.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A job of some thousands of steps on a CPU, checkpointed every 200.
v1::JobSpec TrainingJob() {
  v1::JobSpec spec;
  spec.set_name("survives-failover");
  spec.mutable_model()->mutable_mlp()->add_hidden(256);
  spec.mutable_data()->mutable_synthetic()->set_features(64);
  spec.mutable_training()->set_steps(6000);
  spec.mutable_training()->set_batch_size(128);
  spec.mutable_metrics()->set_interval_steps(50);
  spec.mutable_checkpoint()->set_interval_steps(200);
  return spec;
}

class Coordinator {
 public:
  Coordinator(const std::string& name, const std::string& address, const std::string& store,
              const std::string& data_dir)
      : log_(data_dir + "/" + name + ".log"),
        process_(
            {STOKE_COORDINATOR_BINARY, "--address", address, "--store", store, "--data-dir",
             data_dir, "--local-workers", "0", "--metrics-address", "", "--heartbeat-timeout", "6"},
            {log_}) {}
  std::string Log() const { return ReadText(log_); }
  void Kill() {
    process_.Signal(SIGKILL);
    process_.Wait();
  }

 private:
  std::string log_;
  BackgroundProcess process_;
};

TEST(StandbyCoordinator, TakesOverWithin10sAndTheJobFinishesThere) {
  if (FindPostgresBinDir().empty()) {
    GTEST_SKIP() << "PostgreSQL server binaries not found: install Debian's postgresql "
                    "(scripts/setup-deps.sh)";
  }
  std::string error;
  const std::string store = NewPostgresDatabase(&error);
  ASSERT_FALSE(store.empty()) << error;
  TempDir dir;  // shared by both, as storage two coordinator hosts mount would be
  const std::string first = "127.0.0.1:" + std::to_string(FreePort());
  const std::string second = "127.0.0.1:" + std::to_string(FreePort());
  const std::string both = first + "," + second;

  auto leader = std::make_unique<Coordinator>("first", first, store, dir.path());
  ASSERT_TRUE(WaitFor([&] { return ReadText(dir.File("coordinator.address")) == first + "\n"; },
                      seconds(30)))
      << leader->Log();
  Coordinator standby("second", second, store, dir.path());
  ASSERT_TRUE(
      WaitFor([&] { return standby.Log().find("standby:") != std::string::npos; }, seconds(30)))
      << standby.Log();

  WorkerProcess worker(both, "cpu-worker", dir.File("worker.log"));
  client::ClientOptions options;
  options.address = both;
  auto client = client::Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto job = (*client)->SubmitJob(TrainingJob());
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  // Killed mid-training, with a checkpoint written.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto now = (*client)->GetJob(id);
        return now.ok() && now->state() == v1::JOB_STATE_RUNNING &&
               now->latest_metrics().step() >= 400;
      },
      seconds(120)))
      << leader->Log();
  auto before = (*client)->GetJob(id);
  ASSERT_TRUE(before.ok());
  ASSERT_LT(before->latest_metrics().step(), 6000u) << "the job finished before the kill";

  leader->Kill();
  const auto killed = std::chrono::steady_clock::now();
  // The client, dialing the same list, reaches the new leader.
  ASSERT_TRUE(WaitFor([&] { return (*client)->GetJob(id).ok(); }, seconds(10),
                      std::chrono::milliseconds(100)))
      << standby.Log();
  const auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(took, seconds(10));
  EXPECT_NE(standby.Log().find("took the leader lease"), std::string::npos) << standby.Log();
  EXPECT_EQ(ReadText(dir.File("coordinator.address")), second + "\n");

  // The worker follows, and the job completes on the new leader.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto now = (*client)->GetJob(id);
        return now.ok() && now->state() == v1::JOB_STATE_SUCCEEDED;
      },
      seconds(240)))
      << (*client)->GetJob(id)->DebugString() << standby.Log() << ReadText(dir.File("worker.log"));
  auto done = (*client)->GetJob(id);
  EXPECT_EQ(done->latest_metrics().step(), 6000u);
  // The worker trained on through the failover and reattached holding the job: the same
  // attempt finished it, with no restart counted and so no step repeated.
  EXPECT_EQ(done->attempt(), 1u) << done->DebugString();
  EXPECT_EQ(done->restarts(), 0u) << done->DebugString();
  // Nothing lost, nothing doubled: the one job, with its history from the start.
  auto listed = (*client)->ListJobs({});
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->jobs_size(), 1);
  std::printf("standby answered %.1f s after the leader was killed (job at step %llu)\n",
              std::chrono::duration<double>(took).count(),
              static_cast<unsigned long long>(before->latest_metrics().step()));
}

TEST(StandbyCoordinator, AStandbyStopsCleanlyAndAStoppedLeaderHandsOver) {
  if (FindPostgresBinDir().empty()) GTEST_SKIP() << "PostgreSQL server binaries not found";
  std::string error;
  const std::string store = NewPostgresDatabase(&error);
  ASSERT_FALSE(store.empty()) << error;
  TempDir dir;
  const std::string first = "127.0.0.1:" + std::to_string(FreePort());
  const std::string second = "127.0.0.1:" + std::to_string(FreePort());
  const std::string third = "127.0.0.1:" + std::to_string(FreePort());
  BackgroundProcess leader(
      {STOKE_COORDINATOR_BINARY, "--address", first, "--store", store, "--data-dir", dir.path(),
       "--local-workers", "0", "--metrics-address", ""},
      {dir.File("first.log")});
  ASSERT_TRUE(WaitFor([&] { return ReadText(dir.File("coordinator.address")) == first + "\n"; },
                      seconds(30)))
      << leader.Log();
  client::ClientOptions options;
  options.address = first + "," + second + "," + third;
  auto client = client::Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto job = (*client)->SubmitJob(TrainingJob());
  ASSERT_TRUE(job.ok()) << job.status();

  // A standby asked to stop while it waits exits at once, cleanly.
  BackgroundProcess quitter(
      {STOKE_COORDINATOR_BINARY, "--address", second, "--store", store, "--data-dir", dir.path(),
       "--local-workers", "0", "--metrics-address", ""},
      {dir.File("second.log")});
  ASSERT_TRUE(
      WaitFor([&] { return quitter.Log().find("standby:") != std::string::npos; }, seconds(30)))
      << quitter.Log();
  quitter.Signal(SIGTERM);
  EXPECT_EQ(quitter.Wait(), 0) << quitter.Log();

  // A leader stopped for an upgrade hands over to the standby, which has the job.
  BackgroundProcess standby(
      {STOKE_COORDINATOR_BINARY, "--address", third, "--store", store, "--data-dir", dir.path(),
       "--local-workers", "0", "--metrics-address", ""},
      {dir.File("third.log")});
  ASSERT_TRUE(
      WaitFor([&] { return standby.Log().find("standby:") != std::string::npos; }, seconds(30)))
      << standby.Log();
  leader.Signal(SIGTERM);
  EXPECT_EQ(leader.Wait(), 0) << leader.Log();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto now = (*client)->GetJob(job->id());
        return now.ok() && now->spec().name() == "survives-failover";
      },
      seconds(10)))
      << standby.Log();
  EXPECT_EQ(ReadText(dir.File("coordinator.address")), third + "\n");
}

// Prometheus scrapes both coordinators of a pair: the standby answers /metrics (so it is
// not reported down) and says it waits; once the leader stops, it says it leads.
TEST(StandbyCoordinator, ServesMetricsSayingWhetherItLeads) {
  if (FindPostgresBinDir().empty()) GTEST_SKIP() << "PostgreSQL server binaries not found";
  std::string error;
  const std::string store = NewPostgresDatabase(&error);
  ASSERT_FALSE(store.empty()) << error;
  TempDir dir;
  const std::string leader_metrics = "127.0.0.1:" + std::to_string(FreePort());
  const std::string standby_metrics = "127.0.0.1:" + std::to_string(FreePort());
  auto start = [&](const std::string& name, const std::string& metrics) {
    return std::make_unique<BackgroundProcess>(
        std::vector<std::string>{STOKE_COORDINATOR_BINARY, "--address",
                                 "127.0.0.1:" + std::to_string(FreePort()), "--store", store,
                                 "--data-dir", dir.File(name), "--local-workers", "0",
                                 "--metrics-address", metrics},
        BackgroundProcess::Options{dir.File(name + ".log")});
  };
  auto leader = start("first", leader_metrics);
  ASSERT_TRUE(
      WaitFor([&] { return fs::exists(dir.File("first/coordinator.address")); }, seconds(30)))
      << leader->Log();
  auto standby = start("second", standby_metrics);
  ASSERT_TRUE(
      WaitFor([&] { return standby->Log().find("standby:") != std::string::npos; }, seconds(30)))
      << standby->Log();
  auto says = [](const std::string& address, const std::string& line) {
    return HttpGet(address, "/metrics").find("\n" + line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(says(standby_metrics, "stoke_coordinator_leader 0"))
      << HttpGet(standby_metrics, "/metrics");
  EXPECT_TRUE(says(leader_metrics, "stoke_coordinator_leader 1"))
      << HttpGet(leader_metrics, "/metrics");
  // A readiness probe sends traffic to the leader only.
  const HttpResponse waiting = HttpRequest(standby_metrics, "/readyz");
  EXPECT_EQ(waiting.status, 503);
  EXPECT_EQ(waiting.body, "standby: waiting for the leader lease\n");
  EXPECT_EQ(HttpRequest(standby_metrics, "/healthz").status, 200);
  EXPECT_EQ(HttpRequest(leader_metrics, "/readyz").status, 200);

  leader->Signal(SIGTERM);
  EXPECT_EQ(leader->Wait(), 0) << leader->Log();
  EXPECT_TRUE(
      WaitFor([&] { return says(standby_metrics, "stoke_coordinator_leader 1"); }, seconds(10)))
      << standby->Log() << HttpGet(standby_metrics, "/metrics");
  EXPECT_EQ(HttpRequest(standby_metrics, "/readyz").status, 200) << "it leads now";
  standby->Signal(SIGTERM);
  EXPECT_EQ(standby->Wait(), 0) << standby->Log();
}

TEST(CoordinatorStoreFlag, ABadUrlOrAnAbsentServerStopsTheStartNamingTheFlag) {
  TempDir dir;
  for (const std::string& url :
       {std::string("mysql://db/stoke"), "postgresql://stoke:pw@/stoke?host=" + dir.path()}) {
    auto result =
        RunCommand({STOKE_COORDINATOR_BINARY, "--store", url, "--data-dir", dir.path(),
                    "--local-workers", "0", "--metrics-address", "", "--address", "127.0.0.1:0"});
    EXPECT_NE(result.exit_code, 0) << url;
    EXPECT_NE(result.out.find("--store") + result.err.find("--store"), 2 * std::string::npos)
        << result.out << result.err;
    EXPECT_EQ((result.out + result.err).find(":pw@"), std::string::npos) << result.err;
  }
}

}  // namespace
}  // namespace stoke::testing
