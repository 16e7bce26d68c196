// Where a Stoke program's flags come from besides its command line: a --config file (TOML,
// CLI11's reader: `name = value` lines, a flag's long name without its dashes) and one
// environment variable per flag (the program's prefix and the long name in capitals,
// dashes as underscores: the coordinator's --heartbeat-timeout is
// STOKE_COORDINATOR_HEARTBEAT_TIMEOUT). A deployment writes a file or an environment, not
// a command line. The command line wins over the file, the file over the environment
// (CLI11's order: the file is read first, a variable only fills what is still unset). A key the
// file does not know is refused, as a mistyped flag is. Each program has a prefix of its own: local
// workers inherit the coordinator's environment, and the coordinator's --tls-cert (its server
// certificate) must not become theirs.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace stoke::spec {

// Call once every option is added, before parsing: gives each long option without an
// environment variable of its own one named `prefix` + NAME ("STOKE_COORDINATOR_"), and
// adds --config.
void AddFlagSources(CLI::App& app, const std::string& prefix);

// Parses the command line (and the file and variables): nullopt to go on, or the exit
// status after --help or an error has been printed. A key of the file that is no flag is
// named as such.
std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv);

}  // namespace stoke::spec
