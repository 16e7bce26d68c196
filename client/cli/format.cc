#include "client/cli/format.h"

#include <google/protobuf/util/json_util.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoke::client {

std::string ShortStateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  return name.rfind("JOB_STATE_", 0) == 0 ? name.substr(10) : name;
}

std::string ShortWorkerState(v1::WorkerState state) {
  std::string name = v1::WorkerState_Name(state);
  return name.rfind("WORKER_STATE_", 0) == 0 ? name.substr(13) : name;
}

std::string DiagnosisName(int diagnosis) {
  std::string name = v1::Diagnosis_Name(static_cast<v1::Diagnosis>(diagnosis));
  if (name.rfind("DIAGNOSIS_", 0) == 0) name = name.substr(10);
  for (auto& c : name) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
  return name;
}

std::string StragglerCause(const v1::Straggler& straggler) {
  switch (straggler.cause()) {
    case v1::STRAGGLER_CAUSE_COMPUTE:
      return absl::StrFormat("compute, +%.0f%%", straggler.excess() * 100);
    case v1::STRAGGLER_CAUSE_ALLREDUCE:
      return absl::StrFormat("waits in all-reduce, +%.0f%% of the step", straggler.excess() * 100);
    default:
      return "unknown cause";
  }
}

std::string DeviceLabel(const v1::Device& device) {
  return absl::StrCat(device.type() == v1::DEVICE_TYPE_CUDA ? "cuda:" : "cpu:", device.index());
}

std::string FormatClock(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "?";
  long total = static_cast<long>(seconds + 0.5);
  long h = total / 3600, m = (total / 60) % 60, s = total % 60;
  return h > 0 ? absl::StrFormat("%d:%02d:%02d", h, m, s) : absl::StrFormat("%d:%02d", m, s);
}

std::string FormatSeconds(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) {
    return "?";
  }
  if (seconds < 10) {
    return absl::StrFormat("%.2f s", seconds);
  }
  if (seconds < 3600) {
    return absl::StrFormat("%.1f s", seconds);
  }
  return FormatClock(seconds);
}

std::vector<std::string> DescribeStartup(const v1::Job& job) {
  if (!job.has_startup()) {
    return {};
  }
  const v1::JobStartup& startup = job.startup();
  const v1::WorkerStartup& worker = startup.worker();
  // Attempts after the first start from their return to the queue, not from the submit.
  const std::string from = job.attempt() <= 1 ? "submitted" : "re-queued";
  if (job.spec().has_command()) {
    // A script's start-up is its own (imports, data, model): up to its first report.
    return {absl::StrCat("started in ", FormatSeconds(startup.seconds()), " (", from,
                         " → first report; queued/scheduling ",
                         FormatSeconds(startup.queued_seconds()), ", the program ",
                         FormatSeconds(worker.process_seconds()), ")")};
  }
  std::vector<std::string> lines = {absl::StrCat("started in ", FormatSeconds(startup.seconds()),
                                                 " (", from, " → first training step)")};
  std::string setup;
  if (worker.process_seconds() > 0) {
    setup = absl::StrCat("training process ", FormatSeconds(worker.process_seconds()), ", ");
  }
  absl::StrAppend(&setup, "data ", FormatSeconds(worker.data_seconds()), ", model ",
                  FormatSeconds(worker.model_seconds()));
  if (worker.compile_seconds() > 0) {
    absl::StrAppend(&setup, ", compile ", FormatSeconds(worker.compile_seconds()));
  }
  if (worker.batch_search_seconds() > 0) {
    absl::StrAppend(&setup, ", batch search ", FormatSeconds(worker.batch_search_seconds()));
  }
  lines.push_back(absl::StrCat(
      "queued/scheduling ", FormatSeconds(startup.queued_seconds()), ", worker set-up ",
      FormatSeconds(std::max(0.0, worker.seconds() - worker.first_step_seconds())), " (", setup,
      "), first step ", FormatSeconds(worker.first_step_seconds())));
  return lines;
}

