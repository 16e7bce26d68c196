// How the CLI shows things: state names, durations, rates, aligned tables, JSON.
#pragma once

#include <google/protobuf/message.h>
#include <google/protobuf/timestamp.pb.h>

#include <string>
#include <vector>

#include "stoke/v1/coordinator.pb.h"

namespace stoke::client {

// "RUNNING" for JOB_STATE_RUNNING.
std::string ShortStateName(v1::JobState state);
std::string ShortWorkerState(v1::WorkerState state);
// "input-bound" for DIAGNOSIS_INPUT_BOUND (an int: repeated enum fields hold ints).
std::string DiagnosisName(int diagnosis);
// Why a rank straggles, briefly: "compute, +23%" or "waits in all-reduce, +12% of the step".
std::string StragglerCause(const v1::Straggler& straggler);
// "cuda:0", "cpu:1".
std::string DeviceLabel(const v1::Device& device);
// "1:02:03", "4:05", "0:07".
std::string FormatClock(double seconds);
// "3m ago", "2h ago".
std::string FormatAge(const google::protobuf::Timestamp& when);
// 12345.6 -> "12.3k", 4.2e6 -> "4.20M".
std::string FormatRate(double per_second);
std::string FormatBytes(uint64_t bytes);
// "0.42 s", "12.3 s", "1:02:03" past an hour.
std::string FormatSeconds(double seconds);
// What `stoke status` says of a job's start-up: "started in 1.42 s (submitted → first
// training step)", then a line with the parts the coordinator and the worker measured.
std::vector<std::string> DescribeStartup(const v1::Job& job);
// Text that came from elsewhere (workers' log lines, messages, server errors) made safe
// for a terminal: control characters but newline and tab shown as '?', so no escape
// sequence can move the cursor or recolour the screen.
std::string Printable(const std::string& text);
// Protobuf's JSON mapping with the .proto's field names, indented.
std::string ToJson(const google::protobuf::Message& message);
// The same on one line, for output read a line at a time (`stoke logs -o json`).
std::string ToJsonLine(const google::protobuf::Message& message);

// Columns of the terminal on `fd`; 0 when `fd` is no terminal.
int TerminalColumns(int fd);
// Characters a terminal shows for `text`: UTF-8 code points, with escape sequences
// ("\033[31m") not counted.
size_t VisibleWidth(const std::string& text);
// `text` cut to at most `width` shown characters; escape sequences are kept whole.
std::string CutToWidth(const std::string& text, size_t width);
// Whether what goes to `fd` may be coloured: a terminal, NO_COLOR unset or empty
// (https://no-color.org), and TERM not "dumb".
bool UseColour(int fd);
// The state's short name, coloured when `colour`: green SUCCEEDED, red FAILED, yellow
// while it waits or restarts, cyan while it runs.
std::string StateWord(v1::JobState state, bool colour);

// Columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // `max_width` > 0: columns are dropped from the right (the first two always stay) until
  // the table fits, and lines still too long are cut, so that no line wraps.
  std::string Render(size_t max_width = 0) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace stoke::client
