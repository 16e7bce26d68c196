// How a Stoke program logs: --log-level (a name spdlog knows; a typo is refused, since
// spdlog would take it for "off") and --log-format: text (spdlog's lines) or json (one
// object a line, {"time": UTC ISO 8601, "level", "message"}, for log shippers).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace stoke::spec {

struct LogFlags {
  std::string level = "info";
  std::string format = "text";
};

// Adds --log-level and --log-format to `app`, writing into `flags`.
void AddLogFlags(CLI::App& app, LogFlags& flags);
// Sets spdlog's default logger to them (after parsing).
void ApplyLogFlags(const LogFlags& flags);

// `text` as a JSON string's contents: quotes, backslashes and control characters escaped.
std::string JsonEscaped(const std::string& text);

}  // namespace stoke::spec
