// The training engine as a user drives it, through a real coordinator, its workers and
// the CLI: real data (Fashion-MNIST) to a real accuracy, a language model on a token file
// made with `stoke tokenize`, resume from a checkpoint after a worker is killed, and
// export of the trained model.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "tests/support/coordinator_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using std::chrono::seconds;

class EngineTest : public ::testing::Test {
 protected:
  void StartCoordinator(const std::string& local_workers) {
    CoordinatorProcess::Options options;
    options.data_dir = dir_.File("coordinator");
    options.local_workers = local_workers;
    options.extra_args = {"--heartbeat-timeout", "6",           "--data-root",
                          "/usr/share/datasets", "--data-root", files_.path()};
    coordinator_ = CoordinatorProcess::Start(options);
    ASSERT_NE(coordinator_, nullptr);
  }

  CommandResult Stoke(std::vector<std::string> args) {
    args.insert(args.begin(), {STOKE_CLI_BINARY, "--address", coordinator_->address()});
    return RunCommand(args);
  }

  // SIGKILL to the worker process that runs `rank` of the job, as a crash would.
  void KillWorkerOfRank(const std::string& job_id, uint32_t rank) {
    auto& client = coordinator_->client();
    auto job = client.GetJob(job_id);
    ASSERT_TRUE(job.ok()) << job.status();
    std::string worker;
    for (const auto& p : job->placement()) {
      if (p.rank() == rank) worker = p.worker_id();
    }
    const auto cluster = client.GetCluster();
    ASSERT_TRUE(cluster.ok());
    pid_t pid = 0;
    for (const auto& w : cluster->workers()) {
      if (w.id() == worker) pid = static_cast<pid_t>(w.pid());
    }
    ASSERT_GT(pid, 0) << "no worker runs rank " << rank << " of job " << job_id;
    ASSERT_EQ(kill(pid, SIGKILL), 0);
  }

  // `stoke submit <spec>`: the new job's id, or empty (and the test failed) if refused.
  std::string SubmitFile(const std::string& spec) {
    CommandResult submit = Stoke({"submit", spec});
    EXPECT_EQ(submit.exit_code, 0) << submit.err;
    return submit.exit_code == 0 ? submit.out.substr(0, submit.out.find('\n')) : std::string();
  }

  // A short one-device job of priority 5: above any job of negative priority.
  std::string SubmitUrgentJob() {
    return SubmitFile(Write("urgent.yaml", R"(name: urgent
resources: {priority: 5}
model: {mlp: {hidden: [32]}}
data: {synthetic: {features: 16}}
training: {steps: 50, batch_size: 16}
)"));
  }

  void WaitUntilBothSucceed(const std::string& a, const std::string& b) {
    auto& client = coordinator_->client();
    ASSERT_TRUE(WaitFor(
        [&] {
          return client.GetJob(a)->state() == v1::JOB_STATE_SUCCEEDED &&
                 client.GetJob(b)->state() == v1::JOB_STATE_SUCCEEDED;
        },
        seconds(300)))
        << "job " << a << ": " << v1::JobState_Name(client.GetJob(a)->state()) << ", "
        << client.GetJob(a)->message() << "\n"
        << coordinator_->Log();
  }

  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(files_.File(name)) << text;
    return files_.File(name);
  }

