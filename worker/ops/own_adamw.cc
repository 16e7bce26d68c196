#include "worker/ops/own_adamw.h"

#include <torch/torch.h>

#if STOKE_WITH_CUDA_KERNELS
#include "worker/ops/cuda/adamw_kernels.h"
#include "worker/ops/own_kernel_call.h"
#endif

namespace stoke::worker {

#if STOKE_WITH_CUDA_KERNELS

namespace {

// Whether t's elements lie in memory in p's order, p and t both dense: the same sizes,
// and the same strides wherever a size is above 1. A dimension of size 1 may carry any
// stride: a channels-last weight of one input channel, [32, 1, 3, 3], has strides
// (9, 1, 3, 1), and the gradient cuDNN gives it (9, 9, 3, 1), the same bytes in the same
// order (and so do 1x1 convolutions' weights). Comparing all strides refused them, and
// with them the whole model's update went to ATen's kernel.
bool LaidOutAlike(const torch::Tensor& t, const torch::Tensor& p) {
  if (t.sizes() != p.sizes() || !t.is_non_overlapping_and_dense()) return false;
  for (int64_t d = 0; d < p.dim(); ++d) {
    if (p.size(d) > 1 && t.stride(d) != p.stride(d)) return false;
  }
  return true;
}

}  // namespace

bool OwnAdamWApplies(const OwnAdamWTensors& tensors) {
  const size_t n = tensors.params.size();
  if (n == 0 || tensors.grads.size() != n || tensors.exp_avgs.size() != n ||
      tensors.exp_avg_sqs.size() != n) {
    return false;
  }
  const torch::Device device = tensors.params.front().device();
  if (!device.is_cuda()) return false;
  for (size_t i = 0; i < n; ++i) {
    const torch::Tensor& p = tensors.params[i];
    for (const torch::Tensor* t :
         {&p, &tensors.grads[i], &tensors.exp_avgs[i], &tensors.exp_avg_sqs[i]}) {
      if (t->scalar_type() != torch::kFloat32 || t->device() != device || !LaidOutAlike(*t, p)) {
        return false;
      }
    }
  }
  if (tensors.half_copies.empty()) return true;
  if (tensors.half_copies.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    const torch::Tensor& copy = tensors.half_copies[i];
    if (!copy.defined()) continue;
    const auto type = copy.scalar_type();
    if ((type != torch::kBFloat16 && type != torch::kFloat16) || copy.device() != device ||
        !LaidOutAlike(copy, tensors.params[i])) {
      return false;
    }
  }
  return true;
}

bool TryOwnAdamWStep(const OwnAdamWTensors& tensors, const torch::Tensor& lr,
                     const torch::Tensor& step, const std::optional<torch::Tensor>& found_inf,
                     double beta1, double beta2, double eps, double weight_decay) {
  if (!OwnAdamWApplies(tensors)) return false;
  for (const torch::Tensor* scalar : {&lr, &step}) {
    TORCH_CHECK(scalar->scalar_type() == torch::kFloat32 && scalar->numel() == 1 &&
                    scalar->device() == tensors.params.front().device(),
                "AdamW's step count and learning rate must be fp32 scalars on the device");
  }
  std::vector<cuda::AdamWSegment> segments;
  segments.reserve(tensors.params.size());
  for (size_t i = 0; i < tensors.params.size(); ++i) {
    cuda::AdamWSegment segment;
    segment.param = tensors.params[i].data_ptr<float>();
    segment.grad = tensors.grads[i].data_ptr<float>();
    segment.exp_avg = tensors.exp_avgs[i].data_ptr<float>();
    segment.exp_avg_sq = tensors.exp_avg_sqs[i].data_ptr<float>();
    segment.count = tensors.params[i].numel();
    if (!tensors.half_copies.empty() && tensors.half_copies[i].defined()) {
      const torch::Tensor& copy = tensors.half_copies[i];
      segment.half_copy = copy.data_ptr();
      segment.half_type = HalfTypeOf(copy.scalar_type(), "AdamW's weight copy");
    }
    if (segment.count > 0) segments.push_back(segment);
  }
  cuda::AdamWHyperparameters hyper;
  hyper.beta1 = static_cast<float>(beta1);
  hyper.beta2 = static_cast<float>(beta2);
  hyper.eps = static_cast<float>(eps);
  hyper.weight_decay = static_cast<float>(weight_decay);
  const float* inf = found_inf ? found_inf->data_ptr<float>() : nullptr;
  CheckKernel(
      cuda::AdamWStep(segments.data(), static_cast<int>(segments.size()), lr.data_ptr<float>(),
                      step.data_ptr<float>(), inf, hyper, CurrentStreamOf(tensors.params.front())),
      "AdamW");
  return true;
}

#else

bool OwnAdamWApplies(const OwnAdamWTensors& /*tensors*/) { return false; }

bool TryOwnAdamWStep(const OwnAdamWTensors& /*tensors*/, const torch::Tensor& /*lr*/,
                     const torch::Tensor& /*step*/,
                     const std::optional<torch::Tensor>& /*found_inf*/, double /*beta1*/,
                     double /*beta2*/, double /*eps*/, double /*weight_decay*/) {
  return false;
}

#endif

}  // namespace stoke::worker
