#include "tests/support/trainer_jobs.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "spec/code_bundle.h"
#include "spec/data_checks.h"
#include "spec/job_spec_file.h"
#include "spec/job_spec_rules.h"
#include "worker/link/trainer_process.h"

namespace stoke::testing {

v1::Assignment AssignJob(const std::string& yaml, const std::string& base_dir,
                         const std::string& job_dir) {
  v1::Assignment assignment;
  auto spec = spec::ParseJobSpec(yaml, "job.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return assignment;
  spec::ResolveRelativePaths(*spec, base_dir);
  const absl::Status valid = spec::ValidateJobSpec(*spec);
  EXPECT_TRUE(valid.ok()) << valid;
  auto code = spec::ReadJobCode(*spec);
  EXPECT_TRUE(code.ok()) << code.status();
  if (!valid.ok() || !code.ok()) return assignment;
  if (spec->model().has_python()) {
    const absl::Status recorded = spec::RecordCode(*code, *spec->mutable_model()->mutable_python());
    EXPECT_TRUE(recorded.ok()) << recorded;
  }
  auto facts = spec::InspectData(*spec, spec::DataRoots({"/"}));
  EXPECT_TRUE(facts.ok()) << facts.status();
  if (!facts.ok()) return assignment;
  spec::ApplyJobSpecDefaults(*spec, *facts);
  assignment.set_job_id("7");
  assignment.set_attempt(1);
  assignment.set_world_size(1);
  assignment.set_job_dir(job_dir);
  assignment.add_data_roots("/");
  *assignment.mutable_spec() = *spec;
  *assignment.mutable_code() = *code;
  return assignment;
}

TrainerRun TrainInTrainer(const v1::Assignment& assignment, const std::string& device,
                          worker::TrainingObserver& observer,
                          std::chrono::milliseconds cancel_after,
                          std::chrono::milliseconds cancel_grace) {
  worker::TrainerProcessOptions options;
  options.trainer_path = STOKE_TRAINER_BINARY;
  options.device = device;
  options.threads = device.rfind("cpu", 0) == 0 ? 1 : 0;
  options.cancel_grace = cancel_grace;
  worker::TaskStops stops;
  std::atomic<bool> done{false};
  std::thread canceller([&] {
    const auto until = std::chrono::steady_clock::now() + cancel_after;
    while (!done && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stops.cancel = true;
  });
  const auto began = std::chrono::steady_clock::now();
  TrainerRun run;
  run.outcome = worker::TrainInChildProcess(options, assignment, observer, stops);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  done = true;
  canceller.join();
  return run;
}

}  // namespace stoke::testing
