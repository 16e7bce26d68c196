#include "security/coordinator_target.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace stoke::security {
namespace {

struct Endpoint {
  std::string host;  // without brackets
  std::string port;
};

absl::StatusOr<Endpoint> SplitHostPort(const std::string& entry, const std::string& where) {
  Endpoint endpoint;
  if (!entry.empty() && entry[0] == '[') {
    const auto close = entry.find(']');
    if (close == std::string::npos || close + 1 >= entry.size() || entry[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat(where, "\"", entry, "\" is not [IPv6]:port"));
    }
    endpoint.host = entry.substr(1, close - 1);
    endpoint.port = entry.substr(close + 2);
  } else {
    const auto colon = entry.rfind(':');
    if (colon == std::string::npos || entry.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrCat(where, "\"", entry, "\" is not host:port"));
    }
    endpoint.host = entry.substr(0, colon);
    endpoint.port = entry.substr(colon + 1);
  }
  if (endpoint.host.empty() || endpoint.port.empty() ||
      endpoint.port.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(where, "\"", entry, "\" is not host:port"));
  }
  return endpoint;
}

// The numeric address of `host`, and whether it is IPv6; IPv4 first for names with both.
absl::StatusOr<std::pair<std::string, bool>> Numeric(const std::string& host,
                                                     const std::string& where) {
  char buffer[INET6_ADDRSTRLEN];
  in6_addr v6;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return std::make_pair(host, false);
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return std::make_pair(host, true);
  for (int family : {AF_INET, AF_INET6}) {
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) continue;
    const void* raw =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(found->ai_addr)->sin6_addr);
    const bool ok = inet_ntop(family, raw, buffer, sizeof(buffer)) != nullptr;
    freeaddrinfo(found);
    if (ok) return std::make_pair(std::string(buffer), family == AF_INET6);
  }
  return absl::InvalidArgumentError(absl::StrCat(where, "cannot resolve host \"", host, "\""));
}

}  // namespace

absl::StatusOr<std::string> CoordinatorTarget(const std::string& addresses, const std::string& flag,
                                              grpc::ChannelArguments* args) {
  if (addresses.find(',') == std::string::npos) return addresses;
  const std::string where = absl::StrCat(flag, " ", addresses, ": ");
  std::vector<std::string> numeric;
  int v6_count = 0;
  std::string first;
  for (absl::string_view piece : absl::StrSplit(addresses, ',')) {
    const std::string entry(absl::StripAsciiWhitespace(piece));
    if (entry.empty()) return absl::InvalidArgumentError(absl::StrCat(where, "an empty entry"));
    auto endpoint = SplitHostPort(entry, where);
    if (!endpoint.ok()) return endpoint.status();
    auto address = Numeric(endpoint->host, where);
    if (!address.ok()) return address.status();
    if (first.empty()) first = entry;
    v6_count += address->second ? 1 : 0;
    numeric.push_back(address->second ? absl::StrCat("[", address->first, "]:", endpoint->port)
                                      : absl::StrCat(address->first, ":", endpoint->port));
  }
  if (v6_count != 0 && v6_count != static_cast<int>(numeric.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "mixes IPv4 and IPv6 addresses; list one kind"));
  }
  // TLS checks the certificate against the authority: the first entry as the user wrote it.
  args->SetString(GRPC_ARG_DEFAULT_AUTHORITY, first);
  args->SetLoadBalancingPolicyName("pick_first");
  // pick_first tries the addresses one after another, and an attempt lasts at least this
  // long (gRPC's default: 20 s): a coordinator half-way through shutting down must not
  // hold up the standby behind it.
  args->SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1'000);
  return absl::StrCat(v6_count ? "ipv6:" : "ipv4:", absl::StrJoin(numeric, ","));
}

}  // namespace stoke::security
