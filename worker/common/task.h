// The plain structs where the worker's two halves meet. worker/link (gRPC, protobuf)
// fills them from an Assignment; worker/engine (LibTorch) trains from them and reports
// back through TrainingObserver. Neither half includes the other's headers: the torch
// wheel on the GPU machines ships its own protobuf headers, which must not meet ours.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace stoke::worker {

enum class DeviceKind { kCpu, kCuda };

struct DeviceRef {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  std::string Label() const {
    return (kind == DeviceKind::kCuda ? "cuda:" : "cpu:") + std::to_string(index);
  }
};

struct DeviceInfo {
  DeviceRef device;
  std::string name;
  std::string uuid;
  uint64_t memory_total_bytes = 0;
};

enum class Activation { kRelu, kGelu, kTanh };

struct MlpConfig {
  int64_t input_dim = 0;
  std::vector<int64_t> hidden;
  int64_t num_classes = 0;
  Activation activation = Activation::kGelu;
  double dropout = 0.0;
};

using ModelConfig = std::variant<MlpConfig>;

struct SyntheticDataConfig {
  int64_t features = 256;
  int64_t num_classes = 10;
  int64_t samples_per_epoch = 65536;
};

using DataConfig = std::variant<SyntheticDataConfig>;

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

struct SgdConfig {
  double momentum = 0.0;
  bool nesterov = false;
};

struct OptimizerConfig {
  std::variant<AdamWConfig, SgdConfig> kind;
  double lr = 1e-3;
  double weight_decay = 0.0;
};

enum class Precision { kAuto, kFp32, kBf16 };

struct TrainingConfig {
  // Exactly one of steps and epochs is non-zero.
  uint64_t steps = 0;
  uint32_t epochs = 0;
  int64_t batch_size = 256;
  Precision precision = Precision::kAuto;
  int64_t grad_accum_steps = 1;
  uint64_t seed = 1;
  uint32_t metrics_interval_steps = 50;
};

// One rank of one attempt of a job.
struct TrainTask {
  std::string job_id;
  uint32_t attempt = 0;
  int rank = 0;
  int world_size = 1;
  std::string rendezvous_address;
  std::string job_dir;
  std::string name;
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  TrainingConfig training;
};

struct MetricSample {
  uint64_t step = 0;
  uint64_t total_steps = 0;
  uint32_t epoch = 0;
  double loss = 0;
  double samples_per_second = 0;
  double learning_rate = 0;
  double elapsed_seconds = 0;
};

struct TrainOutcome {
  enum class Kind { kSucceeded, kFailed, kCancelled };
  Kind kind = Kind::kSucceeded;
  std::string message;
  // False when another attempt would fail the same way (a bad spec, a NaN loss).
  bool retryable = true;
};

// How the engine reports while it trains. Called on the training thread; must not block.
class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  // The model is built, the data is ready, the first step is about to run.
  virtual void OnStarted() = 0;
  virtual void OnMetrics(const MetricSample& sample) = 0;
  virtual void OnLog(const std::string& line) = 0;
};

}  // namespace stoke::worker
