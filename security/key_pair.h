// Whether a TLS private key belongs to a certificate, checked when the flags are read:
// gRPC would otherwise fail later with "cannot listen" (a server) or a failed handshake (a
// worker), saying nothing of which file is wrong. No gRPC, no Torch.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace stoke::security {

// OK when `key_pem` (an unencrypted PEM private key) is the key of the first certificate
// in `cert_pem`; INVALID_ARGUMENT naming the flag and the file otherwise.
absl::Status CheckKeyMatchesCertificate(const std::string& cert_pem, const std::string& cert_path,
                                        const std::string& key_pem, const std::string& key_path);

}  // namespace stoke::security
