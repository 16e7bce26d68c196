// A minimal HTTP/1.0 GET over a loopback socket, for scraping /metrics in tests, and the
// reading of what it returns.
#pragma once

#include <string>

namespace stoke::testing {

struct HttpResponse {
  int status = 0;  // 0: no answer
  std::string body;
};

// `header`, if given, is one more request header line ("Authorization: Basic ...").
HttpResponse HttpRequest(const std::string& address, const std::string& path,
                         const std::string& header = "");

// The response body, or "" if the request failed. `address` is host:port.
std::string HttpGet(const std::string& address, const std::string& path);

// In a Prometheus exposition (a /metrics body): the value of the first sample line that
// starts with `series` (its name and labels, as written there), or -1.
double SampleValue(const std::string& exposition, const std::string& series);

}  // namespace stoke::testing
