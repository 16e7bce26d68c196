// The worker's side of the WorkerLink: keeps one stream to the coordinator open
// (reconnecting with backoff when it drops), registers the device, runs each assignment
// on a training thread through the given Train function, and sends heartbeats, metrics,
// logs and the outcome back. Training never waits on the network: what it reports goes
// into a bounded outbox that a sender thread drains, dropping the oldest metric samples
// and log lines (and counting them) if the coordinator cannot keep up. A lost coordinator
// stops nothing: the task trains on, the outbox keeps filling, and the worker reattaches
// saying which task it holds, so that a restarted coordinator takes the job back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "stoke/v1/worker_link.grpc.pb.h"
#include "worker/common/task.h"
#include "worker/telemetry/device_sampler.h"

namespace stoke::worker {

// Runs one assignment to its end: trains it, or runs its command.
using TrainFunction =
    std::function<TrainOutcome(const v1::Assignment&, TrainingObserver&, const TaskStops&)>;

class WorkerAgent {
 public:
  struct Options {
    std::string coordinator_address;
    std::string worker_id;
    std::string host;
    DeviceInfo device;
    bool local = false;
    std::string advertise_address;  // empty: as the coordinator sees us
    // TLS to the coordinator (PEM files; a CA for plaintext-free links, a certificate and
    // key for mutual TLS) and the join token sent as the stream's bearer token.
    std::string tls_ca;
    std::string tls_cert;
    std::string tls_key;
    std::string join_token;
    // Re-read before every attach attempt when set: a restarted coordinator writes the
    // address it listens on there (local workers).
    std::string coordinator_address_file;
    // Metric samples and log lines held while the link is slow or the coordinator away;
    // older ones are dropped beyond these.
    size_t max_queued_samples = 10'000;
    size_t max_queued_logs = 10'000;
    // > 0: once no coordinator has answered for this long and no task is running (a task
    // trains to its end first), Run() returns, so that a worker whose coordinator never
    // comes back does not wait, or hold its device, forever.
    std::chrono::milliseconds orphan_timeout{0};
    // Longest wait between attach attempts.
    std::chrono::milliseconds max_reconnect_backoff{2'000};
    // Reports and outcomes sent this recently are sent again after a reattachment: a
    // coordinator that died may not have stored them (it applies each report once).
    std::chrono::milliseconds resend_window{10'000};
    // Reports are batched over this period.
    std::chrono::milliseconds flush_interval{200};
    // A cancelled rank of a job of several ranks can be stuck inside a collective whose
    // peer is gone. Past this grace the process exits (code 75) rather than hold its
    // device until the collective times out; its supervisor starts it again.
    std::chrono::milliseconds cancel_grace{15'000};
    // On Stop() with a task running and the coordinator attached: how long the task may
    // run on to stop at a step boundary, with a checkpoint of that step, when the
    // coordinator preempts it (as it does for a worker leaving); then it is cancelled.
    // Zero: cancelled at once, to resume from its newest checkpoint. Under the 30 s a
    // service manager or Kubernetes waits before SIGKILL.
    std::chrono::milliseconds stop_grace{20'000};
    // The device's newest reading, sent with every heartbeat; unset or empty: none.
    std::function<std::optional<DeviceStats>()> device_stats;
  };

  WorkerAgent(Options options, TrainFunction train);
  ~WorkerAgent();

  // Serves until Stop(): connect, register, run assignments, reconnect on loss. Fails at
  // once only when the TLS files cannot be used.
  absl::Status Run();
  // Cancels the running task, reports it, and makes Run() return. Safe from any thread.
  void Stop();

 private:
  class Outbox;
  class Observer;
  using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

  // One connection's life; returns when the stream ends or Stop() is called.
  // False when it could not attach at all.
  bool Serve(v1::WorkerLink::Stub& stub, const std::string& address);
  // The task this process holds until its outcome has been sent (registration says it).
  std::optional<v1::HeldTask> CurrentHeldTask();
  void MarkHeldTaskStarted(const std::string& job_id, uint32_t attempt);
  // The sender wrote `message`: reports and outcomes are kept for resend_window.
  void OnSent(const v1::WorkerMessage& message);
  // Forgets what left the resend window; a task whose outcome did is no longer held.
  void PruneRecent();
  void StartTask(const v1::Assignment& assignment);
  void CancelTask(const v1::CancelTask& cancel);
  // Asks the task to stop at a step boundary (a script job's program: to stop at once).
  void PreemptTask(const v1::PreemptTask& preempt);
  void StopTask();
  // Within Stop(): waits up to stop_grace for the task to end, while the coordinator
  // stays attached (it is what asks the task to stop at a step boundary).
  void AwaitTaskStop();
  // Exits the process if the task being cancelled has not ended within cancel_grace.
  void WatchCancel(std::string job_id, uint32_t attempt);
  void SendLoop(Stream& stream, grpc::ClientContext& context);

  const Options options_;
  const TrainFunction train_;
  std::unique_ptr<Outbox> outbox_;

  std::atomic<bool> stopping_{false};
  std::atomic<bool> close_requested_{false};  // the sender may half-close once drained
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  grpc::ClientContext* active_context_ = nullptr;  // guarded by stop_mu_
  std::atomic<bool> attached_{false};              // registered with a coordinator, stream open

  // The running task, if any.
  std::mutex task_mu_;
  std::thread task_thread_;
  std::string task_job_;
  uint32_t task_attempt_ = 0;
  TaskStops task_stops_;
  std::atomic<bool> task_running_{false};
  bool watch_cancel_ = false;  // a cancel starts the watchdog (WatchCancel)
  bool task_is_script_ = false;
  std::condition_variable task_done_cv_;  // with task_mu_
  std::thread cancel_watchdog_;
  bool watchdog_done_ = true;  // guarded by task_mu_
  std::chrono::milliseconds heartbeat_interval_{2000};

  std::mutex held_mu_;
  std::optional<v1::HeldTask> held_;
  // Touched by the sender thread, and by Serve before it starts one.
  struct Sent {
    std::chrono::steady_clock::time_point at;
    v1::WorkerMessage message;
  };
  std::deque<Sent> recent_;
  uint64_t next_report_seq_ = 0;
};

}  // namespace stoke::worker
