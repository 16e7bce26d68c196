// Where the CLI finds its coordinator and credentials: flags, then the environment
// (STOKE_ADDRESS, STOKE_TOKEN, STOKE_TLS_CA), then ~/.config/stoke/config.yaml
// ($XDG_CONFIG_HOME/stoke/config.yaml), e.g.
//
//   address: stoke.example.org:50051
//   token: stk_...
//   tls_ca: /etc/stoke/ca.pem
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace stoke::client {

struct CliConfig {
  std::string address;
  std::string token;
  std::string tls_ca;
};

// The config file's values (empty where it has none, or when there is no file). An
// unreadable file, an unknown key or a value that is not a string is an error naming the
// file.
absl::StatusOr<CliConfig> ReadCliConfigFile(const std::string& path);
// The default path: $XDG_CONFIG_HOME/stoke/config.yaml, else ~/.config/stoke/config.yaml.
std::string DefaultCliConfigPath();

}  // namespace stoke::client
