#include "worker/engine/checkpoint.h"

#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "files/posix_files.h"
#include "worker/runtime/torch_device.h"

#if STOKE_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace stoke::worker {
namespace {

constexpr char kPrefix[] = "step-";

std::optional<uint64_t> StepOf(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(sizeof(kPrefix) - 1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;  // a temporary directory, or something else
  }
  return std::stoull(digits);
}

at::Generator CudaGenerator(const DeviceRef& device) {
#if STOKE_WITH_CUDA
  return at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(device.index));
#else
  (void)device;
  throw std::logic_error("no CUDA support in this build");
#endif
}

// The archive written through files::FileSink, so that a failed write (a full disk) is
// an error that names the file rather than an exception torch throws from a destructor.
void SaveArchive(torch::serialize::OutputArchive& archive, const std::string& path) {
  files::FileSink file(path);
  archive.save_to([&file](const void* data, size_t size) { return file.Write(data, size); });
  std::string error;
  if (!file.Finish(&error)) throw std::runtime_error(error);
}

torch::Tensor GeneratorState(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void SetGeneratorState(at::Generator generator, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

std::vector<CheckpointInfo> Checkpointer::List() const {
  std::vector<CheckpointInfo> found;
  for (const auto& name : files::ListDirectory(dir_)) {
    auto step = StepOf(name);
    const std::string path = dir_ + "/" + name;
    if (step && files::Exists(path + "/state.pt")) found.push_back({*step, path});
  }
  std::sort(found.begin(), found.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return found;
}

std::optional<CheckpointInfo> Checkpointer::Latest() const {
  auto all = List();
  if (all.empty()) return std::nullopt;
  return all.back();
}

void Checkpointer::Save(uint64_t step, Network& net, const torch::optim::Optimizer& optimizer,
                        const DeviceRef& device, const LossScaler* scaler) const {
  const std::string final_dir = dir_ + "/" + kPrefix + std::to_string(step);
  const std::string tmp_name = ".tmp-" + std::to_string(step) + "-" + std::to_string(getpid());
  const std::string tmp_dir = dir_ + "/" + tmp_name;
  std::string error;
  if (!files::MakeDirectories(tmp_dir, &error)) {
    throw std::runtime_error("cannot write checkpoints: " + error);
  }
  try {
    torch::serialize::OutputArchive model;
    net.save(model);
    SaveArchive(model, tmp_dir + "/model.pt");
    net.WriteExports(tmp_dir);
    torch::serialize::OutputArchive opt;
    optimizer.save(opt);
    SaveArchive(opt, tmp_dir + "/optimizer.pt");
    torch::serialize::OutputArchive state;
    state.write("step", torch::tensor(static_cast<int64_t>(step)));
    state.write("cpu_rng", GeneratorState(at::detail::getDefaultCPUGenerator()));
    if (device.kind == DeviceKind::kCuda) {
      state.write("cuda_rng", GeneratorState(CudaGenerator(device)));
    }
    if (scaler != nullptr) {
      state.write("loss_scale", scaler->scale().cpu());
      state.write("loss_scale_growth_tracker", scaler->growth_tracker().cpu());
      state.write("loss_scale_skipped_steps", scaler->skipped_steps().cpu());
    }
    // state.pt last: its presence marks the checkpoint complete.
    SaveArchive(state, tmp_dir + "/state.pt");
  } catch (const std::exception& e) {
    files::RemoveTree(tmp_dir);
    throw std::runtime_error("cannot write checkpoint " + final_dir + ": " + e.what());
  }
  files::RemoveTree(final_dir);  // a stale one of the same step, from an earlier attempt
  if (!files::Rename(tmp_dir, final_dir, &error)) {
    files::RemoveTree(tmp_dir);
    throw std::runtime_error("cannot rename checkpoint into " + final_dir + ": " + error);
  }
  auto all = List();
  for (size_t i = 0; i + keep_ < all.size(); ++i) files::RemoveTree(all[i].path);
  // Leftovers of writers that died mid-checkpoint.
  for (const auto& name : files::ListDirectory(dir_)) {
    if (name.rfind(".tmp-", 0) == 0) files::RemoveTree(dir_ + "/" + name);
  }
}

uint64_t Checkpointer::Restore(const CheckpointInfo& checkpoint, Network& net,
                               torch::optim::Optimizer& optimizer, const DeviceRef& device,
                               LossScaler* scaler) const {
  const std::string& dir = checkpoint.path;
  const torch::Device target = ToTorchDevice(device);
  torch::serialize::InputArchive model;
  model.load_from(dir + "/model.pt", target);
  net.load(model);
  torch::serialize::InputArchive opt;
  opt.load_from(dir + "/optimizer.pt", target);
  optimizer.load(opt);
  torch::serialize::InputArchive state;
  state.load_from(dir + "/state.pt");
  torch::Tensor step, cpu_rng, cuda_rng;
  state.read("step", step);
  state.read("cpu_rng", cpu_rng);
  SetGeneratorState(at::detail::getDefaultCPUGenerator(), cpu_rng);
  if (device.kind == DeviceKind::kCuda && state.try_read("cuda_rng", cuda_rng)) {
    SetGeneratorState(CudaGenerator(device), cuda_rng);
  }
  torch::Tensor scale, growth_tracker, skipped_steps;
  if (scaler != nullptr && state.try_read("loss_scale", scale) &&
      state.try_read("loss_scale_growth_tracker", growth_tracker) &&
      state.try_read("loss_scale_skipped_steps", skipped_steps)) {
    scaler->Restore(scale, growth_tracker, skipped_steps);
  }
  return static_cast<uint64_t>(step.item<int64_t>());
}

}  // namespace stoke::worker
