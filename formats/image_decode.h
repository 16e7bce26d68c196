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

// The most pixels (width x height, as the header declares them) of an image Stoke decodes:
// 100 megapixels, 300 MB as RGB, several times any photograph a model trains on (a 24 MP
// camera's frame is a quarter of it). Larger declared sizes are refused from the header,
// before any pixel is decoded or any buffer sized from it: a few kilobytes of PNG or JPEG
// can declare 65500 x 65500 pixels (12 GB as RGB) and take minutes to decode.
inline constexpr int64_t kMaxImagePixels = 100'000'000;

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
// the bytes are neither JPEG nor PNG, or when the header declares more than
// kMaxImagePixels (the message gives the declared width and height).
absl::StatusOr<ImageSize> ReadImageSize(const uint8_t* data, size_t size);

// The pixels of `region` (clipped to the image) in `channels` (1: grey, 3: RGB; grey
// images are replicated, colour ones converted, alpha dropped). A JPEG is scaled down by
// the largest of 1, 2, 4 or 8 that leaves the region at least `min_side` pixels on both
// sides, so the result may be smaller than the region (by that factor). DATA_LOSS for a
// damaged or cut-off image; INVALID_ARGUMENT, from the header before decoding, for one
// declaring more than kMaxImagePixels.
absl::StatusOr<DecodedImage> DecodeImageRegion(const uint8_t* data, size_t size, int channels,
                                               const ImageRegion& region, int min_side);

}  // namespace stoke::data
