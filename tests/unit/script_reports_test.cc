// What a script job reports (stoke.report's "key=value" lines) becomes the job's metric
// samples: Stoke's own fields where the names are its own, the loss averaged over each
// window, samples turned into samples/s, and a bounded set of scalars of the job's own.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "proto/stoke/v1/limits.h"
#include "worker/link/script_process.h"

namespace stoke::worker {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

TEST(ScriptReports, StokesOwnFieldsAndTheJobsScalarsMakeOneSample) {
  const Clock::time_point start = Clock::now();
  ReportWindow window(/*world_size=*/2, start);
  EXPECT_FALSE(window.Take(start + seconds(1)).has_value());  // nothing reported yet
  EXPECT_EQ(window.Add("step=10 loss=1.0 samples=64 lr=0.001 total_steps=100"), "");
  EXPECT_EQ(window.Add("step=20 loss=3.0 samples=64 accuracy=0.75 grad_norm=2.5"), "");
  const auto sample = window.Take(start + seconds(2));
  ASSERT_TRUE(sample.has_value());
  EXPECT_EQ(sample->step, 20u);
  EXPECT_EQ(sample->total_steps, 100u);
  EXPECT_DOUBLE_EQ(sample->loss, 2.0);                  // the window's mean
  EXPECT_DOUBLE_EQ(sample->samples_per_second, 128.0);  // 128 samples x 2 ranks over 2 s
  EXPECT_DOUBLE_EQ(sample->learning_rate, 0.001);
  EXPECT_DOUBLE_EQ(sample->elapsed_seconds, 2.0);
  EXPECT_DOUBLE_EQ(sample->scalars.at("accuracy"), 0.75);
  EXPECT_DOUBLE_EQ(sample->scalars.at("grad_norm"), 2.5);

  // The next window keeps every name's latest value, with a loss of its own.
  window.Add("step=30 loss=0.5");
  const auto next = window.Take(start + seconds(3));
  ASSERT_TRUE(next.has_value());
  EXPECT_DOUBLE_EQ(next->loss, 0.5);
  EXPECT_DOUBLE_EQ(next->scalars.at("accuracy"), 0.75);
  EXPECT_EQ(next->step, 30u);
}

TEST(ScriptReports, NamesAreBoundedAndBadValuesAreSaidOnce) {
  ReportWindow window(1, Clock::now());
  std::string notes;
  for (size_t i = 0; i < v1::kMaxReportedScalars + 5; ++i) {
    notes += window.Add("m" + std::to_string(i) + "=1");
  }
  EXPECT_NE(notes.find("at most 32 names"), std::string::npos) << notes;
  EXPECT_EQ(window.Add("m40=1"), "");  // said once
  EXPECT_NE(window.Add("bad-name=1").find("Python identifiers"), std::string::npos);
  EXPECT_NE(window.Add("loss=abc").find("not a number"), std::string::npos);
  EXPECT_EQ(window.Add("loss=xyz"), "");
  const auto sample = window.Take(Clock::now());
  ASSERT_TRUE(sample.has_value());
  EXPECT_EQ(sample->scalars.size(), v1::kMaxReportedScalars);
  EXPECT_EQ(sample->scalars.count("m0"), 1u);
  EXPECT_EQ(sample->scalars.count("m40"), 0u);
  EXPECT_EQ(sample->loss, 0);  // "abc" was no loss
}

}  // namespace
}  // namespace stoke::worker
