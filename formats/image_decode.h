// JPEG and PNG images decoded from memory, on the loader threads: JPEG with libjpeg-turbo,
// decoding only the rows and columns of the region asked for and scaled down in the DCT
// domain (by 2, 4 or 8) where the region is much larger than needed; PNG with libpng.
// Torch-free; thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoke::data {

struct ImageSize {
  int width = 0;
  int height = 0;
};

// A rectangle of the image, in its full-resolution pixels.
struct ImageRegion {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

// Decoded pixels, [height, width, channels] uint8.
struct DecodedImage {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;
};

// The size from the header alone; INVALID_ARGUMENT (DATA_LOSS for a damaged header) when
// the bytes are neither JPEG nor PNG.
absl::StatusOr<ImageSize> ReadImageSize(const uint8_t* data, size_t size);

// The pixels of `region` (clipped to the image) in `channels` (1: grey, 3: RGB; grey
// images are replicated, colour ones converted, alpha dropped). A JPEG is scaled down by
// the largest of 1, 2, 4 or 8 that leaves the region at least `min_side` pixels on both
// sides, so the result may be smaller than the region (by that factor). DATA_LOSS for a
// damaged or cut-off image.
absl::StatusOr<DecodedImage> DecodeImageRegion(const uint8_t* data, size_t size, int channels,
                                               const ImageRegion& region, int min_side);

}  // namespace stoke::data
