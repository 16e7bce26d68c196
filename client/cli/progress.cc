#include "client/cli/progress.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/format.h"

namespace stoke::client {
namespace {

constexpr size_t kBarWidth = 24;
// Narrower than this, a bar says too little to be worth its room.
constexpr size_t kMinBarWidth = 10;
// Script jobs: their own scalars on the progress line, at most this many.
constexpr int kMaxScalarsShown = 4;

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace

ProgressView::ProgressView(std::FILE* out, bool terminal, std::string job_id,
                           std::function<int()> columns)
    : out_(out),
      terminal_(terminal),
      job_id_(std::move(job_id)),
      columns_(columns ? std::move(columns) : [out] {
        const int n = TerminalColumns(fileno(out));
        return n > 0 ? n : 80;
      }) {}

std::optional<double> ProgressView::Eta(const v1::MetricSample& previous,
                                        const v1::MetricSample& latest) {
  const double steps = static_cast<double>(latest.step()) - static_cast<double>(previous.step());
  const double seconds = latest.elapsed_seconds() - previous.elapsed_seconds();
  if (steps <= 0 || seconds <= 0 || latest.total_steps() < latest.step()) return std::nullopt;
  return static_cast<double>(latest.total_steps() - latest.step()) * seconds / steps;
}

std::vector<ProgressView::Segment> ProgressView::ProgressSegments() const {
  const v1::MetricSample& m = *latest_;
  const double fraction =
      m.total_steps() ? static_cast<double>(m.step()) / static_cast<double>(m.total_steps()) : 0;
  // Priorities: 0 is always shown; on a narrow terminal the highest go first.
  std::vector<Segment> segments;
  segments.push_back(
      {absl::StrFormat("step %d/%d (%.0f%%)", m.step(), m.total_steps(), fraction * 100), 0});
  segments.push_back({absl::StrFormat("loss %.4f", m.loss()), 0});
  segments.push_back({absl::StrCat(FormatRate(m.samples_per_second()), " samples/s"), 2});
  std::optional<double> eta;
  if (previous_) {
    eta = Eta(*previous_, m);
  } else if (m.step() > 0 && m.elapsed_seconds() > 0) {
    v1::MetricSample origin;  // step 0 at time 0
    eta = Eta(origin, m);
  }
  segments.push_back({absl::StrCat("ETA ", eta ? FormatClock(*eta) : "?"), 1});
  if (m.mfu() > 0) segments.push_back({absl::StrFormat("MFU %.0f%%", 100 * m.mfu()), 5});
  // Worth a user's attention only when the data pipeline is holding training back.
  if (m.data_wait_ratio() >= 0.05) {
    segments.push_back({absl::StrFormat("data wait %.0f%%", 100 * m.data_wait_ratio()), 3});
  }
  if (m.comm_wait_ratio() >= 0.05) {
    segments.push_back({absl::StrFormat("all-reduce wait %.0f%%", 100 * m.comm_wait_ratio()), 4});
  }
  if (m.samples_skipped() > 0) {
    segments.push_back({absl::StrFormat("%d damaged samples skipped", m.samples_skipped()), 4});
  }
  if (m.skipped_steps() > 0) {
    segments.push_back(
        {absl::StrFormat("fp16 skipped %d steps (scale %g)", m.skipped_steps(), m.loss_scale()),
         4});
  }
  // A script job's own scalars, the first few by name.
  const std::map<std::string, double> scalars(m.scalars().begin(), m.scalars().end());
  int shown = 0;
  for (const auto& [name, value] : scalars) {
    if (++shown > kMaxScalarsShown) break;
    segments.push_back({absl::StrCat(name, " ", absl::StrFormat("%.4g", value)), 6});
  }
  if (!device_summary_.empty()) segments.push_back({device_summary_, 6});
  for (int d : m.diagnoses()) segments.push_back({absl::StrCat("[", DiagnosisName(d), "]"), 3});
  return segments;
}

std::string ProgressView::ProgressText(size_t width) const {
  std::vector<Segment> segments = ProgressSegments();
  auto length = [&] {
    size_t total = 0;
    for (const Segment& s : segments) total += VisibleWidth(s.text) + 2;
    return total;
  };
  // Narrow: the least needed segments go, the last of equals first, then the bar.
  while (width > 0 && length() > width) {
    auto least = segments.end();
    for (auto it = segments.begin(); it != segments.end(); ++it) {
      if (it->priority > 0 && (least == segments.end() || it->priority >= least->priority)) {
        least = it;
      }
    }
    if (least == segments.end()) break;
    segments.erase(least);
  }
  std::string text;
  const size_t room = width == 0 ? 0 : width - std::min(width, length());
  // The bar is drawn only on a terminal (width > 0), as wide as there is room for.
  const size_t bar = std::min<size_t>(kBarWidth, room >= 3 ? room - 3 : 0);
  if (bar >= kMinBarWidth) {
    const double fraction = latest_->total_steps() ? static_cast<double>(latest_->step()) /
                                                         static_cast<double>(latest_->total_steps())
                                                   : 0;
    const auto filled = static_cast<size_t>(std::round(fraction * static_cast<double>(bar)));
    text = absl::StrCat("[", std::string(filled, '#'), std::string(bar - filled, '-'), "] ");
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    absl::StrAppend(&text, i > 0 ? "  " : "", segments[i].text);
  }
  return width > 0 ? CutToWidth(text, width) : text;
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
  // One column spare: a line that fills the last column wraps on some terminals.
  const std::string prefix = absl::StrCat("job ", job_id_, " ");
  const size_t columns = static_cast<size_t>(std::max(columns_(), 20));
  const size_t width = columns - 1 - std::min(columns - 1, VisibleWidth(prefix));
  std::fprintf(out_, "\r\033[K%s%s", prefix.c_str(),
               ProgressText(std::max<size_t>(width, 1)).c_str());
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
        std::fprintf(out_, "job %s %s\n", job_id_.c_str(), ProgressText(0).c_str());
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
