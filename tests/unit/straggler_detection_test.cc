// Naming the rank that holds a job of several ranks back, from made-up metric windows: the
// detection is a pure function of the ranks' samples, and the watch that gathers samples
// into windows words what it finds.
#include <gtest/gtest.h>

#include <vector>

#include "server/core/straggler_detection.h"
#include "server/core/straggler_watch.h"

namespace stoke::server {
namespace {

// Synchronous DDP: every rank's step takes `step` seconds; a rank's compute is what it does
// not spend waiting in all-reduce.
RankWindow Rank(double step, double compute) { return {step, (step - compute) / step}; }

StepWindow Window(uint64_t step, std::vector<RankWindow> ranks) {
  StepWindow w;
  w.step = step;
  for (uint32_t r = 0; r < ranks.size(); ++r) w.ranks[r] = ranks[r];
  return w;
}

// Two ranks, rank 1 computing 25% longer: rank 0 waits for it.
StepWindow PairWithSlowRank1(uint64_t step) {
  return Window(step, {Rank(0.100, 0.080), Rank(0.100, 0.100)});
}
StepWindow EvenPair(uint64_t step) {
  return Window(step, {Rank(0.080, 0.079), Rank(0.080, 0.080)});
}

// Four ranks, rank 2 computing ~30% longer than the others (which differ a little).
StepWindow FourWithSlowRank2(uint64_t step) {
  return Window(step, {Rank(0.13, 0.100), Rank(0.13, 0.098), Rank(0.13, 0.130), Rank(0.13, 0.101)});
}

std::vector<StepWindow> Repeat(StepWindow (*make)(uint64_t), int n, uint64_t first_step = 10) {
  std::vector<StepWindow> out;
  out.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < static_cast<uint64_t>(n); ++i) out.push_back(make(first_step + 10 * i));
  return out;
}

std::vector<StepWindow> Join(std::vector<StepWindow> a, const std::vector<StepWindow>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(StragglerDetection, TwoRanksFourSlowWindowsNameNoOneAndTheFifthNamesTheSlowRank) {
  auto four = NamedStragglers(DetectStragglers(Repeat(PairWithSlowRank1, 4), 2));
  EXPECT_TRUE(four.empty());

  auto five = NamedStragglers(DetectStragglers(Repeat(PairWithSlowRank1, 5), 2));
  ASSERT_EQ(five.size(), 1u) << "rank 0 waits for rank 1 in all-reduce; that names only rank 1";
  EXPECT_EQ(five[0].rank(), 1u);
  EXPECT_EQ(five[0].cause(), v1::STRAGGLER_CAUSE_COMPUTE);
  EXPECT_NEAR(five[0].excess(), 0.25, 1e-9);
  EXPECT_EQ(five[0].windows(), 5u);
}

TEST(StragglerDetection, FourRanksNameOnlyTheOneWhosePeersWaitForIt) {
  EXPECT_TRUE(NamedStragglers(DetectStragglers(Repeat(FourWithSlowRank2, 4), 4)).empty());
  auto named = NamedStragglers(DetectStragglers(Repeat(FourWithSlowRank2, 6), 4));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank(), 2u);
  EXPECT_EQ(named[0].cause(), v1::STRAGGLER_CAUSE_COMPUTE);
  EXPECT_NEAR(named[0].excess(), 0.30, 1e-9) << "against the others' median, 0.100 s";
  EXPECT_EQ(named[0].windows(), 6u);
}

TEST(StragglerDetection, SpreadUnderTenPercentIsNormal) {
  // Rank 1 computes 9% longer than rank 0: noise, not a straggler.
  auto near = [](uint64_t step) { return Window(step, {Rank(0.109, 0.100), Rank(0.109, 0.109)}); };
  EXPECT_TRUE(NamedStragglers(DetectStragglers(Repeat(near, 20), 2)).empty());
}

TEST(StragglerDetection, ANormalWindowBreaksTheRun) {
  auto history =
      Join(Join(Repeat(PairWithSlowRank1, 4), Repeat(EvenPair, 1)), Repeat(PairWithSlowRank1, 4));
  EXPECT_TRUE(NamedStragglers(DetectStragglers(history, 2)).empty());
}

TEST(StragglerDetection, ClearsAfterFiveNormalWindowsNotFour) {
  const auto slow = Repeat(PairWithSlowRank1, 5);
  auto after_four = NamedStragglers(DetectStragglers(Join(slow, Repeat(EvenPair, 4, 100)), 2));
  ASSERT_EQ(after_four.size(), 1u) << "recovering takes 5 normal windows";
  EXPECT_EQ(after_four[0].rank(), 1u);
  EXPECT_TRUE(NamedStragglers(DetectStragglers(Join(slow, Repeat(EvenPair, 5, 100)), 2)).empty());
  // A slow window during the recovery starts the count again.
  auto relapse = Join(Join(slow, Repeat(EvenPair, 4, 100)), Repeat(PairWithSlowRank1, 1, 200));
  relapse = Join(relapse, Repeat(EvenPair, 4, 300));
  EXPECT_EQ(NamedStragglers(DetectStragglers(relapse, 2)).size(), 1u);
}

TEST(StragglerDetection, ARankWaitingInAllReduceWithNormalComputeIsNamedForIt) {
  // Equal compute; rank 3 waits 15% of the step longer than the others (a slow link).
  auto slow_link = [](uint64_t step) {
    return Window(step, {Rank(0.1, 0.080), Rank(0.1, 0.081), Rank(0.1, 0.079), Rank(0.1, 0.065)});
  };
  auto named = NamedStragglers(DetectStragglers(Repeat(slow_link, 5), 4));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank(), 3u);
  EXPECT_EQ(named[0].cause(), v1::STRAGGLER_CAUSE_ALLREDUCE);
  EXPECT_NEAR(named[0].excess(), 0.15, 1e-9);
  EXPECT_TRUE(NamedStragglers(DetectStragglers(Repeat(slow_link, 4), 4)).empty());
}

