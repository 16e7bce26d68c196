#include "security/grpc_credentials.h"

#include "absl/strings/str_cat.h"
#include "security/credential_file.h"
#include "security/key_pair.h"

namespace stoke::security {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options) {
  if (options.cert_path.empty() != options.key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (options.cert_path.empty()) {
    if (!options.client_ca_path.empty()) {
      return absl::InvalidArgumentError("--client-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  auto cert = ReadCredentialFile(options.cert_path, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadCredentialFile(options.key_path, "--tls-key");
  if (!key.ok()) return key.status();
  if (auto s = CheckKeyMatchesCertificate(*cert, options.cert_path, *key, options.key_path);
      !s.ok()) {
    return s;
  }
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  ssl.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  if (!options.client_ca_path.empty()) {
    auto ca = ReadCredentialFile(options.client_ca_path, "--client-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ChannelTlsOptions& options) {
  if (options.cert_path.empty() != options.key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (options.ca_path.empty()) {
    if (!options.cert_path.empty()) {
      return absl::InvalidArgumentError("--tls-cert needs --tls-ca (the coordinator's CA)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  auto ca = ReadCredentialFile(options.ca_path, "--tls-ca");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  if (!options.cert_path.empty()) {
    auto cert = ReadCredentialFile(options.cert_path, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadCredentialFile(options.key_path, "--tls-key");
    if (!key.ok()) return key.status();
    if (auto s = CheckKeyMatchesCertificate(*cert, options.cert_path, *key, options.key_path);
        !s.ok()) {
      return s;
    }
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

bool IsLoopbackAddress(const std::string& address) {
  // A unix socket ("unix:/run/stoke.sock", "unix:relative") is on this host, whatever
  // follows its own colon.
  if (address.rfind("unix:", 0) == 0) return true;
  const auto colon = address.rfind(':');
  const std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  return host == "localhost" || host == "[::1]" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace stoke::security
