// The plain structs where the worker's two halves meet. worker/link (gRPC, protobuf)
// fills them from an Assignment; worker/engine (LibTorch) trains from them and reports
// back through TrainingObserver. Their defaults are the job defaults (spec/job_defaults.h),
// the same a submitted job gets. Neither half includes the other's headers: the torch
// wheel on the GPU machines ships its own protobuf headers, which must not meet ours.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "spec/job_defaults.h"

namespace stoke::worker {

enum class DeviceKind { kCpu, kCuda };

struct DeviceRef {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  std::string Label() const {
    return (kind == DeviceKind::kCuda ? "cuda:" : "cpu:") + std::to_string(index);
  }
};

// "cpu", "cpu:N", "cuda" or "cuda:N" (as DeviceRef::Label writes them); nullopt for
// anything else.
inline std::optional<DeviceRef> ParseDeviceLabel(const std::string& text) {
  DeviceRef device;
  size_t index_at = 0;
  if (text == "cpu" || text.rfind("cpu:", 0) == 0) {
    device.kind = DeviceKind::kCpu;
    index_at = 4;
  } else if (text == "cuda" || text.rfind("cuda:", 0) == 0) {
    device.kind = DeviceKind::kCuda;
    index_at = 5;
  } else {
    return std::nullopt;
  }
  if (index_at >= text.size()) return device;  // "cpu" / "cuda" alone: index 0
  int index = 0;
  for (size_t i = index_at; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9' || index > 1024) return std::nullopt;
    index = index * 10 + (text[i] - '0');
  }
  if (index > 1024) return std::nullopt;
  device.index = index;
  return device;
}

struct DeviceInfo {
  DeviceRef device;
  std::string name;
  std::string uuid;
  uint64_t memory_total_bytes = 0;
};

enum class Activation { kRelu, kGelu, kTanh };

struct MlpConfig {
  int64_t input_dim = 0;  // 0: from the data
  std::vector<int64_t> hidden;
  int64_t num_classes = 0;  // 0: from the data
  Activation activation = Activation::kGelu;
  double dropout = 0.0;
  // Regression (floating targets): the output is one target of these dimensions, and
  // the loss MSE; num_classes is their product. Empty: a classifier.
  std::vector<int64_t> regression;
};

struct CnnConfig {
  std::vector<int64_t> channels = {std::begin(defaults::kCnnChannels),
                                   std::end(defaults::kCnnChannels)};
  int64_t hidden = defaults::kCnnHidden;
  double dropout = 0.0;
  int64_t num_classes = 0;  // 0: from the data
};

struct ResNetConfig {
  int depth = defaults::kResNetDepth;  // 18, 34 or 50
  // Small-image stem (3x3 stride 1, no max-pool); otherwise ImageNet's 7x7/2 + max-pool.
  // Unset: chosen from the image size (up to 64 pixels: small).
  std::optional<bool> small_stem;
  int64_t num_classes = 0;  // 0: from the data
};

struct GptConfig {
  int64_t layers = defaults::kGptLayers;
  int64_t heads = defaults::kGptHeads;
  int64_t width = defaults::kGptWidth;
  int64_t context = 0;     // 0: from the data
  int64_t vocab_size = 0;  // 0: from the data
  double dropout = 0.0;
};

// kModel: the model computes its loss itself (a Python model's forward(inputs, targets)).
enum class LossKind { kCrossEntropy, kMse, kModel };

struct TorchScriptConfig {
  std::string path;
  LossKind loss = LossKind::kCrossEntropy;
  std::vector<int64_t> input_shape;   // one sample
  std::vector<int64_t> target_shape;  // one sample; empty: a class index
  int64_t num_classes = 0;
};

// The user's own torch.nn.Module (worker/python/): `factory(**args)` from `module`,
// imported from the folder the worker wrote the job's code into.
struct PythonConfig {
  std::string code_dir;  // the import root; the trainer process sets it
  std::string module;
  std::string factory = "build_model";
  std::string args_json = "{}";  // the factory's keyword arguments, a JSON object
  LossKind loss = LossKind::kCrossEntropy;
  std::vector<int64_t> input_shape;   // one sample, for synthetic data
  std::vector<int64_t> target_shape;  // one sample; empty: a class index
  int64_t num_classes = 0;
  std::string code_sha256;
};

using ModelConfig =
    std::variant<MlpConfig, CnnConfig, ResNetConfig, GptConfig, TorchScriptConfig, PythonConfig>;

// Models whose code is the user's (TorchScript, Python) train in a child process of the
// worker: a crash in that code fails the job, not the worker.
inline bool IsUserCode(const ModelConfig& model) {
  return std::holds_alternative<TorchScriptConfig>(model) ||
         std::holds_alternative<PythonConfig>(model);
}

struct SyntheticDataConfig {
  int64_t features = defaults::kSyntheticFeatures;
  int64_t num_classes = defaults::kSyntheticClasses;
  int64_t samples_per_epoch = defaults::kSyntheticSamplesPerEpoch;
  std::vector<int64_t> image_shape;  // [C, H, W]: images instead of vectors
  int64_t vocab_size = 0;            // with context: token sequences instead
  int64_t context = 0;
  // For TorchScript models: inputs of any shape per sample, labelled by a fixed random
  // linear map (class indices, or regression targets of regression_shape when set).
  std::vector<int64_t> input_shape;
  std::optional<std::vector<int64_t>> regression_shape;
};

struct MnistDataConfig {
  std::string path;
};

struct Cifar10DataConfig {
  std::string path;
};

struct TokenDataConfig {
  std::string train_path;
  std::string val_path;  // empty: the last 10% of train_path
  int64_t vocab_size = defaults::kVocabSize;
  int64_t context = defaults::kContext;
  int64_t samples_per_epoch = 0;  // 0: training tokens / context
};

struct ArrayDataConfig {
  std::string inputs;
  std::string targets;
  std::string val_inputs;  // with val_targets; empty: the last val_fraction of the rows
  std::string val_targets;
  double val_fraction = defaults::kValFraction;
};

struct ImageDataConfig {
  std::string path;  // class folders, or
  std::string manifest;
  std::string val_path;  // held-out class folders, or a manifest; neither: every k-th image
  std::string val_manifest;
  double val_fraction = defaults::kValFraction;
  int64_t size = defaults::kImageSize;
  int channels = defaults::kImageChannels;
  double min_crop_area = defaults::kMinCropArea;
};

struct ShardDataConfig {
  std::string urls;      // a brace pattern of tar shards
  std::string val_urls;  // held-out shards; empty: every k-th sample
  double val_fraction = defaults::kValFraction;
  int64_t shuffle_buffer = defaults::kShuffleBuffer;
  int64_t size = defaults::kImageSize;
  int channels = defaults::kImageChannels;
  double min_crop_area = defaults::kMinCropArea;
  int64_t text_length = defaults::kTextLength;  // text samples' ids
};

struct LoaderConfig {
  int threads = 0;  // 0: one per core, at most 8
  int prefetch = defaults::kLoaderPrefetch;
  bool pin_memory = defaults::kPinMemory;
  bool shuffle = defaults::kShuffle;
};

struct AugmentConfig {
  int64_t crop_padding = 0;
  bool horizontal_flip = false;
  bool normalize = defaults::kNormalize;
};

struct DataConfig {
  std::variant<SyntheticDataConfig, MnistDataConfig, Cifar10DataConfig, TokenDataConfig,
               ArrayDataConfig, ImageDataConfig, ShardDataConfig>
      source;
  double max_bad_fraction = defaults::kMaxBadFraction;
  LoaderConfig loader;
  AugmentConfig augment;
};

enum class AdamWRoute {
  kAuto,          // fused on CUDA (torch >= 2.2), foreach elsewhere
  kFused,         // at::_fused_adamw_ (foreach where unavailable)
  kForeach,       // ATen's _foreach_* ops
  kPerParameter,  // LibTorch's optim::AdamW loop (the reference)
};

struct AdamWConfig {
  double beta1 = defaults::kAdamBeta1;
  double beta2 = defaults::kAdamBeta2;
  double eps = defaults::kAdamEps;
  AdamWRoute route = AdamWRoute::kAuto;
};

struct SgdConfig {
  double momentum = 0.0;
  bool nesterov = false;
};

enum class LrSchedule { kConstant, kCosine };

struct OptimizerConfig {
  std::variant<AdamWConfig, SgdConfig> kind;
  double lr = defaults::kLearningRate;
  double weight_decay = 0.0;
  int64_t warmup_steps = 0;
  LrSchedule schedule = LrSchedule::kConstant;
  double min_lr_ratio = defaults::kMinLrRatio;
  double grad_clip_norm = 0.0;  // 0: off
};

enum class Precision { kAuto, kFp32, kBf16, kFp16 };

// torch.compile of a Python model: kAuto compiles on GPUs (torch 2 and later).
enum class CompileMode { kAuto, kOff, kOn, kMaxAutotune };

// A performance switch; kDefault is what the engine picks for the model and device.
enum class Toggle { kDefault, kOn, kOff };

inline bool Resolve(Toggle toggle, bool default_value) {
  return toggle == Toggle::kDefault ? default_value : toggle == Toggle::kOn;
}

// fp16's dynamic loss scale (PyTorch's GradScaler defaults).
struct LossScaleConfig {
  double initial = defaults::kLossScaleInitial;
  uint32_t growth_interval = defaults::kLossScaleGrowthInterval;
  double growth_factor = defaults::kLossScaleGrowthFactor;
  double backoff_factor = defaults::kLossScaleBackoffFactor;
};

struct TrainingConfig {
  // Exactly one of steps and epochs is non-zero.
  uint64_t steps = 0;
  uint32_t epochs = 0;
  int64_t batch_size = defaults::kBatchSize;
  Precision precision = Precision::kAuto;
  int64_t grad_accum_steps = defaults::kGradAccumSteps;
  uint64_t seed = defaults::kSeed;
  uint32_t metrics_interval_steps = defaults::kMetricsIntervalSteps;
  // Search for the largest batch that fits the device instead of batch_size; with
  // effective_batch_size, accumulate micro-batches to reach that many samples per step
  // across all ranks.
  bool batch_size_auto = false;
  int64_t effective_batch_size = 0;
  Toggle cuda_graph = Toggle::kDefault;                // default: on for CUDA
  Toggle activation_checkpointing = Toggle::kDefault;  // default: off
  Toggle tf32 = Toggle::kDefault;                      // default: on
  Toggle channels_last = Toggle::kDefault;             // default: on for CNNs on CUDA
  Toggle cudnn_benchmark = Toggle::kDefault;           // default: on
  Toggle fused_kernels = Toggle::kDefault;             // default: on
  CompileMode compile = CompileMode::kAuto;            // Python models
  LossScaleConfig loss_scale;                          // fp16 only
};

struct EvalConfig {
  uint32_t interval_steps = 0;  // 0: once, at the end
  uint32_t batches = 0;         // 0: the whole held-out split
};

struct CheckpointConfig {
  uint32_t interval_steps = defaults::kCheckpointIntervalSteps;
  uint32_t keep = defaults::kCheckpointKeep;
  // A checkpoint due sooner than this after the last one (or the start) is skipped.
  uint32_t min_interval_seconds = 0;
};

// How the ranks of a job of several devices meet and reduce their gradients.
struct DistributedConfig {
  std::string rendezvous_address;  // host:port of rank 0's store
  std::string advertise_address;   // this rank's own address; empty: any
  uint32_t timeout_seconds = defaults::kDistributedTimeoutSeconds;  // rendezvous, collectives
  int64_t bucket_bytes = defaults::kBucketMb << 20;
  int64_t first_bucket_bytes = defaults::kFirstBucketBytes;
};

// One rank of one attempt of a job.
struct TrainTask {
  std::string job_id;
  uint32_t attempt = 0;
  int rank = 0;
  int world_size = 1;
  DistributedConfig distributed;
  std::string job_dir;
  std::string name;
  // The coordinator's data roots: the files the model and data specs name are opened
  // only beneath one of them, checked again as each is opened. Empty: anywhere (tools
  // that run the engine in process on files their own user named).
  std::vector<std::string> data_roots;
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  TrainingConfig training;
  EvalConfig eval;
  CheckpointConfig checkpoint;
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;    // classifiers
  double perplexity = 0;  // language models
  uint64_t samples = 0;
};

struct MetricSample {
  uint64_t step = 0;
  uint64_t total_steps = 0;
  uint32_t epoch = 0;
  double loss = 0;
  double samples_per_second = 0;
  double learning_rate = 0;
  double elapsed_seconds = 0;
  double data_wait_ratio = 0;
  double comm_wait_ratio = 0;    // several ranks: device time waiting on unhidden all-reduces
  double step_seconds = 0;       // mean optimizer step time over the window (this rank)
  double tokens_per_second = 0;  // language models: samples/s x context
  double achieved_flops = 0;     // model FLOP/s on this rank's device (PaLM's count)
  double mfu = 0;                // achieved_flops / the device's dense bf16 peak; 0: unknown
  // CUDA caching allocator: bytes held by tensors now, reserved from the driver, the most
  // ever held, and how often it had to free its cache to satisfy an allocation.
  uint64_t memory_allocated_bytes = 0;
  uint64_t memory_reserved_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  uint64_t allocator_retries = 0;
  uint64_t skipped_steps = 0;    // fp16: steps skipped for overflowing gradients, so far
  double loss_scale = 0;         // fp16: the loss scale now
  uint64_t samples_skipped = 0;  // damaged files skipped by this attempt so far
  std::optional<EvalResult> eval;
  // Script jobs: the latest value of every other scalar the program has reported.
  std::map<std::string, double> scalars;
};

struct TrainOutcome {
  // kPreempted: stopped at a step boundary, as TaskStops::preempt_after asked.
  enum class Kind { kSucceeded, kFailed, kCancelled, kPreempted };
  Kind kind = Kind::kSucceeded;
  std::string message;
  // False when another attempt would fail the same way (a bad spec, a NaN loss).
  bool retryable = true;
};

// How the worker asks a task it runs to stop: at once (a cancel), or at a step boundary,
// having written a checkpoint of that step (a preemption: the job resumes there later).
struct TaskStops {
  static constexpr uint64_t kNotPreempted = UINT64_MAX;
  std::atomic<bool> cancel{false};
  // The last step to train before stopping, 0 for the step under way; kNotPreempted.
  std::atomic<uint64_t> preempt_after{kNotPreempted};

  bool Preempted() const { return preempt_after.load(std::memory_order_relaxed) != kNotPreempted; }
};

// How the engine reports while it trains. Called on the training thread; must not block.
// Where a run's time went before its first training step had completed (host seconds).
struct StartupTimes {
  double data_seconds = 0;
  double model_seconds = 0;
  double batch_search_seconds = 0;
  // From taking the first step's batch to the device finishing the step.
  double first_step_seconds = 0;
  // Python models: torch.compile's tracing and code generation (and the FLOP count),
  // before the first step.
  double compile_seconds = 0;
  // User models: the trainer process's start (interpreter, LibTorch, the device).
  double process_seconds = 0;
  std::chrono::steady_clock::time_point completed_at;
};

class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  // The model is built, the data is ready, the first step is about to run.
  virtual void OnStarted() = 0;
  // The first training step has completed on the device (seen without waiting for it:
  // up to a step later on GPUs). Once per run.
  virtual void OnFirstStep(const StartupTimes& times) { (void)times; }
  virtual void OnMetrics(const MetricSample& sample) = 0;
  virtual void OnLog(const std::string& line) = 0;
};

}  // namespace stoke::worker
