// A job's log budget: what is kept of a flood, what its log says was dropped, and that a
// quiet job loses nothing.
#include "server/core/log_budget.h"

#include <gtest/gtest.h>

#include <string>

namespace stoke::server {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

google::protobuf::RepeatedPtrField<v1::LogLine> Lines(int count, const std::string& text) {
  google::protobuf::RepeatedPtrField<v1::LogLine> lines;
  for (int i = 0; i < count; ++i) lines.Add()->set_text(text);
  return lines;
}

// Lines of `text` 100 bytes long in all (text and row): easy sums.
const std::string kLine(100 - 32, 'y');

TEST(LogBudget, AJobWithinItsRateLosesNothing) {
  LogBudget budget({/*bytes_per_second=*/1000, /*burst_bytes=*/1000, /*total_bytes=*/0});
  uint64_t stored = 0;
  for (int second = 0; second < 60; ++second) {
    auto admitted = budget.Admit("7", stored, kStart + absl::Seconds(second), Lines(10, kLine));
    EXPECT_EQ(admitted.lines.size(), 10u) << "second " << second;
    EXPECT_EQ(admitted.dropped_lines, 0u);
    stored += admitted.bytes;
  }
  EXPECT_EQ(stored, 60u * 1000);
  EXPECT_TRUE(budget.Finish("7").empty());
}

TEST(LogBudget, AFloodKeepsTheBurstThenTheRateAndSaysHowManyWereDropped) {
  LogBudget budget({1000, 5000, 0});
  auto first = budget.Admit("7", 0, kStart, Lines(12'345 + 50, kLine));
  ASSERT_EQ(first.lines.size(), 51u);  // the burst's 50, then the notice
  EXPECT_EQ(first.bytes, 5000u);
  EXPECT_EQ(first.dropped_lines, 12'345u);
  EXPECT_EQ(first.lines.back().text(),
            "stoke: 12,345 log lines (1.2 MiB) dropped: the job printed faster than its log "
            "budget of 1000 bytes/s (stoke-coordinator --job-log-rate)");
  // A second later: the second's 10 lines, the rest dropped and said only 10 s after the
  // last notice.
  auto next = budget.Admit("7", first.bytes, kStart + absl::Seconds(1), Lines(100, kLine));
  EXPECT_EQ(next.lines.size(), 10u);
  EXPECT_EQ(next.dropped_lines, 90u);
  // Once it is quiet again, the notice comes before the first line kept.
  auto quiet = budget.Admit("7", 0, kStart + absl::Seconds(3), Lines(1, "epoch 2 done"));
  ASSERT_EQ(quiet.lines.size(), 2u);
  EXPECT_EQ(quiet.lines[0].text().rfind("stoke: 90 log lines (8.8 KiB) dropped", 0), 0u)
      << quiet.lines[0].text();
  EXPECT_EQ(quiet.lines[1].text(), "epoch 2 done");
}

TEST(LogBudget, APastTotalDropsEverythingAndTheAttemptsEndSaysSo) {
  LogBudget budget({0, 0, /*total_bytes=*/1000});
  auto kept = budget.Admit("7", 900, kStart, Lines(3, kLine));
  ASSERT_EQ(kept.lines.size(), 2u);  // one line fits; the notice of the other two
  EXPECT_EQ(kept.bytes, 100u);
  EXPECT_EQ(kept.lines[1].text(),
            "stoke: 2 log lines (200 bytes) dropped: the job's log has reached its total of "
            "1000 bytes (stoke-coordinator --job-log-max)");
  // Within 10 s, dropped lines wait for the next notice: the attempt's end says them.
  EXPECT_TRUE(budget.Admit("7", 1000, kStart + absl::Seconds(1), Lines(4, kLine)).lines.empty());
  auto end = budget.Finish("7");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0].text().rfind("stoke: 4 log lines (400 bytes) dropped", 0), 0u);
  EXPECT_TRUE(budget.Finish("7").empty());
}

TEST(LogBudget, JobsHaveBudgetsOfTheirOwn) {
  LogBudget budget({1000, 1000, 0});
  EXPECT_EQ(budget.Admit("7", 0, kStart, Lines(100, kLine)).lines.size(), 11u);
  EXPECT_EQ(budget.Admit("8", 0, kStart, Lines(5, kLine)).lines.size(), 5u);
}

}  // namespace
}  // namespace stoke::server
