// CoordinatorProcess once it serves: the store marker's updates, the signal loop (SIGHUP
// reads the tokens again), the orderly shutdown, and the restart after a stalled listener.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/coordinator_process.h"
#include "server/service_notify.h"

namespace fs = std::filesystem;

namespace stoke::server {

// The marker follows the newest job every few seconds, and once more at the end.
void CoordinatorProcess::StartMarkerUpdates() {
  marking_ = marker_.has_value();
  marker_updates_ = std::thread([this] {
    while (marking_.load()) {
      for (int i = 0; i < 20 && marking_.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (auto s = marker_->Update(*store_); marking_.load() && !s.ok()) {
        spdlog::warn("store marker: {}", s.ToString());
      }
    }
  });
}

// Serves, reading the tokens again on each SIGHUP, until another stop signal comes;
// returns it.
int CoordinatorProcess::WaitForStopSignal() {
  int sig = 0;
  for (sigwait(&stop_signals_, &sig); sig == SIGHUP; sigwait(&stop_signals_, &sig)) {
    NotifyServiceManager("RELOADING=1");
    ReloadTokens();
    NotifyServiceManager("READY=1");
  }
  return sig;
}

// SIGHUP reads the tokens file again, as `systemctl reload` does: a file that no longer
// parses, or holds no token, is refused and the tokens in force stay. Either way the
// audit log says so.
void CoordinatorProcess::ReloadTokens() {
  const std::string& path = flags_.auth_tokens_path;
  if (path.empty()) {
    spdlog::info("SIGHUP: there is no --auth-tokens file to read again");
    return;
  }
  auto tokens = security::ReadTokenFile(path);
  if (tokens.ok() && tokens->empty()) {
    tokens = absl::InvalidArgumentError(absl::StrCat(path, ": holds no token"));
  }
  absl::Status result = tokens.status();
  if (tokens.ok()) {
    if (local_workers_token_) tokens->push_back(*local_workers_token_);
    const size_t count = tokens->size();
    access_->ReplaceTokens(*std::move(tokens));
    spdlog::info("--auth-tokens {}: read again on SIGHUP; {} tokens in force", path, count);
  } else {
    spdlog::error("--auth-tokens: not read again on SIGHUP, the tokens in force stay: {}",
                  absl::StrCat(result.message()));
  }
  audit_->Record(Caller{"coordinator", security::Role::kAdmin, "signal:SIGHUP"}, "ReloadTokens",
                 path, result);
  audit_->Flush();
}

// Network first, core last: no call arrives at a core that is stopping.
void CoordinatorProcess::Shutdown(int sig) {
  if (restart_) {
    spdlog::warn("restarting on {} to listen again", server_->address());
  } else {
    spdlog::info("{} received; shutting down", strsignal(sig));
  }
  DrainAndStopServing();
  ReleaseLocalWorkers();
  metrics_.reset();
  executor_->Stop();
  read_executor_->Stop();
  StopMarkerUpdates();
  if (marker_) {
    if (auto s = marker_->Update(*store_); !s.ok()) spdlog::warn("store marker: {}", s.ToString());
  }
  core_->Stop();
  std::error_code ec;
  fs::remove(flags_.data_dir + "/coordinator.address", ec);
  fs::remove(flags_.data_dir + "/metrics.address", ec);
}

// Probes see it go first, while it still answers: gRPC health NOT_SERVING and /readyz
// 503, for --drain-seconds; and systemd that it is stopping. A restart does not drain:
// the listener it would drain has stalled.
void CoordinatorProcess::DrainAndStopServing() {
  if (!restart_) NotifyServiceManager("STOPPING=1");
  server_->SetServing(false);
  if (metrics_) metrics_->SetDraining();
  if (flags_.drain_seconds > 0 && !restart_) {
    spdlog::info("draining for {} s before closing the listener", flags_.drain_seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(flags_.drain_seconds));
  }
  if (watch_) watch_->Stop();
  core_->BeginShutdown();
  server_->Shutdown(std::chrono::seconds(2));
}

// Local workers keep training and reattach to the next coordinator, unless told to stop
// with it (--stop-workers-on-exit; never on a restart, which comes straight back).
void CoordinatorProcess::ReleaseLocalWorkers() {
  if (!supervisor_) return;
  if (flags_.stop_workers_on_exit && !restart_) {
    supervisor_->Stop();
    return;
  }
  const size_t left = supervisor_->Running();
  supervisor_->Leave();
  spdlog::info(
      "{} local worker{} keep training and reattach to the next coordinator on {}; "
      "`stoke-coordinator --stop-workers --data-dir {}` stops them",
      left, left == 1 ? "" : "s", flags_.data_dir, flags_.data_dir);
}

void CoordinatorProcess::StopMarkerUpdates() {
  marking_ = false;
  if (marker_updates_.joinable()) marker_updates_.join();
}

// Executes this program again with the address it listened on (PrepareProcess keeps it);
// returns only when that fails.
int CoordinatorProcess::StartAgain(char** argv) {
  setenv(kRestartAddressVariable, server_->address().c_str(), 1);
  execv("/proc/self/exe", argv);
  spdlog::error("cannot start again: {}", std::strerror(errno));
  return 1;
}

}  // namespace stoke::server
