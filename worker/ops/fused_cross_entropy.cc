#include "worker/ops/fused_cross_entropy.h"

#include <torch/torch.h>

#include "worker/ops/step_context.h"

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "worker/ops/cuda/cross_entropy_kernels.h"
#include "worker/ops/own_kernel_call.h"
#endif

namespace stoke::worker {

#if STOKE_WITH_CUDA_KERNELS
namespace {

void CheckLaunch(const char* error) { CheckKernel(error, "cross-entropy"); }

cuda::HalfType LogitTypeOf(const torch::Tensor& logits) {
  return HalfTypeOf(logits.scalar_type(), "fused cross-entropy");
}

void CheckShapes(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous() && targets.dim() == 1 &&
                  targets.size(0) == logits.size(0) && targets.scalar_type() == torch::kLong &&
                  targets.is_contiguous(),
              "fused cross-entropy: expected contiguous logits [N, C] and int64 targets [N], "
              "got ",
              logits.sizes(), " and ", targets.sizes());
}

}  // namespace

bool FusedCrossEntropyApplies(const torch::Tensor& logits) {
  return OwnKernelsAllowed() && logits.is_cuda() &&
         (logits.scalar_type() == torch::kBFloat16 || logits.scalar_type() == torch::kHalf);
}

void FusedCrossEntropyRows(const torch::Tensor& logits, const torch::Tensor& targets,
                           torch::Tensor& row_loss, torch::Tensor& row_lse) {
  CheckShapes(logits, targets);
  TORCH_CHECK(row_loss.is_contiguous() && row_lse.is_contiguous() &&
                  row_loss.scalar_type() == torch::kFloat32 &&
                  row_lse.scalar_type() == torch::kFloat32 && row_loss.numel() == logits.size(0) &&
                  row_lse.numel() == logits.size(0),
              "fused cross-entropy: row outputs must be contiguous fp32 [N]");
  const c10::cuda::CUDAGuard device(logits.device());
  CheckLaunch(cuda::CrossEntropyForward(logits.data_ptr(), LogitTypeOf(logits),
                                        targets.data_ptr<int64_t>(), logits.size(0), logits.size(1),
                                        row_loss.data_ptr<float>(), row_lse.data_ptr<float>(),
                                        CurrentStreamOf(logits)));
}

void FusedCrossEntropyGradInto(const torch::Tensor& logits, const torch::Tensor& targets,
                               const torch::Tensor& row_lse, const torch::Tensor& grad_loss,
                               double scale, torch::Tensor& grad) {
  CheckShapes(logits, targets);
  TORCH_CHECK(grad.sizes() == logits.sizes() && grad.scalar_type() == logits.scalar_type() &&
                  grad.is_contiguous() && grad.device() == logits.device(),
              "fused cross-entropy: the gradient must be laid out as the logits ", logits.sizes(),
              ", got ", grad.sizes());
  const c10::cuda::CUDAGuard device(logits.device());
  const torch::Tensor lse = row_lse.contiguous();
  const torch::Tensor incoming = grad_loss.to(torch::kFloat32).contiguous();
  CheckLaunch(cuda::CrossEntropyBackward(
      logits.data_ptr(), LogitTypeOf(logits), targets.data_ptr<int64_t>(), lse.data_ptr<float>(),
      incoming.data_ptr<float>(), static_cast<float>(scale), logits.size(0), logits.size(1),
      grad.data_ptr(), CurrentStreamOf(logits)));
}

torch::Tensor FusedCrossEntropyGrad(const torch::Tensor& logits, const torch::Tensor& targets,
                                    const torch::Tensor& row_lse, const torch::Tensor& grad_loss,
                                    double scale) {
  torch::Tensor grad = torch::empty_like(logits, torch::MemoryFormat::Contiguous);
  FusedCrossEntropyGradInto(logits, targets, row_lse, grad_loss, scale, grad);
  return grad;
}

#else

bool FusedCrossEntropyApplies(const torch::Tensor& /*logits*/) { return false; }

void FusedCrossEntropyRows(const torch::Tensor& /*logits*/, const torch::Tensor& /*targets*/,
                           torch::Tensor& /*row_loss*/, torch::Tensor& /*row_lse*/) {
  TORCH_CHECK(false, "this build has no CUDA kernels of Stoke's own (built without nvcc)");
}

torch::Tensor FusedCrossEntropyGrad(const torch::Tensor& /*logits*/,
                                    const torch::Tensor& /*targets*/,
                                    const torch::Tensor& /*row_lse*/,
                                    const torch::Tensor& /*grad_loss*/, double /*scale*/) {
  TORCH_CHECK(false, "this build has no CUDA kernels of Stoke's own (built without nvcc)");
}

void FusedCrossEntropyGradInto(const torch::Tensor& /*logits*/, const torch::Tensor& /*targets*/,
                               const torch::Tensor& /*row_lse*/, const torch::Tensor& /*grad_loss*/,
                               double /*scale*/, torch::Tensor& /*grad*/) {
  TORCH_CHECK(false, "this build has no CUDA kernels of Stoke's own (built without nvcc)");
}

#endif

}  // namespace stoke::worker
