// The process group one job's ranks train through: LibTorch's own c10d, with a TCPStore
// at the rendezvous address the coordinator chose (served by rank 0) and ProcessGroupNCCL
// on GPUs or ProcessGroupGloo on CPUs. c10d's headers stay inside communicator.cc; the
// rest of the engine sees tensors and pending collectives only.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "worker/common/task.h"

namespace stoke::worker {

// A collective in flight.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // On GPUs: makes the current stream wait for the collective (the host does not wait).
  // On CPUs: returns once it is done. Throws CollectiveTimeout when a rank never joined.
  virtual void Wait() = 0;
};

// A collective or the rendezvous took longer than the job's distributed.timeout_seconds:
// another rank is gone or stuck. Says which operation and how long it waited.
class CollectiveTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Joins the task's ranks at task.distributed.rendezvous_address; returns once all
  // world_size ranks have, or throws (CollectiveTimeout after the task's timeout).
  // Rank 0 serves the store. Listens for peers on task.distributed.advertise_address.
  static std::unique_ptr<Communicator> Connect(const TrainTask& task, torch::Device device);

  // Whether this build can run several ranks on `device`, and if not, why.
  static bool Supported(torch::Device device, std::string* why_not);

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Every rank's tensors become rank `root`'s; waits (on CPUs) or orders (on GPUs).
  // `what` names the broadcast in a timeout's message ("the parameter broadcast").
  virtual void Broadcast(std::vector<torch::Tensor>& tensors, int root,
                         const std::string& what) = 0;
  // Sums `flat` in place across ranks, asynchronously.
  virtual std::unique_ptr<PendingCollective> AllReduceSum(torch::Tensor flat) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
};

// "host:port" or "[v6]:port" -> host and port; throws std::invalid_argument naming the
// address when it is neither.
std::pair<std::string, uint16_t> SplitHostPort(const std::string& address);

}  // namespace stoke::worker
