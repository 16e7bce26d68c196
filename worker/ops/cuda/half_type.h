// The 16-bit floating types Stoke's kernels read and write, named without CUDA's headers
// so that torch-side callers can pass them.
#pragma once

namespace stoke::worker::cuda {

enum class HalfType { kBFloat16, kFloat16 };

}  // namespace stoke::worker::cuda
