// gRPC credentials from Stoke's TLS flags, for the coordinator's server and for the
// channels the CLI, the C++ client and workers open to it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace stoke::security {

struct ServerTlsOptions {
  std::string cert_path;       // --tls-cert: PEM certificate chain
  std::string key_path;        // --tls-key: its PEM private key
  std::string client_ca_path;  // --client-ca: verify client certificates against it
};

// Plaintext when no certificate is given. With a client CA, clients may present a
// certificate and must, if they do, present one the CA signed; AccessControl decides who
// needs one.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options);

struct ChannelTlsOptions {
  // PEM roots to verify the coordinator with; empty for plaintext.
  std::string ca_path;
  // A client certificate and key for mutual TLS (workers); both or neither.
  std::string cert_path;
  std::string key_path;
};

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ChannelTlsOptions& options);

// Whether `host:port` listens on or dials the loopback interface only.
bool IsLoopbackAddress(const std::string& address);

}  // namespace stoke::security