  TempDir dir_;
  TempDir files_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

TEST_F(EngineTest, FashionMnistExampleReachesEightyFivePercentThroughTheCli) {
  StartCoordinator("cpu:1");  // one worker with both cores
  CommandResult run =
      Stoke({"submit", std::string(STOKE_SOURCE_DIR) + "/examples/fashion-mnist.yaml", "--watch"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << coordinator_->Log();
  const std::string id = run.out.substr(0, run.out.find('\n'));
  auto job = coordinator_->client().GetJob(id);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(job->has_latest_eval());
  EXPECT_EQ(job->latest_eval().eval().samples(), 10000u) << "the whole test split";
  EXPECT_GE(job->latest_eval().eval().accuracy(), 0.85) << run.out;
  // The watch showed evaluations and training progress as they happened.
  EXPECT_NE(run.out.find("eval at step 300: loss"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("accuracy"), std::string::npos) << run.out;
}

TEST_F(EngineTest, GptLearnsATokenFileMadeWithStokeTokenize) {
  StartCoordinator("cpu:1");
  CommandResult tokenize = RunCommand(
      {STOKE_CLI_BINARY, "tokenize", "/usr/share/common-licenses/GPL-3", files_.File("gpl.bin")});
  ASSERT_EQ(tokenize.exit_code, 0) << tokenize.err;
  EXPECT_NE(tokenize.out.find("byte-level tokens"), std::string::npos);
  // Relative paths in a job file are taken from the file's folder.
  const std::string job = Write("gpt.yaml", R"(name: tiny-gpt
model:
  gpt: {layers: 1, heads: 2, width: 64}
data:
  tokens: {train_path: gpl.bin, context: 32}
optimizer: {adamw: {}, lr: 0.005, warmup_steps: 10, schedule: cosine, grad_clip_norm: 1.0}
training: {steps: 500, batch_size: 32}
eval: {interval_steps: 250, batches: 8}
metrics: {interval_steps: 25}
)");
  CommandResult run = Stoke({"submit", job, "--watch"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << coordinator_->Log();
  const std::string id = run.out.substr(0, run.out.find('\n'));
  auto result = coordinator_->client().GetJob(id);
  ASSERT_TRUE(result.ok());
  // Uniform guessing over 256 bytes is a perplexity of 256; English text is far easier.
  EXPECT_LT(result->latest_eval().eval().perplexity(), 16) << run.out;
  EXPECT_GT(result->latest_eval().eval().perplexity(), 1);
}

TEST_F(EngineTest, KilledWorkerResumesFromItsCheckpointAndFinishes) {
  StartCoordinator("cpu:2");
  const std::string job = Write("long.yaml", R"(name: resumable
model: {mlp: {hidden: [256]}}
data: {synthetic: {features: 64}}
training: {steps: 6000, batch_size: 64}
metrics: {interval_steps: 100}
checkpoint: {interval_steps: 500, keep: 2}
)");
  const std::string id = SubmitFile(job);
  ASSERT_FALSE(id.empty());
  auto& client = coordinator_->client();
  ASSERT_TRUE(
      WaitFor([&] { return client.GetJob(id)->latest_metrics().step() >= 1200; }, seconds(120)))
      << coordinator_->Log();
  ASSERT_NO_FATAL_FAILURE(KillWorkerOfRank(id, 0));

  ASSERT_TRUE(
      WaitFor([&] { return client.GetJob(id)->state() == v1::JOB_STATE_SUCCEEDED; }, seconds(180)))
      << v1::JobState_Name(client.GetJob(id)->state()) << "\n"
      << coordinator_->Log();
  auto finished = client.GetJob(id);
  EXPECT_EQ(finished->restarts(), 1u);
  EXPECT_EQ(finished->attempt(), 2u);
  EXPECT_EQ(finished->latest_metrics().step(), 6000u);

  // The second attempt picked up from a checkpoint: the step counter went back by no more
  // than the checkpoint interval, and the log says where it resumed.
  std::vector<uint64_t> steps;
  std::string resumed_line;
  auto status = client.WatchJob(id, {}, [&](const v1::JobEvent& e) {
    if (e.has_metrics() && !e.metrics().has_eval()) steps.push_back(e.metrics().step());
    if (e.has_log() && e.log().text().rfind("resumed from checkpoint", 0) == 0)
      resumed_line = e.log().text();
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_FALSE(steps.empty());
  for (size_t i = 1; i < steps.size(); ++i) {
    EXPECT_GE(steps[i] + 500, steps[i - 1])
        << "went back from " << steps[i - 1] << " to " << steps[i];
  }
  std::smatch match;
  ASSERT_TRUE(std::regex_search(resumed_line, match, std::regex("step (\\d+)"))) << resumed_line;
  EXPECT_GE(std::stoull(match[1]), 1000u);

  // The newest two checkpoints remain, and the final model can be exported.
  CommandResult checkpoints = Stoke({"checkpoints", id});
  EXPECT_EQ(checkpoints.exit_code, 0);
  EXPECT_NE(checkpoints.out.find("\n5500 "), std::string::npos) << checkpoints.out;
  EXPECT_NE(checkpoints.out.find("\n6000 "), std::string::npos) << checkpoints.out;
  CommandResult exported = Stoke({"export", id, files_.File("model.pt")});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_NE(exported.out.find("at step 6000"), std::string::npos) << exported.out;
  std::ifstream model(files_.File("model.pt"), std::ios::binary);
  char magic[2] = {};
  model.read(magic, 2);
  EXPECT_EQ(std::string(magic, 2), "PK") << "a LibTorch archive is a zip file";

  // An export that cannot be written whole (the disk fills up: here a small file-size
  // limit does it, SIGXFSZ ignored so that the write fails instead): the cause is said,
  // and no file is left under the name asked for, nor a partial one.
  const std::string target = files_.File("full.pt");
  CommandResult full =
      RunCommand({"/bin/sh", "-c", "ulimit -f 8; trap '' XFSZ; exec \"$0\" \"$@\"",
                  STOKE_CLI_BINARY, "--address", coordinator_->address(), "export", id, target});
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.err.find(target + ": cannot write: File too large"), std::string::npos)
      << full.err;
  EXPECT_NE(access(target.c_str(), F_OK), 0) << "a partial export was left at " << target;
  EXPECT_NE(access((target + ".partial").c_str(), F_OK), 0);
}

// Each training step's loss, from the job's stored events (evaluations left out).
std::map<uint64_t, std::vector<double>> LossesByStep(client::Client& client,
                                                     const std::string& id) {
  std::map<uint64_t, std::vector<double>> losses;
  auto status = client.WatchJob(id, {}, [&](const v1::JobEvent& e) {
    if (e.has_metrics() && !e.metrics().has_eval()) {
      losses[e.metrics().step()].push_back(e.metrics().loss());
    }
    return true;
  });
  EXPECT_TRUE(status.ok()) << status;
  return losses;
}

// One CPU worker, a long job of negative priority on it, then an urgent job: the long one
// stops at a step boundary, waits as PREEMPTED while the urgent one runs, and resumes
// from the step it stopped at. Its loss curve is that of the same job run straight
// through, step for step: no step lost, none trained twice.
TEST_F(EngineTest, AnUrgentJobPreemptsALowPriorityOneThatResumesWithTheSameLossCurve) {
  StartCoordinator("cpu:1");
  auto& client = coordinator_->client();
  // Small enough that a loaded machine slows it without failing it (issue 43), long
  // enough that the urgent job comes while it trains.
  const std::string spec = R"(model: {mlp: {hidden: [64], dropout: 0.1}}
data: {synthetic: {features: 32}}
optimizer: {adamw: {}, lr: 0.003, schedule: cosine, warmup_steps: 20}
training: {steps: 2000, batch_size: 32}
metrics: {interval_steps: 1}
checkpoint: {interval_steps: 1000}
)";
  const std::string straight = SubmitFile(Write("straight.yaml", "name: straight\n" + spec));
  ASSERT_TRUE(WaitFor([&] { return client.GetJob(straight)->state() == v1::JOB_STATE_SUCCEEDED; },
                      seconds(300)))
      << coordinator_->Log();

  const std::string low =
      SubmitFile(Write("low.yaml", "name: low\nresources: {priority: -1}\n" + spec));
  ASSERT_TRUE(
      WaitFor([&] { return client.GetJob(low)->latest_metrics().step() >= 150; }, seconds(300)))
      << coordinator_->Log();
  const std::string urgent = SubmitUrgentJob();
  ASSERT_NO_FATAL_FAILURE(WaitUntilBothSucceed(low, urgent));

  const v1::Job finished = *client.GetJob(low);
  EXPECT_EQ(finished.preemptions(), 1u);
  EXPECT_EQ(finished.restarts(), 0u) << "a preemption is not the job's failure";
  EXPECT_EQ(finished.attempt(), 2u);
  EXPECT_GT(finished.preemption_lost_seconds(), 0.0);
  // The urgent job ran while the low one waited, and said why it waited.
  std::string preempted_message;
  auto status = client.WatchJob(low, {}, [&](const v1::JobEvent& e) {
    if (e.has_state_change() && e.state_change().state() == v1::JOB_STATE_PREEMPTED) {
      preempted_message = e.state_change().message();
    }
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_NE(preempted_message.find("preempted for job " + urgent), std::string::npos)
      << preempted_message;
  EXPECT_NE(preempted_message.find("its checkpoint written"), std::string::npos)
      << preempted_message;

  const auto expected = LossesByStep(client, straight);
  const auto resumed = LossesByStep(client, low);
  ASSERT_EQ(expected.size(), 2000u);
  ASSERT_EQ(resumed.size(), 2000u) << "every step reported once";
  for (const auto& [step, losses] : resumed) {
    ASSERT_EQ(losses.size(), 1u) << "step " << step << " was trained twice";
    EXPECT_EQ(losses.front(), expected.at(step).front()) << "step " << step;
  }

  auto cluster = client.GetCluster();
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(cluster->preemptions(), 1u);
}

TEST_F(EngineTest, TwoRankJobRestartsWholeWhenOneRankIsKilledAndFinishes) {
  StartCoordinator("cpu:2");
  const std::string job = Write("pair.yaml", R"(name: pair
model: {mlp: {hidden: [128]}}
data: {synthetic: {features: 64}}
training: {steps: 3000, batch_size: 32}
resources: {gpus: 2}
metrics: {interval_steps: 100}
checkpoint: {interval_steps: 300, keep: 2}
distributed: {timeout_seconds: 10}
)");
  const std::string id = SubmitFile(job);
  ASSERT_FALSE(id.empty());
  auto& client = coordinator_->client();
  ASSERT_TRUE(
      WaitFor([&] { return client.GetJob(id)->latest_metrics().step() >= 700; }, seconds(120)))
      << coordinator_->Log();

  // `stoke status` says where each rank runs and where they meet.
  CommandResult status = Stoke({"status", id});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("rank 0: "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("rank 1: "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("rendezvous 127.0.0.1:"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("waiting for gradient all-reduce"), std::string::npos) << status.out;

  // Kill the worker of rank 1 (not the one serving the rendezvous).
  ASSERT_NO_FATAL_FAILURE(KillWorkerOfRank(id, 1));

  ASSERT_TRUE(
      WaitFor([&] { return client.GetJob(id)->state() == v1::JOB_STATE_SUCCEEDED; }, seconds(240)))
      << v1::JobState_Name(client.GetJob(id)->state()) << ": " << client.GetJob(id)->message()
      << "\n"
      << coordinator_->Log();
  auto finished = client.GetJob(id);
  EXPECT_EQ(finished->restarts(), 1u) << "one restart for the whole gang";
  EXPECT_EQ(finished->attempt(), 2u);
  EXPECT_EQ(finished->latest_metrics().step(), 3000u);
  EXPECT_EQ(finished->placement_size(), 2);

  // Both ranks of the second attempt resumed from rank 0's checkpoint and met again.
  int resumed = 0;
  int joined = 0;
  std::set<uint32_t> ranks_reporting;
  auto watch = client.WatchJob(id, {}, [&](const v1::JobEvent& e) {
    if (e.has_log() && e.log().text().rfind("resumed from checkpoint at step ", 0) == 0) ++resumed;
    if (e.has_log() && e.log().text().find(" of 2 joined at ") != std::string::npos) ++joined;
    if (e.has_metrics()) ranks_reporting.insert(e.metrics().rank());
    return true;
  });
  ASSERT_TRUE(watch.ok()) << watch;
  EXPECT_EQ(resumed, 2) << "each rank of attempt 2 loads the checkpoint";
  EXPECT_EQ(joined, 4) << "two ranks joined in each of two attempts";
  EXPECT_EQ(ranks_reporting, (std::set<uint32_t>{0, 1}));
}

// A job of two ranks preempted: the coordinator picks a step ahead of the ranks (two
// seconds of steps: this job needs thousands), both stop after it, rank 0 writes its
// checkpoint, and the next attempt's ranks both resume from exactly that step: no restart
// spent, no step lost.
TEST_F(EngineTest, ATwoRankJobPreemptedStopsBothRanksAfterTheSameStepAndResumesThere) {
  StartCoordinator("cpu:2");
  auto& client = coordinator_->client();
  const std::string low = SubmitFile(Write("pair.yaml", R"(name: pair
model: {mlp: {hidden: [64]}}
data: {synthetic: {features: 32}}
training: {steps: 12000, batch_size: 32}
resources: {gpus: 2, priority: -1}
metrics: {interval_steps: 50}
checkpoint: {interval_steps: 100000}
)"));
  ASSERT_TRUE(
      WaitFor([&] { return client.GetJob(low)->latest_metrics().step() >= 300; }, seconds(120)))
      << coordinator_->Log();
  const std::string urgent = SubmitUrgentJob();
  ASSERT_NO_FATAL_FAILURE(WaitUntilBothSucceed(low, urgent));
  const v1::Job finished = *client.GetJob(low);
  EXPECT_EQ(finished.preemptions(), 1u) << coordinator_->Log();
  EXPECT_EQ(finished.restarts(), 0u);
  EXPECT_EQ(finished.latest_metrics().step(), 12000u);

  std::string preempted;
  std::vector<std::string> resumed;
  auto watch = client.WatchJob(low, {}, [&](const v1::JobEvent& e) {
    if (e.has_state_change() && e.state_change().state() == v1::JOB_STATE_PREEMPTED) {
      preempted = e.state_change().message();
    }
    if (e.has_log() && e.log().text().rfind("resumed from checkpoint at step ", 0) == 0) {
      resumed.push_back(e.log().text());
    }
    return true;
  });
  ASSERT_TRUE(watch.ok()) << watch;
  std::smatch stopped;
  ASSERT_TRUE(
      std::regex_search(preempted, stopped, std::regex("after step (\\d+), its checkpoint")))
      << preempted;
  EXPECT_GT(std::stoull(stopped[1]), 300u);
  ASSERT_EQ(resumed.size(), 2u) << "each rank of attempt 2 resumes";
  for (const std::string& line : resumed) {
    EXPECT_EQ(line, "resumed from checkpoint at step " + stopped[1].str());
  }
}

// Two jobs of two ranks submitted at once on four devices run side by side: each on a
// pair of its own, each meeting at an address of its own, and both finish (on GPUs the
// same path puts four pairs on an 8-GPU host: bench/ddp-scaling.sh).
TEST_F(EngineTest, TwoPairJobsSubmittedAtOnceRunSideBySideOnPairsOfTheirOwn) {
  StartCoordinator("cpu:4");
  auto& client = coordinator_->client();
  ASSERT_TRUE(WaitFor([&] { return client.GetCluster()->workers_size() == 4; }, seconds(60)))
      << coordinator_->Log();
  const std::string spec = Write("pair.yaml", R"(name: side
model: {mlp: {hidden: [64]}}
data: {synthetic: {features: 32}}
training: {steps: 3000, batch_size: 32}
resources: {gpus: 2}
metrics: {interval_steps: 100}
distributed: {timeout_seconds: 20}
)");
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    ids.push_back(SubmitFile(spec));
    ASSERT_FALSE(ids.back().empty());
  }
  auto running = [&](const std::string& id) {
    auto job = client.GetJob(id);
    return job.ok() && job->state() == v1::JOB_STATE_RUNNING && job->latest_metrics().step() > 0;
  };
  // Both training at one moment: neither waited for the other's devices.
  ASSERT_TRUE(WaitFor([&] { return running(ids[0]) && running(ids[1]); }, seconds(120)))
      << client.GetJob(ids[0])->message() << " / " << client.GetJob(ids[1])->message() << "\n"
      << coordinator_->Log();
  auto first = client.GetJob(ids[0]);
  auto second = client.GetJob(ids[1]);
  ASSERT_EQ(first->placement_size(), 2);
  ASSERT_EQ(second->placement_size(), 2);
  std::set<std::string> workers;
  for (const auto* job : {&*first, &*second}) {
    for (const auto& p : job->placement()) workers.insert(p.worker_id());
  }
  EXPECT_EQ(workers.size(), 4u) << "the pairs share a device";
  EXPECT_FALSE(first->rendezvous_address().empty());
  EXPECT_NE(first->rendezvous_address(), second->rendezvous_address());

  for (const auto& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return client.GetJob(id)->state() == v1::JOB_STATE_SUCCEEDED; },
                        seconds(240)))
        << id << ": " << v1::JobState_Name(client.GetJob(id)->state()) << ": "
        << client.GetJob(id)->message() << "\n"
        << coordinator_->Log();
    auto done = client.GetJob(id);
    EXPECT_EQ(done->restarts(), 0u) << id;
    EXPECT_EQ(done->latest_metrics().step(), 3000u) << id;
  }
}

// A job cancelled while it evaluates (four billion held-out batches: hours) releases its
// worker within seconds, which then takes the next job. The bound leaves room for a
// loaded two-core machine; before, the worker finished the evaluation first.
TEST_F(EngineTest, CancelDuringALongEvaluationFreesTheWorkerWithinSeconds) {
  StartCoordinator("cpu:1");
  auto& client = coordinator_->client();
  const std::string id = SubmitFile(Write("eval.yaml", R"(name: long-eval
model: {mlp: {hidden: [16]}}
data: {synthetic: {features: 8, num_classes: 2, samples_per_epoch: 64}}
training: {steps: 1, batch_size: 8}
eval: {batches: 4000000000}
metrics: {interval_steps: 1}
)"));
  ASSERT_FALSE(id.empty());
  // Step 1's metrics arrive just before the evaluation starts.
  ASSERT_TRUE(
      WaitFor([&] { return client.GetJob(id)->latest_metrics().step() >= 1; }, seconds(120)))
      << coordinator_->Log();
  std::this_thread::sleep_for(seconds(1));
  const auto cancelled_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(client.CancelJob(id, "test").ok());
  auto idle = [&] {
    auto cluster = client.GetCluster();
    if (!cluster.ok() || cluster->workers_size() != 1) return false;
    return cluster->workers(0).state() == v1::WORKER_STATE_IDLE;
  };
  ASSERT_TRUE(WaitFor(idle, seconds(10))) << "the worker still held the job 10 s after cancel";
  EXPECT_LT(std::chrono::steady_clock::now() - cancelled_at, seconds(10));
  EXPECT_EQ(client.GetJob(id)->state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(EngineTest, BadDataIsRefusedAtSubmitNamingFieldAndFile) {
  StartCoordinator("0");
  std::string missing = Write("missing.yaml",
                              "model: {cnn: {}}\ndata: {mnist: {path: nowhere}}\n"
                              "training: {steps: 10}\n");
  CommandResult result = Stoke({"submit", missing});
  EXPECT_EQ(result.exit_code, 2);
  // Placed where the file names it: line 2, column 16.
  EXPECT_NE(result.err.find(missing + ":2:16: data.mnist.path: " + files_.File("nowhere")),
            std::string::npos)
      << result.err;
  std::string outside = Write("outside.yaml",
                              "model: {cnn: {}}\ndata: {mnist: {path: /etc}}\n"
                              "training: {steps: 10}\n");
  result = Stoke({"submit", outside});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("outside the coordinator's data roots"), std::string::npos)
      << result.err;
  std::string too_big =
      Write("big.yaml",
            "model: {cnn: {}}\ndata: {mnist: {path: /usr/share/datasets/fashion-mnist}}\n"
            "training: {steps: 10, batch_size: 100000}\n");
  result = Stoke({"submit", too_big});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(
      result.err.find("training.batch_size: 100000 is larger than the 60000 training samples"),
      std::string::npos)
      << result.err;
  // Nothing was queued.
  EXPECT_EQ(coordinator_->client().ListJobs({})->jobs_size(), 0);
}

}  // namespace
}  // namespace stoke::testing
