// Reads the small files credentials live in (PEM certificates and keys, join tokens),
// refusing anything that is not a regular file of reasonable size, with errors that name
// the flag and the file.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace stoke::security {

// `what` names where the path came from, e.g. "--tls-cert".
absl::StatusOr<std::string> ReadCredentialFile(const std::string& path, const std::string& what);

// When `path` holds a secret (a private key, a token) that any user of the machine may
// read: a warning saying so and how to fix it, naming `what`; "" otherwise (or when it
// cannot be looked at: reading it will say why).
std::string ExposedSecretWarning(const std::string& path, const std::string& what);

// A file holding one token (a join token): its first line, trimmed.
absl::StatusOr<std::string> ReadTokenFromFile(const std::string& path, const std::string& what);

}  // namespace stoke::security
