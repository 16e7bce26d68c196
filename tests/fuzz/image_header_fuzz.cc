// libFuzzer target: the JPEG and PNG readers (libjpeg-turbo's jpeg_read_header, the PNG
// IHDR read here, then libpng) as the coordinator runs them on a sample of data.images
// and the worker's loader on every image: the size from the header, then a region decoded.
// The first 8 bytes pick the region, the channels and the smallest side; the rest is the
// image. Each must answer or fail, never crash, and never decode (nor size a buffer for)
// more than kMaxImagePixels: what the header check refuses, decoding refuses too. Images
// the header check accepts are decoded when they declare at most 4 megapixels, which keeps
// each run fast and within -rss_limit_mb; larger ones take the same code more slowly.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const auto side = [&](int at) { return (data[at] << 8) | data[at + 1]; };
  const stoke::data::ImageRegion region{side(0), side(2), side(4), side(6)};
  const int channels = (data[0] & 1) ? 1 : 3;
  const int min_side = 1 + (data[7] % 64);
  data += 8;
  size -= 8;
  auto header = stoke::data::ReadImageSize(data, size);
  if (header.ok()) {
    if (header->width <= 0 || header->height <= 0 ||
        int64_t{header->width} * header->height > stoke::data::kMaxImagePixels) {
      __builtin_trap();
    }
    if (int64_t{header->width} * header->height > (int64_t{4} << 20)) return 0;
  }
  auto decoded = stoke::data::DecodeImageRegion(data, size, channels, region, min_side);
  if (!decoded.ok()) return 0;
  // Decoded only what the header declared (scaled down by up to 8 for a JPEG).
  if (!header.ok() || decoded->channels != channels || decoded->width <= 0 ||
      decoded->height <= 0 || decoded->width > header->width || decoded->height > header->height ||
      decoded->pixels.size() != static_cast<size_t>(decoded->width) * decoded->height * channels) {
    __builtin_trap();
  }
  return 0;
}
