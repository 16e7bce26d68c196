// Text that workers send (log lines, ids, names, messages) is stored, served to clients
// and printed on terminals: control characters in it could rewrite a user's screen
// (escape sequences) or forge lines. They are replaced before anything else sees them.
#pragma once

#include <string>

#include "stoke/v1/worker_link.pb.h"

namespace stoke::server {

// C0 controls (but tab), DEL and the C1 controls (U+0080-U+009F) become '?'; newlines
// too, except in log lines where `keep_newlines` is set.
std::string StripControlCharacters(const std::string& text, bool keep_newlines = false);

// Every free-text field of a worker's message, cleaned in place.
void SanitizeWorkerMessage(v1::WorkerMessage& message);

}  // namespace stoke::server
