// A batch of uint8 images prepared for the model in one kernel launch: widened to fp32 in
// [0, 1], randomly cropped out of its zero-padded self and mirrored (training), and
// normalized per channel. ATen needs about 18 small launches for the same (cast, divide,
// pad, two randint, three arange, adds, gather, permute, contiguous, rand, compare, flip,
// where, subtract, divide), each a few microseconds of a small CNN's step, outside its
// captured graph; this kernel and one randint for the draws replace them.
//
// Torch-free and CUDA-free like the other headers of this folder: raw device pointers,
// the stream as void*, nullptr or CUDA's error text back.
#pragma once

#include <cstdint>

namespace stoke::worker::cuda {

struct ImageBatchShape {
  int64_t batch, channels, height, width;
};

// How many values one image's draw takes: every crop offset (dy, dx) in [0, 2p]^2, times
// two where it may also be mirrored.
constexpr int64_t CropFlipChoices(int64_t padding, bool flip) {
  return (2 * padding + 1) * (2 * padding + 1) * (flip ? 2 : 1);
}

// out[n][c][y][x] = (v * (1/255) - mean[c]) / std_dev[c], rounded at each step as ATen's CUDA
// kernels round `images.to(float).div(255)` and `(x - mean) / std` (a multiply by the
// fp32 reciprocal, then an IEEE subtract and divide), where v is image n's pixel
//   images[n][c][y + dy - padding][x' + dx - padding], x' = flip ? width - 1 - x : x,
// or 0 outside the image (the zero padding): RandomCrop, then RandomHorizontalFlip.
// draws: one int64 per image in [0, CropFlipChoices(padding, flip)), with k = 2p + 1:
// dx = r % k, dy = (r / k) % k, flip = r / k^2; nullptr: no crop and no flip (dy = dx =
// padding). mean and std_dev: `channels` device floats each, or both nullptr: no
// normalization. images: contiguous NCHW; out: NCHW, or NHWC where channels_last.
const char* PrepareImages(const uint8_t* images, const ImageBatchShape& shape, const int64_t* draws,
                          int64_t padding, const float* mean, const float* std_dev,
                          bool channels_last, float* out, void* stream);

}  // namespace stoke::worker::cuda
