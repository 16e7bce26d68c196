// TorchScript models: loading, sharing the scripted module's tensors with the wrapper, and
// forwarding train/eval and forward calls to it.
#include "worker/models/torchscript_model.h"

#include <torch/csrc/jit/serialization/import.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <istream>
#include <stdexcept>
#include <streambuf>
#include <string>
#include <unordered_set>
#include <vector>

#include "worker/common/status_error.h"

namespace stoke::worker {
namespace {

[[noreturn]] void Fail(const std::string& path, const std::string& reason) {
  throw std::invalid_argument("model.torchscript.path: " + path + ": " + reason);
}

// A file read through a descriptor already checked and opened, with the seeks torch's
// zip reader makes (it reads the archive's directory at the end first). Loading by name
// instead would open the path a second time, unchecked, and block on a FIFO.
class DescriptorBuffer final : public std::streambuf {
 public:
  DescriptorBuffer(int fd, long long size) : fd_(fd), size_(size) {}
  ~DescriptorBuffer() override { close(fd_); }
  DescriptorBuffer(const DescriptorBuffer&) = delete;
  DescriptorBuffer& operator=(const DescriptorBuffer&) = delete;

 protected:
  int_type underflow() override {
    ssize_t n;
    do {
      n = pread(fd_, buffer_, sizeof(buffer_), static_cast<off_t>(next_));
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return traits_type::eof();
    setg(buffer_, buffer_, buffer_ + n);
    next_ += n;
    return traits_type::to_int_type(buffer_[0]);
  }
  pos_type seekoff(off_type offset, std::ios_base::seekdir from,
                   std::ios_base::openmode which) override {
    const off_type here = static_cast<off_type>(next_) - (egptr() - gptr());
    const off_type base = from == std::ios_base::beg   ? 0
                          : from == std::ios_base::cur ? here
                                                       : static_cast<off_type>(size_);
    return seekpos(pos_type(base + offset), which);
  }
  pos_type seekpos(pos_type position, std::ios_base::openmode) override {
    if (off_type(position) < 0) return pos_type(off_type(-1));
    next_ = static_cast<long long>(off_type(position));
    setg(buffer_, buffer_, buffer_);  // nothing buffered: the next read starts there
    return position;
  }

 private:
  int fd_;
  long long size_;
  long long next_ = 0;  // the file offset the buffer's end stands for
  char buffer_[1 << 16];
};

torch::jit::Module Load(const std::string& path, const data::ReadOptions& files) {
  if (path.empty()) Fail(path, "not set");
  // Opened first, without waiting (a FIFO is refused) and beneath the data roots: the
  // plain reason (no such file, not a regular file) rather than the zip reader's message.
  long long size = 0;
  auto opened = data::OpenDataFile(path, files, &size);
  if (!opened.ok()) {
    ThrowIfError(absl::Status(opened.status().code(),
                              "model.torchscript.path: " + std::string(opened.status().message())));
  }
  DescriptorBuffer buffer(*opened, size);
  std::istream in(&buffer);
  try {
    // Onto the CPU, whatever device it was saved from: the trainer moves the model to its
    // own device, and a module saved on a GPU must still load on a machine without one.
    return torch::jit::load(in, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    Fail(path, e.what_without_backtrace());
  }
}

// torch::nn::Module names may not contain '.', which joins a scripted module's nested
// names ("encoder.weight").
std::string FlatName(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

}  // namespace

TorchScriptModelImpl::TorchScriptModelImpl(const TorchScriptConfig& config,
                                           const data::ReadOptions& files)
    : config_(config), module_(Load(config.path, files)) {
  int64_t count = 0;
  // A tensor the module shares between two submodules (tied weights) is registered once,
  // or the optimizer would step it twice.
  std::unordered_set<const void*> seen;
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    if (!seen.insert(p.value.unsafeGetTensorImpl()).second) continue;
    // The same tensor, not a copy: what the optimizer steps and to(device) moves is what
    // the scripted forward reads. Every parameter is trained: one registered from C++ as
    // a plain tensor has requires_grad off, which would silently freeze it.
    register_parameter(FlatName(p.name), p.value, /*requires_grad=*/true);
    count += p.value.numel();
  }
  for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
    if (seen.insert(b.value.unsafeGetTensorImpl()).second) {
      register_buffer(FlatName(b.name), b.value);
    }
  }
  // An approximation: nothing says how often an arbitrary module uses each weight. A
  // dense layer uses each once per sample, 2 FLOPs forward and 4 backward; convolutions
  // and recurrences use theirs many times, so this undercounts them.
  flops_ = 6 * count;
}

torch::Tensor TorchScriptModelImpl::forward(const torch::Tensor& inputs) {
  const c10::IValue out = module_.forward(std::vector<c10::IValue>{inputs});
  TORCH_CHECK(out.isTensor(), "model.torchscript: forward returned ", out.tagKind(),
              ", not a tensor");
  return out.toTensor();
}

void TorchScriptModelImpl::train(bool on) {
  Network::train(on);
  // Not module_.train(): it asserts that every submodule has a `training` attribute, and
  // a module built from C++ (torch::jit::Module's constructor) has none.
  for (torch::jit::Module m : module_.modules()) {
    if (m.hasattr("training")) m.setattr("training", on);
  }
}

void TorchScriptModelImpl::WriteExports(const std::string& dir) {
  torch::NoGradGuard no_grad;
  torch::jit::Module copy = module_.deepcopy();
  copy.to(torch::kCPU);
  copy.save(dir + "/model.torchscript.pt");
}

}  // namespace stoke::worker
