// Bearer tokens: how they are made and how they are kept. A token is shown once, when it
// is made; only its SHA-256 is written anywhere (the coordinator's tokens file), so a
// leaked tokens file gives nobody a way in.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace stoke::security {

// A new random token: "stk_" and 64 hex digits (256 bits from the system's CSPRNG).
absl::StatusOr<std::string> NewToken();

// "sha256:" and the token's SHA-256 in lowercase hex.
std::string HashToken(const std::string& token);

// Compares in time independent of where the strings first differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace stoke::security
