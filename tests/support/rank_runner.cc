// One rank of a job of several ranks, run through the engine as stoke-worker would run
// it but without a coordinator: the distributed tests start several of these and compare
// what they end with. Arguments are key=value pairs:
//   rank, world, rendezvous (host:port), data (an MNIST-format folder), batch, steps,
//   accum, lr, timeout (seconds), out (file for the final parameters), job_dir,
//   device (cpu or cuda:N; default cpu), precision (fp32 or bf16; default fp32).
// Prints one line per metric sample ("step N loss L") and the outcome; exits 0 when the
// training succeeded.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "worker/engine/trainer.h"

namespace {

using namespace stoke::worker;

class PrintingObserver final : public TrainingObserver {
 public:
  void OnStarted() override {
    std::printf("started\n");
    std::fflush(stdout);
  }
  void OnMetrics(const MetricSample& s) override {
    if (s.eval) return;
    std::printf("step %llu loss %.6f comm_wait %.4f\n", static_cast<unsigned long long>(s.step),
                s.loss, s.comm_wait_ratio);
    std::fflush(stdout);
  }
  void OnLog(const std::string& line) override {
    std::printf("log %s\n", line.c_str());
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "argument %s is not key=value\n", argv[i]);
      return 2;
    }
    args[arg.substr(0, eq)] = arg.substr(eq + 1);
  }
  auto get = [&](const std::string& key, const std::string& fallback) {
    auto it = args.find(key);
    return it == args.end() ? fallback : it->second;
  };
  torch::set_num_threads(1);  // several ranks share the test machine's cores

  TrainTask task;
  task.job_id = "test";
  task.name = "rank-runner";
  task.rank = std::stoi(get("rank", "0"));
  task.world_size = std::stoi(get("world", "1"));
  task.distributed.rendezvous_address = get("rendezvous", "");
  task.distributed.advertise_address = get("listen", "127.0.0.1");
  task.distributed.timeout_seconds = static_cast<uint32_t>(std::stoul(get("timeout", "30")));
  // Small buckets, so that even a small model is reduced in several collectives.
  task.distributed.bucket_bytes = 16 << 10;
  task.distributed.first_bucket_bytes = 4 << 10;
  task.job_dir = get("job_dir", "");
  MlpConfig mlp;
  mlp.hidden = {64, 32};
  task.model = mlp;
  task.data.source = MnistDataConfig{get("data", "")};
  task.data.loader.threads = 1;
  task.data.loader.pin_memory = false;
  task.data.augment.normalize = true;
  OptimizerConfig optimizer;
  // AdamW updates each gradient bucket as soon as it is reduced; SGD after all of them.
  if (get("optimizer", "sgd") == "adamw") {
    optimizer.kind = AdamWConfig{};
    optimizer.lr = std::stod(get("lr", "0.003"));
  } else {
    optimizer.kind = SgdConfig{0.9, false};
    optimizer.lr = std::stod(get("lr", "0.05"));
  }
  task.optimizer = optimizer;
  task.training.steps = std::stoull(get("steps", "10"));
  task.training.batch_size = std::stoll(get("batch", "8"));
  task.training.grad_accum_steps = std::stoll(get("accum", "1"));
  task.training.precision =
      get("precision", "fp32") == "bf16" ? Precision::kBf16 : Precision::kFp32;
  task.training.seed = 7;
  task.training.metrics_interval_steps = 1;
  task.eval.batches = 1;
  task.checkpoint.interval_steps = 1000000;

  TrainingProbe probe;
  const std::string out = get("out", "");
  probe.on_finished = [&](const std::vector<torch::Tensor>& parameters) {
    if (out.empty()) return;
    std::vector<torch::Tensor> on_cpu;
    for (const auto& p : parameters) on_cpu.push_back(p.detach().cpu().clone());
    torch::save(on_cpu, out);
  };
  PrintingObserver observer;
  std::atomic<bool> cancel{false};
  DeviceRef device;
  const std::string device_text = get("device", "cpu");
  if (device_text.rfind("cuda:", 0) == 0) {
    device = DeviceRef{DeviceKind::kCuda, std::stoi(device_text.substr(5))};
  }
  const TrainOutcome outcome = RunTraining(task, device, observer, cancel, probe);
  std::printf("outcome %s\n", outcome.message.c_str());
  return outcome.kind == TrainOutcome::Kind::kSucceeded ? 0 : 1;
}
