// One suite, every job store: SQLite on a temp file and PostgreSQL on a throwaway server
// (tests/support/postgres_server.h). What is committed is what is read back, also after the
// store is opened again; each write is one transaction; ids, pages and request ids behave
// the same whichever store a coordinator runs on.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "server/store/job_store.h"
#include "tests/support/store_factories.h"
#include "tests/support/store_records.h"

namespace stoke::server {
namespace {

using stoke::testing::NewJob;
using stoke::testing::NewStoreFactory;
using stoke::testing::StateEvent;
using stoke::testing::StoreFactory;

class JobStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string skip, failure;
    factory_ = NewStoreFactory(GetParam(), &skip, &failure);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_NE(factory_, nullptr) << failure;
    auto store = factory_->Open();
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // Closes the store and opens it again, as a restarted coordinator does.
  JobStore& Reopen() {
    store_.reset();
    auto store = factory_->Open();
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    return *store_;
  }

  std::unique_ptr<StoreFactory> factory_;
  std::unique_ptr<JobStore> store_;
};

TEST_P(JobStoreTest, CreatedJobRoundTripsWithItsFirstEvent) {
  auto job = store_->CreateJob(NewJob("first"), {StateEvent(1, v1::JOB_STATE_PENDING)});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id(), "1");
  auto read = store_->GetJob("1");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->spec().name(), "first");
  EXPECT_EQ(read->id(), "1");
  auto events = store_->ReadEvents("1", 1, 100);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].state_change().state(), v1::JOB_STATE_PENDING);
}

TEST_P(JobStoreTest, IdsIncreaseInSubmissionOrder) {
  for (int i = 1; i <= 3; ++i) {
    auto job = store_->CreateJob(NewJob("j"), {});
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->id(), std::to_string(i));
  }
}

TEST_P(JobStoreTest, CommitStoresTransitionAndEventsTogether) {
  auto job = *store_->CreateJob(NewJob("j"), {StateEvent(1, v1::JOB_STATE_PENDING)});
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_last_event_seq(3);
  ASSERT_TRUE(store_
                  ->Commit(job, {StateEvent(2, v1::JOB_STATE_SCHEDULED),
                                 StateEvent(3, v1::JOB_STATE_RUNNING)})
                  .ok());
  EXPECT_EQ(store_->GetJob(job.id())->state(), v1::JOB_STATE_RUNNING);
  auto events = *store_->ReadEvents(job.id(), 2, 100);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].seq(), 2u);
  EXPECT_EQ(events[1].state_change().state(), v1::JOB_STATE_RUNNING);
}

