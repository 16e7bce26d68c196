#include "client/cli/progress.h"

#include <cmath>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/format.h"

namespace stoke::client {
namespace {

constexpr int kBarWidth = 24;
// Script jobs: their own scalars on the progress line, at most this many.
constexpr int kMaxScalarsShown = 4;

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace

std::optional<double> ProgressView::Eta(const v1::MetricSample& previous,
                                        const v1::MetricSample& latest) {
  const double steps = static_cast<double>(latest.step()) - static_cast<double>(previous.step());
  const double seconds = latest.elapsed_seconds() - previous.elapsed_seconds();
  if (steps <= 0 || seconds <= 0 || latest.total_steps() < latest.step()) return std::nullopt;
  return static_cast<double>(latest.total_steps() - latest.step()) * seconds / steps;
}

std::string ProgressView::ProgressText(bool with_bar) const {
  const v1::MetricSample& m = *latest_;
  const double fraction =
      m.total_steps() ? static_cast<double>(m.step()) / static_cast<double>(m.total_steps()) : 0;
  std::string text;
  if (with_bar) {
    int filled = static_cast<int>(std::round(fraction * kBarWidth));
    text = absl::StrCat("[", std::string(filled, '#'), std::string(kBarWidth - filled, '-'), "] ");
  }
  absl::StrAppend(&text, absl::StrFormat("step %d/%d (%.0f%%)  loss %.4f  %s samples/s", m.step(),
                                         m.total_steps(), fraction * 100, m.loss(),
                                         FormatRate(m.samples_per_second())));
  std::optional<double> eta;
  if (previous_) {
    eta = Eta(*previous_, m);
  } else if (m.step() > 0 && m.elapsed_seconds() > 0) {
    v1::MetricSample origin;  // step 0 at time 0
    eta = Eta(origin, m);
  }
  absl::StrAppend(&text, "  ETA ", eta ? FormatClock(*eta) : "?");
  if (m.mfu() > 0) absl::StrAppend(&text, absl::StrFormat("  MFU %.0f%%", 100 * m.mfu()));
  // Worth a user's attention only when the data pipeline is holding training back.
  if (m.data_wait_ratio() >= 0.05) {
    absl::StrAppend(&text, absl::StrFormat("  data wait %.0f%%", 100 * m.data_wait_ratio()));
  }
  if (m.comm_wait_ratio() >= 0.05) {
    absl::StrAppend(&text, absl::StrFormat("  all-reduce wait %.0f%%", 100 * m.comm_wait_ratio()));
  }
  if (m.samples_skipped() > 0) {
    absl::StrAppend(&text, absl::StrFormat("  %d damaged samples skipped", m.samples_skipped()));
  }
  if (m.skipped_steps() > 0) {
    absl::StrAppend(&text, absl::StrFormat("  fp16 skipped %d steps (scale %g)", m.skipped_steps(),
                                           m.loss_scale()));
  }
  // A script job's own scalars, the first few by name: the line stays one line.
  const std::map<std::string, double> scalars(m.scalars().begin(), m.scalars().end());
  int shown = 0;
  for (const auto& [name, value] : scalars) {
    if (++shown > kMaxScalarsShown) break;
    absl::StrAppend(&text, "  ", name, " ", absl::StrFormat("%.4g", value));
  }
  if (!device_summary_.empty()) absl::StrAppend(&text, "  ", device_summary_);
  for (int d : m.diagnoses()) absl::StrAppend(&text, "  [", DiagnosisName(d), "]");
  return text;
}

std::string ProgressView::DeviceSummary(const v1::Job& job, const v1::Cluster& cluster) {
  double utilization = 0;
  uint64_t memory = 0;
  int devices = 0;
  bool gpu = false;
  for (const auto& p : job.placement()) {
    for (const auto& w : cluster.workers()) {
      if (w.id() != p.worker_id() || !w.has_device_stats()) continue;
      utilization += w.device_stats().utilization();
      memory += w.device_stats().memory_used_bytes();
      gpu = gpu || w.device().type() == v1::DEVICE_TYPE_CUDA;
      ++devices;
    }
  }
  if (devices == 0) return "";
  return absl::StrFormat("%s %.0f%%, %s", gpu ? "gpu" : "cpu", 100 * utilization / devices,
                         FormatBytes(memory));
}

std::string ProgressView::EvalText(const v1::MetricSample& sample) {
  const v1::EvalResult& e = sample.eval();
  std::string text = absl::StrFormat("eval at step %d: loss %.4f", sample.step(), e.loss());
  if (e.accuracy() > 0)
    absl::StrAppend(&text, absl::StrFormat(", accuracy %.2f%%", 100 * e.accuracy()));
  if (e.perplexity() > 0)
    absl::StrAppend(&text, absl::StrFormat(", perplexity %.2f", e.perplexity()));
  absl::StrAppend(&text, " on ", e.samples(), " held-out samples");
  return text;
}

void ProgressView::PrintAbove(const std::string& line) {
  if (terminal_ && line_drawn_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "%s\n", line.c_str());
  if (terminal_ && latest_ && !final_state_) DrawLine();
  std::fflush(out_);
}

void ProgressView::DrawLine() {
  std::fprintf(out_, "\r\033[Kjob %s %s", job_id_.c_str(), ProgressText(/*with_bar=*/true).c_str());
  line_drawn_ = true;
  std::fflush(out_);
}

void ProgressView::OnEvent(const v1::JobEvent& event) {
  switch (event.kind_case()) {
    case v1::JobEvent::kStateChange: {
      const auto& change = event.state_change();
      std::string line = absl::StrCat("job ", job_id_, " ", ShortStateName(change.state()));
      if (change.attempt() > 1) absl::StrAppend(&line, " (attempt ", change.attempt(), ")");
      if (!change.message().empty()) absl::StrAppend(&line, ": ", Printable(change.message()));
      if (IsFinal(change.state())) {
        final_state_ = change.state();
        // Leave the last progress line on screen, then the verdict under it.
        if (terminal_ && line_drawn_) std::fputs("\n", out_);
        line_drawn_ = false;
        std::fprintf(out_, "%s\n", line.c_str());
        std::fflush(out_);
        return;
      }
      PrintAbove(line);
      break;
    }
    case v1::JobEvent::kMetrics:
      if (event.metrics().rank() != 0) break;
      if (event.metrics().has_eval()) {
        PrintAbove(absl::StrCat("job ", job_id_, " ", EvalText(event.metrics())));
        break;
      }
      previous_ = latest_;
      latest_ = event.metrics();
      if (terminal_) {
        DrawLine();
      } else {
        std::fprintf(out_, "job %s %s\n", job_id_.c_str(),
                     ProgressText(/*with_bar=*/false).c_str());
        std::fflush(out_);
      }
      break;
    case v1::JobEvent::kLog:
      // The worker logs each evaluation too; its metrics event is printed already, above.
      if (absl::StartsWith(event.log().text(), "eval at step")) break;
      PrintAbove(absl::StrCat("  [rank ", event.log().rank(), "] ", Printable(event.log().text())));
      break;
    default:
      break;
  }
}

void ProgressView::OnReconnect(const std::string& why) {
  PrintAbove(absl::StrCat("(connection lost: ", why, "; reconnecting)"));
}

void ProgressView::Close() {
  if (terminal_ && line_drawn_) std::fputs("\n", out_);
  line_drawn_ = false;
  std::fflush(out_);
}

}  // namespace stoke::client
