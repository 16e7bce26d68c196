#include "security/token_hash.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace stoke::security {

absl::StatusOr<std::string> NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::UnavailableError("cannot draw random bytes for a token (OpenSSL RAND_bytes)");
  }
  return absl::StrCat(
      "stk_", absl::BytesToHexString(std::string(reinterpret_cast<char*>(bytes), sizeof(bytes))));
}

std::string HashToken(const std::string& token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return absl::StrCat("sha256:", absl::BytesToHexString(
                                     std::string(reinterpret_cast<char*>(digest), sizeof(digest))));
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace stoke::security