// An event that is already stored makes the whole commit fail: the job's new state is not
// kept without its events.
TEST_P(JobStoreTest, AFailedCommitChangesNothing) {
  auto job = *store_->CreateJob(NewJob("j"), {StateEvent(1, v1::JOB_STATE_PENDING)});
  job.set_state(v1::JOB_STATE_RUNNING);
  auto s = store_->Commit(
      job, {StateEvent(2, v1::JOB_STATE_RUNNING), StateEvent(1, v1::JOB_STATE_RUNNING)});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(store_->GetJob(job.id())->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(store_->ReadEvents(job.id(), 1, 10)->size(), 1u);
  // The store still takes writes after the failure.
  EXPECT_TRUE(store_->Commit(job, {StateEvent(2, v1::JOB_STATE_RUNNING)}).ok());
}

v1::JobEvent SampleEvent(uint64_t seq, uint64_t step) {
  v1::JobEvent event;
  event.set_seq(seq);
  event.mutable_metrics()->set_step(step);
  return event;
}

// The telemetry writer's group commit: every update's events, each job's row as its last
// update leaves it, and all of it in one transaction.
TEST_P(JobStoreTest, CommitBatchStoresEveryUpdateAndEachJobsLastRowOrNothing) {
  v1::Job a = *store_->CreateJob(NewJob("a"), {StateEvent(1, v1::JOB_STATE_PENDING)});
  v1::Job b = *store_->CreateJob(NewJob("b"), {StateEvent(1, v1::JOB_STATE_PENDING)});
  std::vector<JobUpdate> updates(3);
  updates[0].job = a;
  updates[0].job.set_last_event_seq(2);
  updates[0].events = {SampleEvent(2, 10)};
  updates[1].job = b;
  updates[1].job.set_last_event_seq(2);
  updates[1].events = {SampleEvent(2, 5)};
  updates[2].job = a;
  updates[2].job.set_last_event_seq(4);
  updates[2].events = {SampleEvent(3, 20), SampleEvent(4, 30)};
  ASSERT_TRUE(store_->CommitBatch(updates).ok());
  EXPECT_EQ(store_->GetJob(a.id())->last_event_seq(), 4u);
  EXPECT_EQ(store_->GetJob(b.id())->last_event_seq(), 2u);
  EXPECT_EQ(store_->ReadEvents(a.id(), 1, 100)->size(), 4u);
  EXPECT_EQ(store_->ReadEvents(b.id(), 1, 100)->size(), 2u);

  // One bad update (an event already stored) after a good one, and none of the batch is
  // kept: committed one update at a time, b's would have been.
  std::vector<JobUpdate> bad(2);
  bad[0].job = b;
  bad[0].job.set_last_event_seq(3);
  bad[0].events = {SampleEvent(3, 6)};
  bad[1].job = a;
  bad[1].events = {SampleEvent(4, 40)};
  EXPECT_FALSE(store_->CommitBatch(bad).ok());
  EXPECT_EQ(store_->GetJob(b.id())->last_event_seq(), 2u);
  EXPECT_EQ(store_->ReadEvents(b.id(), 1, 100)->size(), 2u);

  // An unknown job in a batch is NOT_FOUND, and the batch's other updates are not kept.
  std::vector<JobUpdate> ghost(2);
  ghost[0] = bad[0];
  ghost[1].job = NewJob("ghost");
  ghost[1].job.set_id("42");
  EXPECT_EQ(store_->CommitBatch(ghost).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->ReadEvents(b.id(), 1, 100)->size(), 2u);

  // The store takes batches again, and they survive a reopen.
  ASSERT_TRUE(store_->CommitBatch({bad[0]}).ok());
  EXPECT_EQ(Reopen().ReadEvents(b.id(), 1, 100)->size(), 3u);
  EXPECT_EQ(store_->GetJob(b.id())->last_event_seq(), 3u);
}

TEST_P(JobStoreTest, CommitOfAnUnknownJobIsNotFound) {
  v1::Job ghost = NewJob("ghost");
  ghost.set_id("42");
  EXPECT_EQ(store_->Commit(ghost, {StateEvent(1, v1::JOB_STATE_PENDING)}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->ReadEvents("42", 1, 10)->empty());
}

TEST_P(JobStoreTest, EverythingSurvivesReopening) {
  auto job = *store_->CreateJob(NewJob("kept"), {StateEvent(1, v1::JOB_STATE_PENDING)});
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_last_event_seq(2);
  ASSERT_TRUE(store_->Commit(job, {StateEvent(2, v1::JOB_STATE_SUCCEEDED)}).ok());
  JobStore& store = Reopen();
  auto read = store.GetJob("1");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->spec().name(), "kept");
  EXPECT_EQ(read->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(store.ReadEvents("1", 1, 10)->size(), 2u);
  // New ids continue after the old ones.
  EXPECT_EQ(store.CreateJob(NewJob("next"), {})->id(), "2");
}

// A job's start-up (its first training step) is written with the job by state changes
// and by the telemetry writer's batches alike, and read back after a restart.
TEST_P(JobStoreTest, AJobsStartUpSurvivesCommitsAndReopening) {
  auto job = *store_->CreateJob(NewJob("j"), {StateEvent(1, v1::JOB_STATE_PENDING)});
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_last_event_seq(2);
  v1::JobStartup* startup = job.mutable_startup();
  startup->set_seconds(1.25);
  startup->set_queued_seconds(0.004);
  startup->mutable_first_step_time()->set_seconds(1'790'000'000);
  startup->mutable_worker()->set_seconds(1.246);
  startup->mutable_worker()->set_data_seconds(0.1);
  startup->mutable_worker()->set_model_seconds(0.2);
  startup->mutable_worker()->set_first_step_seconds(0.9);
  ASSERT_TRUE(store_->Commit(job, {StateEvent(2, v1::JOB_STATE_RUNNING)}).ok());
  job.set_last_event_seq(3);
  v1::JobEvent metrics;
  metrics.set_seq(3);
  metrics.mutable_metrics()->set_step(10);
  ASSERT_TRUE(store_->CommitBatch({JobUpdate{job, {metrics}}}).ok());

  JobStore& store = Reopen();
  auto read = store.GetJob(job.id());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_startup());
  EXPECT_DOUBLE_EQ(read->startup().seconds(), 1.25);
  EXPECT_DOUBLE_EQ(read->startup().queued_seconds(), 0.004);
  EXPECT_EQ(read->startup().first_step_time().seconds(), 1'790'000'000);
  EXPECT_DOUBLE_EQ(read->startup().worker().seconds(), 1.246);
  EXPECT_DOUBLE_EQ(read->startup().worker().model_seconds(), 0.2);
  EXPECT_DOUBLE_EQ(read->startup().worker().first_step_seconds(), 0.9);
  auto page = store.ListJobs(JobQuery{});
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_DOUBLE_EQ(page->jobs[0].startup().seconds(), 1.25);
}

TEST_P(JobStoreTest, ListsNewestFirstFilteredAndPaged) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        store_->CreateJob(NewJob("j", i % 2 ? v1::JOB_STATE_RUNNING : v1::JOB_STATE_PENDING), {})
            .ok());
  }
  JobQuery query;
  query.limit = 2;
  auto page = *store_->ListJobs(query);
  ASSERT_EQ(page.jobs.size(), 2u);
  EXPECT_EQ(page.jobs[0].id(), "5");
  EXPECT_EQ(page.jobs[1].id(), "4");
  EXPECT_TRUE(page.more);
  query.before_id = 4;
  page = *store_->ListJobs(query);
  EXPECT_EQ(page.jobs[0].id(), "3");
  query.before_id = 2;
  page = *store_->ListJobs(query);
  ASSERT_EQ(page.jobs.size(), 1u);
  EXPECT_FALSE(page.more);
  query = JobQuery{};
  query.states = {v1::JOB_STATE_RUNNING};
  page = *store_->ListJobs(query);
  ASSERT_EQ(page.jobs.size(), 2u);
  EXPECT_EQ(page.jobs[0].id(), "4");
  EXPECT_EQ(page.jobs[1].id(), "2");
  EXPECT_FALSE(page.more);
  query.states = {v1::JOB_STATE_RUNNING, v1::JOB_STATE_PENDING};
  EXPECT_EQ(store_->ListJobs(query)->jobs.size(), 5u);
}

