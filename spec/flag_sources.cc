#include "spec/flag_sources.h"

#include <algorithm>
#include <cctype>
#include <iostream>

namespace stoke::spec {

void AddFlagSources(CLI::App& app, const std::string& prefix) {
  for (CLI::Option* option : app.get_options()) {
    const auto& names = option->get_lnames();
    if (names.empty() || !option->get_envname().empty() || names.front() == "help") continue;
    std::string variable = prefix + names.front();
    std::transform(variable.begin(), variable.end(), variable.begin(), [](unsigned char c) {
      return c == '-' ? '_' : static_cast<char>(std::toupper(c));
    });
    option->envname(variable);
  }
  app.set_config("--config", "",
                 "Read flags from this TOML file (`heartbeat-timeout = 30`, "
                 "`data-root = [\"/a\", \"/b\"]`); flags given here win over it, and it over "
                 "STOKE_* variables");
  app.allow_config_extras(CLI::config_extras_mode::error);
}

std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse KEY" for a key no flag has.
    const std::string said = e.what();
    const std::string prefix = "INI was not able to parse ";
    const std::string file = app.get_config_ptr() ? app.get_config_ptr()->as<std::string>() : "";
    if (said.rfind(prefix, 0) == 0) {
      std::cerr << "--config " << file << ": " << said.substr(prefix.size())
                << " is no flag of this program (see --help)\n";
      return e.get_exit_code();
    }
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

}  // namespace stoke::spec
