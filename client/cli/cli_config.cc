#include "client/cli/cli_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "security/credential_file.h"

namespace stoke::client {

std::string DefaultCliConfigPath() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/stoke/config.yaml";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.config/stoke/config.yaml";
  }
  return "";
}

absl::StatusOr<CliConfig> ReadCliConfigFile(const std::string& path) {
  CliConfig config;
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return config;
  auto text = security::ReadCredentialFile(path, "config");
  if (!text.ok()) return text.status();
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (root.IsNull()) return config;
  if (!root.IsMap()) return absl::InvalidArgumentError(path + ": expected a mapping of keys");
  for (const auto& item : root) {
    const std::string key = item.first.as<std::string>();
    std::string* field = key == "address"  ? &config.address
                         : key == "token"  ? &config.token
                         : key == "tls_ca" ? &config.tls_ca
                                           : nullptr;
    const int line = item.first.Mark().line + 1;
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", key,
                                                     ": unknown key; expected address, token "
                                                     "or tls_ca"));
    }
    if (!item.second.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line, ": ", key, ": expected a string"));
    }
    *field = item.second.as<std::string>();
  }
  if (!config.tls_ca.empty() && std::filesystem::path(config.tls_ca).is_relative()) {
    config.tls_ca = (std::filesystem::path(path).parent_path() / config.tls_ca).string();
  }
  return config;
}

}  // namespace stoke::client
