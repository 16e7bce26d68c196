// Where the CLI, the C++ client and workers dial the coordinator: one host:port, or a
// comma-separated list of them when a standby coordinator backs the leader
// ("10.0.0.1:50051,10.0.0.2:50051"). A list becomes one gRPC channel over every address
// with the pick_first policy: it connects to the first address that accepts, and, when
// that connection breaks, tries the list again. A standby does not listen, so the
// address that accepts is the leader's.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/statusor.h"

namespace stoke::security {

// The channel target for `addresses`: one address as it is (gRPC resolves it as before);
// a list as an ipv4: or ipv6: target of numeric addresses, host names resolved now, and
// `args` set so that TLS checks the certificate against the first entry's host name.
// INVALID_ARGUMENT naming `flag` for an empty entry, an entry without a port, a name that
// does not resolve or a list mixing IPv4 and IPv6.
// Whether `addresses` lists several coordinators. Calls over such a channel should wait
// for it to be ready (grpc::ClientContext::set_wait_for_ready): a call that fails fast
// while the leader changes leaves nothing polling the channel's new connection attempts,
// and the channel can then take many seconds to find the new leader.
inline bool IsCoordinatorList(const std::string& addresses) {
  return addresses.find(',') != std::string::npos;
}

absl::StatusOr<std::string> CoordinatorTarget(const std::string& addresses, const std::string& flag,
                                              grpc::ChannelArguments* args);

}  // namespace stoke::security
