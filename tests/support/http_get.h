// A minimal HTTP/1.0 GET over a loopback socket, for scraping /metrics in tests.
#pragma once

#include <string>

namespace stoke::testing {

// The response body, or "" if the request failed. `address` is host:port.
std::string HttpGet(const std::string& address, const std::string& path);

}  // namespace stoke::testing
