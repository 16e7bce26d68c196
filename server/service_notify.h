// Tells the service manager how the coordinator is doing, by systemd's notify protocol
// (sd_notify(3)): one datagram to the unix socket that $NOTIFY_SOCKET names, "READY=1"
// once it serves, "STOPPING=1" as it drains. Outside systemd ($NOTIFY_SOCKET unset) it
// does nothing. Written here rather than linked from libsystemd: the protocol is one
// datagram, and a coordinator run any other way needs no library for it.
#pragma once

#include <string>

namespace stoke::server {

// Sends `state` (newline-separated "KEY=VALUE" lines); false when there is no socket or
// it cannot be reached (the coordinator goes on either way).
bool NotifyServiceManager(const std::string& state);

}  // namespace stoke::server
