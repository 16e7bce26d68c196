#include "worker/dist/communicator.h"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>

#if STOKE_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if STOKE_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

using Clock = std::chrono::steady_clock;

// c10d reports a timeout as a c10::Error (or a DistBackendError, its subclass) whose
// text mentions it; what the job's user needs is which operation and for how long.
bool LooksLikeTimeout(const std::string& what) {
  return what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos;
}

// Gloo rethrows its own exceptions (gloo::IoException) from wait(); c10d's are c10::Error.
std::string Describe(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

template <typename Fn>
auto Guarded(const std::string& operation, std::chrono::milliseconds timeout, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    const std::string what = Describe(e);
    if (LooksLikeTimeout(what)) {
      throw CollectiveTimeout(operation + " did not complete within " +
                              std::to_string(timeout.count() / 1000) +
                              " s (distributed.timeout_seconds): another rank is gone or stuck (" +
                              what.substr(0, 300) + ")");
    }
    throw;
  }
}

class C10dPending final : public PendingCollective {
 public:
  C10dPending(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout)
      : work_(std::move(work)), timeout_(timeout) {}
  void Wait() override {
    Guarded("a gradient all-reduce", timeout_, [&] { return work_->wait(); });
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::chrono::milliseconds timeout_;
};

template <typename Group>
class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<Group> group, int rank,
                   int world_size, std::chrono::milliseconds timeout)
      : store_(std::move(store)),
        group_(std::move(group)),
        rank_(rank),
        world_size_(world_size),
        timeout_(timeout) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  void Broadcast(std::vector<torch::Tensor>& tensors, int root, const std::string& what) override {
    // One flat buffer per call: c10d takes one tensor per device, and one collective
    // is cheaper than many.
    std::vector<torch::Tensor> flat_parts;
    for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape({-1}));
    std::vector<torch::Tensor> flat = {torch::cat(flat_parts)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = timeout_;
    auto work = Guarded(what, timeout_, [&] { return group_->broadcast(flat, options); });
    Guarded(what, timeout_, [&] { return work->wait(); });
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (auto& t : tensors) {
      const int64_t n = t.numel();
      t.copy_(flat[0].narrow(0, offset, n).view_as(t));
      offset += n;
    }
  }

  std::unique_ptr<PendingCollective> AllReduceSum(torch::Tensor flat) override {
    std::vector<torch::Tensor> tensors = {std::move(flat)};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    options.timeout = timeout_;
    auto work = Guarded("a gradient all-reduce", timeout_,
                        [&] { return group_->allreduce(tensors, options); });
    return std::make_unique<C10dPending>(std::move(work), timeout_);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;  // the group talks through it: keep it alive
  c10::intrusive_ptr<Group> group_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
};

[[noreturn]] void FailedToMeet(const TrainTask& task, std::chrono::milliseconds timeout,
                               const std::string& what) {
  throw CollectiveTimeout("rank " + std::to_string(task.rank) + " of " +
                          std::to_string(task.world_size) + " could not meet the others at " +
                          task.distributed.rendezvous_address + " within " +
                          std::to_string(timeout.count() / 1000) +
                          " s (distributed.timeout_seconds): " + what.substr(0, 300));
}

c10::intrusive_ptr<c10d::Store> Rendezvous(const TrainTask& task,
                                           std::chrono::milliseconds timeout) {
  const auto [host, port] = SplitHostPort(task.distributed.rendezvous_address);
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = task.rank == 0;
  options.numWorkers = static_cast<size_t>(task.world_size);
  options.waitWorkers = true;  // rank 0 returns once every rank has connected
  options.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const std::exception& e) {
    FailedToMeet(task, timeout, Describe(e));
  }
}

}  // namespace

std::pair<std::string, uint16_t> SplitHostPort(const std::string& address) {
  std::string host;
  std::string port;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close != std::string::npos && close + 1 < address.size() && address[close + 1] == ':') {
      host = address.substr(1, close - 1);
      port = address.substr(close + 2);
    }
  } else if (const auto colon = address.rfind(':'); colon != std::string::npos) {
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  int value = 0;
  try {
    value = port.empty() ? 0 : std::stoi(port);
  } catch (const std::exception&) {
    value = 0;
  }
  if (host.empty() || value <= 0 || value > 65535) {
    throw std::invalid_argument("rendezvous address \"" + address + "\" is not host:port");
  }
  return {host, static_cast<uint16_t>(value)};
}

bool Communicator::Supported(torch::Device device, std::string* why_not) {
  if (device.is_cuda()) {
#if STOKE_WITH_NCCL
    return true;
#else
    *why_not =
        "this stoke-worker was built without NCCL, so it cannot run GPU jobs of several ranks";
    return false;
#endif
  }
#if STOKE_WITH_GLOO
  return true;
#else
  *why_not = "this stoke-worker was built without Gloo, so it cannot run CPU jobs of several ranks";
  return false;
#endif
}

std::unique_ptr<Communicator> Communicator::Connect(const TrainTask& task, torch::Device device) {
  std::string why_not;
  if (!Supported(device, &why_not)) throw std::invalid_argument("resources.gpus: " + why_not);
  const std::chrono::milliseconds timeout(int64_t{task.distributed.timeout_seconds} * 1000);
  auto store = Rendezvous(task, timeout);
  if (device.is_cuda()) {
#if STOKE_WITH_NCCL
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto group =
        c10::make_intrusive<c10d::ProcessGroupNCCL>(store, task.rank, task.world_size, options);
    return std::make_unique<C10dCommunicator<c10d::ProcessGroupNCCL>>(
        store, std::move(group), task.rank, task.world_size, timeout);
#endif
  } else {
#if STOKE_WITH_GLOO
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    const std::string& listen = task.distributed.advertise_address;
    options->devices.push_back(listen.empty()
                                   ? c10d::ProcessGroupGloo::createDefaultDevice()
                                   : c10d::ProcessGroupGloo::createDeviceForHostname(listen));
    // Gloo's group constructor connects every pair of ranks; a missing rank shows here.
    c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
    try {
      group =
          c10::make_intrusive<c10d::ProcessGroupGloo>(store, task.rank, task.world_size, options);
    } catch (const std::exception& e) {
      FailedToMeet(task, timeout, Describe(e));
    }
    return std::make_unique<C10dCommunicator<c10d::ProcessGroupGloo>>(
        store, std::move(group), task.rank, task.world_size, timeout);
#endif
  }
  throw std::logic_error("unreachable: Supported() said yes");
}

}  // namespace stoke::worker
