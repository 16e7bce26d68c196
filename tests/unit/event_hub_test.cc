// The event hub: readers get events in order from any position, from memory or from the
// store; listeners hear of new events; the end of a finished job's stream is detected.
#include "server/core/event_hub.h"

#include <gtest/gtest.h>

#include <atomic>

#include "server/store/sqlite_job_store.h"
#include "tests/support/temp_dir.h"

namespace stoke::server {
namespace {

class EventHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *SqliteJobStore::Open({dir_.File("stoke.db")});
    v1::Job job;
    job.set_state(v1::JOB_STATE_PENDING);
    job_ = *store_->CreateJob(job, {});
  }

  // Commits `n` metric events to the store and publishes them, as JobBook does.
  void AddMetrics(EventHub& hub, int n, bool finish = false) {
    std::vector<v1::JobEvent> events;
    for (int i = 0; i < n; ++i) {
      v1::JobEvent& e = events.emplace_back();
      e.set_seq(job_.last_event_seq() + 1);
      e.mutable_metrics()->set_step(e.seq());
      job_.set_last_event_seq(e.seq());
    }
    if (finish) job_.set_state(v1::JOB_STATE_SUCCEEDED);
    ASSERT_TRUE(store_->Commit(job_, events).ok());
    hub.Publish(job_.id(), events, finish);
  }

  stoke::testing::TempDir dir_;
  std::unique_ptr<SqliteJobStore> store_;
  v1::Job job_;
};

TEST_F(EventHubTest, ReadsInOrderFromAnyPosition) {
  EventHub hub(*store_);
  AddMetrics(hub, 10);
  auto all = *hub.Read(job_.id(), 1, 100);
  ASSERT_EQ(all.events.size(), 10u);
  for (size_t i = 0; i < all.events.size(); ++i) EXPECT_EQ(all.events[i].seq(), i + 1);
  EXPECT_FALSE(all.end_of_stream);
  auto tail = *hub.Read(job_.id(), 7, 100);
  ASSERT_EQ(tail.events.size(), 4u);
  EXPECT_EQ(tail.events.front().seq(), 7u);
}

TEST_F(EventHubTest, PositionsOlderThanTheCacheComeFromTheStore) {
  EventHub hub(*store_, EventHub::Options{/*events_per_job=*/5, /*finished_jobs_cached=*/1});
  AddMetrics(hub, 20);
  auto early = *hub.Read(job_.id(), 2, 3);
  ASSERT_EQ(early.events.size(), 3u);
  EXPECT_EQ(early.events[0].seq(), 2u);
  EXPECT_EQ(early.events[2].seq(), 4u);
}

TEST_F(EventHubTest, EndOfStreamOnlyAfterTheLastEventOfAFinishedJob) {
  EventHub hub(*store_);
  AddMetrics(hub, 3);
  AddMetrics(hub, 2, /*finish=*/true);
  auto first = *hub.Read(job_.id(), 1, 3);
  EXPECT_FALSE(first.end_of_stream);
  auto rest = *hub.Read(job_.id(), 4, 100);
  EXPECT_EQ(rest.events.size(), 2u);
  EXPECT_TRUE(rest.end_of_stream);
}

TEST_F(EventHubTest, FinishedJobsNotCachedAreReadFromTheStore) {
  {
    EventHub hub(*store_);
    AddMetrics(hub, 4, /*finish=*/true);
  }
  EventHub fresh(*store_);  // as after a coordinator restart
  auto read = *fresh.Read(job_.id(), 1, 100);
  EXPECT_EQ(read.events.size(), 4u);
  EXPECT_TRUE(read.end_of_stream);
}

TEST_F(EventHubTest, UnknownJobIsNotFound) {
  EventHub hub(*store_);
  EXPECT_EQ(hub.Read("999", 1, 10).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EventHubTest, ListenersHearOfNewEventsUntilUnsubscribed) {
  EventHub hub(*store_);
  std::atomic<int> calls{0};
  uint64_t sub = hub.Subscribe(job_.id(), [&] { ++calls; });
  AddMetrics(hub, 1);
  AddMetrics(hub, 1);
  EXPECT_EQ(calls, 2);
  hub.Unsubscribe(sub);
  AddMetrics(hub, 1);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace stoke::server