std::string FormatAge(const google::protobuf::Timestamp& when) {
  if (when.seconds() == 0) return "-";
  long age = static_cast<long>(std::time(nullptr)) - static_cast<long>(when.seconds());
  if (age < 0) age = 0;
  if (age < 60) return absl::StrCat(age, "s ago");
  if (age < 3600) return absl::StrCat(age / 60, "m ago");
  if (age < 86400) return absl::StrCat(age / 3600, "h ago");
  return absl::StrCat(age / 86400, "d ago");
}

std::string FormatRate(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2fG", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e4) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

std::string FormatBytes(uint64_t bytes) {
  const double gib = static_cast<double>(bytes) / (1024.0 * 1024 * 1024);
  if (gib >= 1) return absl::StrFormat("%.1f GiB", gib);
  return absl::StrFormat("%.0f MiB", static_cast<double>(bytes) / (1024.0 * 1024));
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

std::string Table::Render(size_t max_width) const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], VisibleWidth(row[i]));
    }
  }
  size_t shown = widths.size();
  auto total = [&](size_t columns) {
    size_t sum = 0;
    for (size_t i = 0; i < columns; ++i) sum += widths[i] + (i + 1 < columns ? 2 : 0);
    return sum;
  };
  while (max_width > 0 && shown > 2 && total(shown) > max_width) --shown;
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    const size_t cells = std::min(row.size(), shown);
    for (size_t i = 0; i < cells; ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < cells) line.append(widths[i] - VisibleWidth(row[i]) + 2, ' ');
    }
    absl::StrAppend(&out, max_width > 0 ? CutToWidth(line, max_width) : line, "\n");
  }
  return out;
}

int TerminalColumns(int fd) {
  winsize size{};
  if (!isatty(fd) || ioctl(fd, TIOCGWINSZ, &size) != 0) return 0;
  return size.ws_col;
}

namespace {

// The length of the escape sequence at text[i] ("\033[...X"), or 0 if none starts there.
size_t EscapeLength(const std::string& text, size_t i) {
  if (text[i] != '\033' || i + 1 >= text.size() || text[i + 1] != '[') return 0;
  size_t end = i + 2;
  while (end < text.size() && !(text[end] >= 0x40 && text[end] <= 0x7E)) ++end;
  return end < text.size() ? end - i + 1 : text.size() - i;
}

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

size_t VisibleWidth(const std::string& text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    if (const size_t escape = EscapeLength(text, i)) {
      i += escape;
      continue;
    }
    if (!IsContinuationByte(text[i])) ++width;
    ++i;
  }
  return width;
}

std::string CutToWidth(const std::string& text, size_t width) {
  size_t shown = 0;
  for (size_t i = 0; i < text.size();) {
    if (const size_t escape = EscapeLength(text, i)) {
      i += escape;
      continue;
    }
    if (!IsContinuationByte(text[i]) && ++shown > width) return text.substr(0, i);
    ++i;
  }
  return text;
}

bool UseColour(int fd) {
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  return isatty(fd) && (no_color == nullptr || *no_color == '\0') &&
         (term == nullptr || std::string_view(term) != "dumb");
}

std::string StateWord(v1::JobState state, bool colour) {
  std::string name = ShortStateName(state);
  if (!colour) return name;
  const char* code = nullptr;
  switch (state) {
    case v1::JOB_STATE_SUCCEEDED:
      code = "32";  // green
      break;
    case v1::JOB_STATE_FAILED:
      code = "31";  // red
      break;
    case v1::JOB_STATE_PENDING:
    case v1::JOB_STATE_SCHEDULED:
    case v1::JOB_STATE_RESTARTING:
    case v1::JOB_STATE_PREEMPTED:
      code = "33";  // yellow
      break;
    case v1::JOB_STATE_RUNNING:
      code = "36";  // cyan
      break;
    default:
      return name;
  }
  return absl::StrCat("\033[", code, "m", name, "\033[0m");
}

std::string ToJsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

std::string Printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xC2 && i + 1 < text.size() &&
                    static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9F;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F || c1) {
      out.push_back('?');
      if (c1) ++i;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace stoke::client
