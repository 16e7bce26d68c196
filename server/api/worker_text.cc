#include "server/api/worker_text.h"

namespace stoke::server {

std::string StripControlCharacters(const std::string& text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\t' || (c == '\n' && keep_newlines)) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20 || c == 0x7F) {
      out.push_back('?');
    } else if (c == 0xC2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      out.push_back('?');  // U+0080-U+009F, two bytes in UTF-8 (CSI is U+009B)
      ++i;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

void SanitizeWorkerMessage(v1::WorkerMessage& message) {
  auto clean = [](std::string* field) { *field = StripControlCharacters(*field); };
  switch (message.kind_case()) {
    case v1::WorkerMessage::kRegister: {
      v1::RegisterWorker& r = *message.mutable_register_();
      clean(r.mutable_worker_id());
      clean(r.mutable_host());
      clean(r.mutable_version());
      clean(r.mutable_advertise_address());
      clean(r.mutable_device()->mutable_name());
      clean(r.mutable_device()->mutable_uuid());
      break;
    }
    case v1::WorkerMessage::kReport:
      for (v1::LogLine& line : *message.mutable_report()->mutable_logs()) {
        *line.mutable_text() = StripControlCharacters(line.text(), /*keep_newlines=*/true);
      }
      break;
    case v1::WorkerMessage::kFinished:
      *message.mutable_finished()->mutable_message() =
          StripControlCharacters(message.finished().message(), /*keep_newlines=*/true);
      break;
    case v1::WorkerMessage::kLeaving:
      clean(message.mutable_leaving()->mutable_reason());
      break;
    case v1::WorkerMessage::kHeartbeat:
      if (message.heartbeat().has_device_stats()) {
        clean(message.mutable_heartbeat()->mutable_device_stats()->mutable_source());
      }
      break;
    default:
      break;
  }
}

}  // namespace stoke::server