TEST(StragglerDetection, IncompleteWindowsNeitherExtendNorBreakARun) {
  StepWindow missing_rank = PairWithSlowRank1(45);
  missing_rank.ranks.erase(0);
  StepWindow no_time = EvenPair(46);
  no_time.ranks[1].step_seconds = 0;
  auto history = Repeat(PairWithSlowRank1, 2);
  history.push_back(missing_rank);
  history.push_back(no_time);
  history = Join(history, Repeat(PairWithSlowRank1, 2, 50));
  EXPECT_TRUE(NamedStragglers(DetectStragglers(history, 2)).empty()) << "4 complete windows";
  history.push_back(PairWithSlowRank1(70));
  EXPECT_EQ(NamedStragglers(DetectStragglers(history, 2)).size(), 1u);
}

TEST(StragglerDetection, OneRankHasNoPeersToStraggleBehind) {
  auto alone = [](uint64_t step) { return Window(step, {Rank(0.1, 0.1)}); };
  EXPECT_TRUE(NamedStragglers(DetectStragglers(Repeat(alone, 10), 1)).empty());
}

v1::MetricSample Sample(uint64_t step, const RankWindow& r) {
  v1::MetricSample s;
  s.set_step(step);
  s.set_step_seconds(r.step_seconds);
  s.set_comm_wait_ratio(r.comm_wait_ratio);
  return s;
}

v1::Job PairJob() {
  v1::Job job;
  job.set_id("7");
  for (uint32_t r = 0; r < 2; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_worker_id(r == 0 ? "host-a/cuda:0" : "host-b/cuda:1");
    p->set_host(r == 0 ? "host-a" : "host-b");
    p->mutable_device()->set_type(v1::DEVICE_TYPE_CUDA);
    p->mutable_device()->set_index(r);
  }
  return job;
}

TEST(StragglerWatch, GathersEachStepFromEveryRankAndWordsTheFinding) {
  StragglerWatch watch(2);
  const v1::Job job = PairJob();
  for (int i = 0; i < 5; ++i) {
    const StepWindow w = PairWithSlowRank1(10 + 10 * i);
    // Rank 1's sample of a step may arrive before rank 0's.
    EXPECT_FALSE(watch.Add(1, Sample(w.step, w.ranks.at(1))).any());
    const StragglerWatch::Change change = watch.Add(0, Sample(w.step, w.ranks.at(0)));
    EXPECT_EQ(change.named, (i == 4 ? std::vector<uint32_t>{1} : std::vector<uint32_t>{}));
  }
  ASSERT_TRUE(watch.any());
  auto named = watch.Named(job);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].host(), "host-b");
  EXPECT_EQ(named[0].worker_id(), "host-b/cuda:1");
  EXPECT_EQ(named[0].summary(),
            "rank 1 (worker host-b/cuda:1 on host-b, cuda:1) is a straggler: its compute takes "
            "25% longer than its peers' (5 windows); the others wait for it in all-reduce");

  for (int i = 0; i < 5; ++i) {
    const StepWindow w = EvenPair(100 + 10 * i);
    watch.Add(0, Sample(w.step, w.ranks.at(0)));
    const StragglerWatch::Change change = watch.Add(1, Sample(w.step, w.ranks.at(1)));
    EXPECT_EQ(change.cleared, (i == 4 ? std::vector<uint32_t>{1} : std::vector<uint32_t>{}));
  }
  EXPECT_FALSE(watch.any());
  EXPECT_EQ(watch.DescribeRecovery(job, 1),
            "rank 1 (worker host-b/cuda:1 on host-b, cuda:1) is no longer a straggler: 5 windows "
            "in step with its peers");
}

TEST(StragglerWatch, RanksReportingAtDifferentStepsAreNeverJudged) {
  StragglerWatch watch(2);
  for (uint64_t step = 10; step < 1000; step += 10) {
    const StepWindow w = PairWithSlowRank1(step);
    watch.Add(0, Sample(step, w.ranks.at(0)));
    watch.Add(1, Sample(step + 5, w.ranks.at(1)));
  }
  EXPECT_FALSE(watch.any());
}

}  // namespace
}  // namespace stoke::server
