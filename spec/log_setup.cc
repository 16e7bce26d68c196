#include "spec/log_setup.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

namespace stoke::spec {
namespace {

// %* in a pattern: the message, escaped for a JSON string.
class JsonMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm& /*time*/,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped = JsonEscaped(std::string(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessage>();
  }
};

}  // namespace

std::string JsonEscaped(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char code[8];
          std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned char>(c));
          out += code;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void AddLogFlags(CLI::App& app, LogFlags& flags) {
  // spdlog takes an unknown name for "off": a typo must not silence the log.
  app.add_option("--log-level", flags.level, "trace, debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--log-format", flags.format,
                 "text, or json: one object a line ({\"time\", \"level\", \"message\"})")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
}

void ApplyLogFlags(const LogFlags& flags) {
  spdlog::set_level(spdlog::level::from_str(flags.level));
  if (flags.format != "json") return;
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc,
                                                               std::string("\n"));
  formatter->add_flag<JsonMessage>('*').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","message":"%*"})");
  spdlog::set_formatter(std::move(formatter));
}

}  // namespace stoke::spec
