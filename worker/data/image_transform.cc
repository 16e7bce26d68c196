#include "worker/data/image_transform.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace stoke::worker {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the next state of `state`.
double Uniform(uint64_t* state) {
  *state = SplitMix(*state);
  return static_cast<double>(*state >> 11) * 0x1.0p-53;
}

}  // namespace

uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c) {
  return SplitMix(SplitMix(SplitMix(a) ^ b) ^ c);
}

data::ImageRegion RandomResizedCrop(int width, int height, double min_area, uint64_t seed) {
  const double area = static_cast<double>(width) * height;
  const double log_low = std::log(3.0 / 4.0), log_high = std::log(4.0 / 3.0);
  uint64_t state = seed;
  // torchvision's rule: ten tries at a crop that fits, then the centre at a clamped aspect.
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (min_area + (1.0 - min_area) * Uniform(&state));
    const double aspect = std::exp(log_low + (log_high - log_low) * Uniform(&state));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int x = static_cast<int>(Uniform(&state) * (width - w + 1));
      const int y = static_cast<int>(Uniform(&state) * (height - h + 1));
      return {std::min(x, width - w), std::min(y, height - h), w, h};
    }
  }
  const double ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (ratio < 3.0 / 4.0) {
    h = static_cast<int>(std::lround(w / (3.0 / 4.0)));
  } else if (ratio > 4.0 / 3.0) {
    w = static_cast<int>(std::lround(h * (4.0 / 3.0)));
  }
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

data::ImageRegion CentreCrop(int width, int height) {
  const int side = std::max(1, static_cast<int>(std::lround(0.875 * std::min(width, height))));
  return {(width - side) / 2, (height - side) / 2, side, side};
}

void ResizeToChw(const data::DecodedImage& image, int side, uint8_t* out) {
  const int c = image.channels, w = image.width, h = image.height;
  // Source coordinates of each output column and row (pixel centres aligned), as two
  // neighbours and the weight of the second, computed once per image.
  struct Tap {
    int first, second;
    float weight;
  };
  auto taps = [side](int in) {
    std::vector<Tap> t(static_cast<size_t>(side));
    const double scale = static_cast<double>(in) / side;
    for (int o = 0; o < side; ++o) {
      const double x = std::clamp((o + 0.5) * scale - 0.5, 0.0, in - 1.0);
      const int first = static_cast<int>(x);
      t[static_cast<size_t>(o)] = {first, std::min(first + 1, in - 1),
                                   static_cast<float>(x - first)};
    }
    return t;
  };
  const std::vector<Tap> xs = taps(w), ys = taps(h);
  const uint8_t* p = image.pixels.data();
  const size_t plane = static_cast<size_t>(side) * side;
  for (int oy = 0; oy < side; ++oy) {
    const Tap& ty = ys[static_cast<size_t>(oy)];
    const uint8_t* row0 = p + static_cast<size_t>(ty.first) * w * c;
    const uint8_t* row1 = p + static_cast<size_t>(ty.second) * w * c;
    for (int ox = 0; ox < side; ++ox) {
      const Tap& tx = xs[static_cast<size_t>(ox)];
      for (int k = 0; k < c; ++k) {
        const float top =
            row0[tx.first * c + k] + tx.weight * (row0[tx.second * c + k] - row0[tx.first * c + k]);
        const float bottom =
            row1[tx.first * c + k] + tx.weight * (row1[tx.second * c + k] - row1[tx.first * c + k]);
        const float v = top + ty.weight * (bottom - top);
        out[k * plane + static_cast<size_t>(oy) * side + ox] =
            static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f));
      }
    }
  }
}

}  // namespace stoke::worker
