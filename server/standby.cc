#include "server/standby.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

namespace stoke::server {

absl::Status LeadBeforeServing(PostgresJobStore& store, const sigset_t& stop_signals,
                               std::thread* watch) {
  bool announced = false;
  auto stop = [&] {
    if (!announced) {
      spdlog::info(
          "standby: another coordinator holds the leader lease; taking over when it "
          "ends (not listening until then)");
      announced = true;
    }
    timespec now{};
    return sigtimedwait(&stop_signals, nullptr, &now) > 0;
  };
  // A dead leader's lease is free as soon as PostgreSQL sees its session end; checking
  // every second keeps the takeover within a few seconds of it.
  if (auto s = store.WaitForLeadership(absl::Seconds(1), stop); !s.ok()) return s;
  if (announced) spdlog::info("standby: took the leader lease; starting as the leader");
  *watch = std::thread([&store] {
    while (true) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      absl::Status s = store.CheckLeadership();
      if (s.code() == absl::StatusCode::kFailedPrecondition) {
        spdlog::critical("{}; exiting so that only the leader acts", std::string(s.message()));
        spdlog::shutdown();
        _exit(3);
      }
    }
  });
  watch->detach();
  return absl::OkStatus();
}

}  // namespace stoke::server
