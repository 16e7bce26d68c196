// A job's start-up from its own times and rank 0's worker's figures: the parts add up on
// the coordinator's clock, and figures that cannot be right are not shown.
#include "server/core/job_startup.h"

#include <gtest/gtest.h>

#include <limits>

#include "server/common/time_util.h"

namespace stoke::server {
namespace {

v1::Job ScheduledJob(absl::Time queued, absl::Time scheduled) {
  v1::Job job;
  *job.mutable_queue_time() = ToProto(queued);
  *job.mutable_start_time() = ToProto(scheduled);
  return job;
}

v1::WorkerStartup Worker(double seconds) {
  v1::WorkerStartup worker;
  worker.set_seconds(seconds);
  worker.set_data_seconds(0.25);
  worker.set_model_seconds(0.5);
  worker.set_first_step_seconds(0.7);
  return worker;
}

TEST(JobStartup, QueueWaitPlusTheWorkersTimeEndsAtTheFirstStep) {
  const absl::Time queued = absl::FromUnixSeconds(1'790'000'000);
  const absl::Time scheduled = queued + absl::Milliseconds(300);
  auto startup = JobStartupFrom(ScheduledJob(queued, scheduled), Worker(1.5));
  ASSERT_TRUE(startup.has_value());
  EXPECT_DOUBLE_EQ(startup->queued_seconds(), 0.3);
  EXPECT_DOUBLE_EQ(startup->seconds(), 1.8);
  EXPECT_EQ(FromProto(startup->first_step_time()), scheduled + absl::Milliseconds(1500));
  EXPECT_DOUBLE_EQ(startup->worker().model_seconds(), 0.5);
}

TEST(JobStartup, FiguresThatCannotBeRightAreNotShown) {
  const absl::Time queued = absl::FromUnixSeconds(1'790'000'000);
  const v1::Job job = ScheduledJob(queued, queued + absl::Seconds(1));
  EXPECT_FALSE(JobStartupFrom(job, Worker(-1)).has_value());
  EXPECT_FALSE(JobStartupFrom(job, Worker(std::numeric_limits<double>::infinity())).has_value());
  EXPECT_FALSE(JobStartupFrom(job, Worker(std::numeric_limits<double>::quiet_NaN())).has_value());
  EXPECT_FALSE(JobStartupFrom(job, Worker(1e12)).has_value());
  v1::WorkerStartup bad_part = Worker(1);
  bad_part.set_first_step_seconds(-0.1);
  EXPECT_FALSE(JobStartupFrom(job, bad_part).has_value());
  // A job that was never scheduled has nothing to start from.
  v1::Job unscheduled;
  *unscheduled.mutable_queue_time() = ToProto(queued);
  EXPECT_FALSE(JobStartupFrom(unscheduled, Worker(1)).has_value());
}

}  // namespace
}  // namespace stoke::server