TEST_P(JobStoreTest, ListsOnlyTheOwnersJobs) {
  for (const char* owner : {"alice", "bob", "alice", ""}) {
    v1::Job job = NewJob("j");
    job.set_owner(owner);
    ASSERT_TRUE(store_->CreateJob(job, {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  }
  JobQuery query;
  query.owner = "alice";
  auto page = store_->ListJobs(query);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 2u);
  EXPECT_EQ(page->jobs[0].id(), "3");
  EXPECT_EQ(page->jobs[1].id(), "1");
  query.owner = "carol";
  EXPECT_TRUE(store_->ListJobs(query)->jobs.empty());
}

TEST_P(JobStoreTest, UnknownJobsAreNotFound) {
  EXPECT_EQ(store_->GetJob("7").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetJob("abc").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetJob("").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetJob("99999999999999999999").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(JobStoreTest, AuditEntriesAndWorkerBindingsSurviveAReopen) {
  for (const char* who : {"alice", "bob", "root"}) {
    v1::AuditEntry entry;
    entry.set_who(who);
    entry.set_action("SubmitJob");
    ASSERT_TRUE(store_->AppendAudit(entry).ok());
  }
  EXPECT_EQ(*store_->BindWorkerCredential("host/cuda:0", "host-a"), "host-a");
  JobStore& store = Reopen();
  auto page = store.ListAudit(0, 2);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->entries.size(), 2u);
  EXPECT_TRUE(page->more);
  EXPECT_EQ(page->entries[0].who(), "root");  // newest first
  EXPECT_EQ(page->entries[0].id(), 3u);
  auto rest = store.ListAudit(page->entries[1].id(), 2);
  ASSERT_EQ(rest->entries.size(), 1u);
  EXPECT_EQ(rest->entries[0].who(), "alice");
  EXPECT_FALSE(rest->more);
  // The first credential keeps the id.
  EXPECT_EQ(*store.BindWorkerCredential("host/cuda:0", "host-b"), "host-a");
  EXPECT_EQ(*store.BindWorkerCredential("host/cuda:1", "host-b"), "host-b");
}

TEST_P(JobStoreTest, PruningTheAuditLogKeepsTheNewestEntries) {
  for (int i = 0; i < 30; ++i) {
    v1::AuditEntry entry;
    entry.set_who("user-" + std::to_string(i));
    ASSERT_TRUE(store_->AppendAudit(entry).ok());
  }
  ASSERT_TRUE(store_->PruneAudit(10).ok());
  auto page = store_->ListAudit(0, 100);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->entries.size(), 10u);
  EXPECT_EQ(page->entries.front().who(), "user-29");
  EXPECT_EQ(page->entries.back().who(), "user-20");
  // New entries go on numbering after the pruned ones; keeping more than there are
  // removes nothing.
  v1::AuditEntry next;
  next.set_who("next");
  ASSERT_TRUE(store_->AppendAudit(next).ok());
  ASSERT_TRUE(store_->PruneAudit(1000).ok());
  page = store_->ListAudit(0, 100);
  ASSERT_EQ(page->entries.size(), 11u);
  EXPECT_EQ(page->entries.front().id(), 31u);
}

TEST_P(JobStoreTest, ARequestIdLeadsBackToItsJobAfterReopening) {
  v1::Job job = NewJob("retried");
  job.set_request_id("req-1");
  ASSERT_TRUE(store_->CreateJob(job, {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  ASSERT_TRUE(store_->CreateJob(NewJob("other"), {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  JobStore& store = Reopen();
  auto found = store.FindJobByRequestId("req-1");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->id(), "1");
  EXPECT_EQ(found->spec().name(), "retried");
  EXPECT_EQ(store.FindJobByRequestId("req-2").status().code(), absl::StatusCode::kNotFound);
}

// Two submissions with one request id: the second is refused whole, so a retried submit
// can never leave a second job behind.
TEST_P(JobStoreTest, AReusedRequestIdCreatesNoSecondJob) {
  v1::Job job = NewJob("once");
  job.set_request_id("req-1");
  ASSERT_TRUE(store_->CreateJob(job, {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  EXPECT_FALSE(store_->CreateJob(job, {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  JobQuery all;
  all.limit = 100;
  EXPECT_EQ(store_->ListJobs(all)->jobs.size(), 1u);
  EXPECT_EQ(store_->FindJobByRequestId("req-1")->spec().name(), "once");
}

TEST_P(JobStoreTest, AJobAndItsAuditEntryAreStoredTogetherOrNeitherIs) {
  v1::AuditEntry entry;
  entry.set_who("alice");
  entry.set_action("SubmitJob");
  entry.set_result("OK");
  ASSERT_TRUE(store_->AppendAudit(entry).ok());  // an earlier call's entry
  v1::Job job = NewJob("audited");
  job.set_request_id("req-1");
  auto created = store_->CreateAuditedJob(job, {StateEvent(1, v1::JOB_STATE_PENDING)}, entry);
  ASSERT_TRUE(created.ok()) << created.status();
  // The same request id again fails (no second job): its entry is not stored either.
  entry.set_who("bob");
  EXPECT_FALSE(store_->CreateAuditedJob(job, {StateEvent(1, v1::JOB_STATE_PENDING)}, entry).ok());
  JobStore& store = Reopen();
  auto page = store.ListAudit(0, 10);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->entries.size(), 2u);
  EXPECT_EQ(page->entries[0].who(), "alice");
  EXPECT_EQ(page->entries[0].target(), created->id()) << "the entry names the new job";
  EXPECT_EQ(page->entries[0].id(), 2u);
  EXPECT_EQ(page->entries[1].target(), "");
  EXPECT_EQ(store.GetJob(created->id())->spec().name(), "audited");
  JobQuery all;
  all.limit = 100;
  EXPECT_EQ(store.ListJobs(all)->jobs.size(), 1u);
}

// Protobuf strings may hold any byte, NUL included; the store keeps them as given.
TEST_P(JobStoreTest, KeepsEveryByteOfRequestIdsOwnersAndWorkerIds) {
  const std::string odd("a\0b\xc3\xa9'\";--", 10);
  v1::Job job = NewJob(odd);
  job.set_request_id(odd);
  job.set_owner(odd);
  ASSERT_TRUE(store_->CreateJob(job, {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  auto found = store_->FindJobByRequestId(odd);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->spec().name(), odd);
  JobQuery query;
  query.owner = odd;
  EXPECT_EQ(store_->ListJobs(query)->jobs.size(), 1u);
  query.owner = "a";
  EXPECT_TRUE(store_->ListJobs(query)->jobs.empty());
  EXPECT_EQ(*store_->BindWorkerCredential(odd, odd), odd);
}

TEST_P(JobStoreTest, IdsAreCanonicalDecimalOnly) {
  for (int i = 0; i < 13; ++i) {
    ASSERT_TRUE(store_->CreateJob(NewJob("j"), {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  }
  EXPECT_TRUE(store_->GetJob("13").ok());
  for (const char* alias : {"013", "01", "+1", " 1", "1 ", "0x1"}) {
    EXPECT_EQ(store_->GetJob(alias).status().code(), absl::StatusCode::kNotFound) << alias;
    EXPECT_EQ(store_->ReadEvents(alias, 1, 10).status().code(), absl::StatusCode::kNotFound)
        << alias;
  }
}

TEST_P(JobStoreTest, ReadsEventsFromASeqUpToALimit) {
  auto job = *store_->CreateJob(NewJob("j"), {StateEvent(1, v1::JOB_STATE_PENDING)});
  std::vector<v1::JobEvent> more;
  for (uint64_t seq = 2; seq <= 10; ++seq) more.push_back(StateEvent(seq, v1::JOB_STATE_RUNNING));
  job.set_last_event_seq(10);
  ASSERT_TRUE(store_->Commit(job, more).ok());
  auto events = *store_->ReadEvents(job.id(), 4, 3);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].seq(), 4u);
  EXPECT_EQ(events[2].seq(), 6u);
  EXPECT_EQ(store_->ReadEvents(job.id(), 9, 100)->size(), 2u);
}

TEST_P(JobStoreTest, AHugeFromSeqReadsNothingInsteadOfEverything) {
  ASSERT_TRUE(store_->CreateJob(NewJob("j"), {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  for (uint64_t from : {uint64_t{1} << 63, ~uint64_t{0}}) {
    auto events = store_->ReadEvents("1", from, 10);
    ASSERT_TRUE(events.ok()) << events.status();
    EXPECT_TRUE(events->empty()) << from;
  }
}

// The coordinator calls the store from several threads (RPC handlers, the scheduler).
TEST_P(JobStoreTest, WritersOnSeveralThreadsGetDistinctIds) {
  constexpr int kThreads = 4, kJobsEach = 25;
  std::vector<std::thread> threads;
  std::vector<std::vector<std::string>> ids(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kJobsEach; ++i) {
        auto job = store_->CreateJob(NewJob("t" + std::to_string(t)),
                                     {StateEvent(1, v1::JOB_STATE_PENDING)});
        if (job.ok()) ids[t].push_back(job->id());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<std::string> distinct;
  for (const auto& some : ids) distinct.insert(some.begin(), some.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads * kJobsEach));
  JobQuery all;
  all.limit = 1000;
  EXPECT_EQ(store_->ListJobs(all)->jobs.size(), static_cast<size_t>(kThreads * kJobsEach));
}

INSTANTIATE_TEST_SUITE_P(Stores, JobStoreTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace stoke::server
