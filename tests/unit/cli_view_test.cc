// What the CLI draws on a terminal: live lines that fit its width and never wrap, tables
// that drop columns to fit, widths counted in characters shown (not bytes or escapes).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/cli/format.h"
#include "client/cli/progress.h"

namespace stoke::client {
namespace {

// A training sample with every optional part of the live line set.
v1::JobEvent BusySample(uint64_t step) {
  v1::JobEvent event;
  auto* m = event.mutable_metrics();
  m->set_step(step);
  m->set_total_steps(1000000);
  m->set_loss(2.345678);
  m->set_samples_per_second(123456.7);
  m->set_elapsed_seconds(static_cast<double>(step) / 10);
  m->set_mfu(0.41);
  m->set_data_wait_ratio(0.3);
  m->set_comm_wait_ratio(0.2);
  m->set_samples_skipped(12);
  m->set_skipped_steps(3);
  m->set_loss_scale(1024);
  (*m->mutable_scalars())["grad_norm"] = 1.25;
  (*m->mutable_scalars())["tokens_seen"] = 123456789;
  m->add_diagnoses(v1::DIAGNOSIS_INPUT_BOUND);
  return event;
}

// Everything a ProgressView wrote, split at its redraws ("\r\033[K") and newlines.
std::vector<std::string> DrawnLines(int columns, const std::string& job_id) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  {
    ProgressView view(out, /*terminal=*/true, job_id, [columns] { return columns; });
    view.SetDeviceSummary("gpu 97%, 61.2 GiB");
    for (uint64_t step : {1000u, 2000u, 3000u}) view.OnEvent(BusySample(step));
    view.Close();
  }
  std::fclose(out);
  std::string text(buffer, size);
  free(buffer);
  std::vector<std::string> lines;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar("\r\n"))) {
    std::string line(part);
    if (line.rfind("\033[K", 0) == 0) line = line.substr(3);
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

TEST(LiveLine, FitsEveryWidthWithAColumnSpareAndKeepsStepAndLoss) {
  for (int columns : {400, 120, 80, 60, 50}) {
    const std::vector<std::string> lines = DrawnLines(columns, "12345");
    ASSERT_FALSE(lines.empty());
    for (const std::string& line : lines) {
      EXPECT_LT(VisibleWidth(line), static_cast<size_t>(columns)) << columns << ": " << line;
      EXPECT_NE(line.find("loss 2.3457"), std::string::npos) << line;
    }
    EXPECT_NE(lines.back().find("step 3000/1000000"), std::string::npos) << lines.back();
  }
  // Wide, nothing is left out; at 80 columns the least needed parts go first.
  const std::string wide = DrawnLines(400, "7").back();
  EXPECT_NE(wide.find("MFU 41%"), std::string::npos) << wide;
  EXPECT_NE(wide.find("ETA"), std::string::npos) << wide;
  EXPECT_NE(wide.find("] step"), std::string::npos) << "no bar: " << wide;
  const std::string narrow = DrawnLines(80, "7").back();
  EXPECT_NE(narrow.find("ETA"), std::string::npos) << narrow;
  EXPECT_EQ(narrow.find("gpu 97%"), std::string::npos) << narrow;
}

TEST(LiveLine, APipeGetsWholeLinesWithoutABar) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  {
    ProgressView view(out, /*terminal=*/false, "7", [] { return 40; });
    view.OnEvent(BusySample(1000));
  }
  std::fclose(out);
  const std::string text(buffer, size);
  free(buffer);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find("] step"), std::string::npos);
  EXPECT_NE(text.find("tokens_seen"), std::string::npos) << "a pipe's line was cut: " << text;
}

TEST(TableRender, DropsColumnsFromTheRightThenCutsSoNoLineWraps) {
  Table table({"JOB", "NAME", "STATE", "MESSAGE"});
  table.AddRow(
      {"1", "résumé-net", StateWord(v1::JOB_STATE_FAILED, /*colour=*/true), std::string(100, 'x')});
  const std::string fitted = table.Render(30);
  for (absl::string_view line : absl::StrSplit(fitted, '\n', absl::SkipEmpty())) {
    EXPECT_LE(VisibleWidth(std::string(line)), 30u) << line;
  }
  EXPECT_EQ(fitted.find("MESSAGE"), std::string::npos) << fitted;
  EXPECT_NE(fitted.find("\033[31mFAILED\033[0m"), std::string::npos) << "colour cut: " << fitted;
  // Unbounded, every column stays.
  EXPECT_NE(table.Render().find(std::string(100, 'x')), std::string::npos);
}

TEST(TextWidth, CountsCharactersShownNotBytesOrEscapes) {
  EXPECT_EQ(VisibleWidth("résumé"), 6u);
  EXPECT_EQ(VisibleWidth("\033[32mSUCCEEDED\033[0m"), 9u);
  EXPECT_EQ(CutToWidth("résumé", 3), "rés");
  EXPECT_EQ(CutToWidth("\033[31mFAILED\033[0m now", 6), "\033[31mFAILED\033[0m");
  EXPECT_EQ(StateWord(v1::JOB_STATE_SUCCEEDED, /*colour=*/false), "SUCCEEDED");
}

}  // namespace
}  // namespace stoke::client
