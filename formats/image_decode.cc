#include "formats/image_decode.h"

// clang-format off
#include <cstdio>   // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace stoke::data {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

bool IsJpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

bool IsPng(const uint8_t* data, size_t size) {
  return size >= 8 && std::memcmp(data, kPngSignature, 8) == 0;
}

absl::Status NeitherFormat() {
  return absl::InvalidArgumentError("neither JPEG nor PNG (by its first bytes)");
}

// INVALID_ARGUMENT for a header declaring more pixels than Stoke decodes (kMaxImagePixels).
// Both sides are below 2^32, so their product fits.
absl::Status CheckPixels(const char* format, uint64_t width, uint64_t height) {
  const uint64_t pixels = width * height;
  if (pixels <= static_cast<uint64_t>(kMaxImagePixels)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(format, " declares ", width, "x", height, " pixels (", pixels,
                   "), more than the ", kMaxImagePixels, " (", kMaxImagePixels / 1000000,
                   " megapixels) Stoke decodes; refused before decoding"));
}

// A PNG's size from its IHDR chunk, which must come first (after the signature): its
// length, "IHDR", then width and height, big-endian. Checked against kMaxImagePixels here,
// before libpng reads anything.
absl::StatusOr<ImageSize> PngSize(const uint8_t* data, size_t size) {
  if (size < 24 || std::memcmp(data + 12, "IHDR", 4) != 0) {
    return absl::DataLossError("damaged PNG: no IHDR chunk first");
  }
  auto big_endian = [&](size_t at) {
    return (uint32_t{data[at]} << 24) | (uint32_t{data[at + 1]} << 16) |
           (uint32_t{data[at + 2]} << 8) | data[at + 3];
  };
  const uint32_t width = big_endian(16), height = big_endian(20);
  if (width == 0 || height == 0) return absl::DataLossError("damaged PNG: a size of zero");
  // The format's own limit on a side.
  if (width > 0x7fffffffu || height > 0x7fffffffu) {
    return absl::DataLossError("damaged PNG: a side over 2^31 - 1 pixels");
  }
  if (auto s = CheckPixels("PNG", width, height); !s.ok()) return s;
  return ImageSize{static_cast<int>(width), static_cast<int>(height)};
}

ImageRegion Clip(const ImageRegion& r, int width, int height) {
  ImageRegion c;
  c.x = std::clamp(r.x, 0, std::max(width - 1, 0));
  c.y = std::clamp(r.y, 0, std::max(height - 1, 0));
  c.width = std::clamp(r.width, 1, width - c.x);
  c.height = std::clamp(r.height, 1, height - c.y);
  return c;
}

// libjpeg reports errors by calling error_exit, which must not return: it jumps back to
// the decoder's setjmp. A premature end of the data is only a warning to libjpeg (it fills
// the rest grey); here it makes the image bad.
struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool cut_off;
};

void JpegFail(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void JpegMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    reinterpret_cast<JpegErrors*>(cinfo->err)->cut_off = true;
  }
}

// Header only, or the region's pixels (`out` non-null). No C++ object with a destructor
// lives in this frame between setjmp and a longjmp back to it.
absl::Status Jpeg(const uint8_t* data, size_t size, int channels, const ImageRegion* region,
                  int min_side, ImageSize* dimensions, DecodedImage* out) {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  cinfo.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = JpegFail;
  errors.manager.emit_message = JpegMessage;
  errors.cut_off = false;
  errors.message[0] = '\0';
  std::vector<uint8_t>* row = nullptr;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    delete row;
    return absl::DataLossError(absl::StrCat("damaged JPEG: ", errors.message));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, size);
  jpeg_read_header(&cinfo, TRUE);
  const int width = static_cast<int>(cinfo.image_width);
  const int height = static_cast<int>(cinfo.image_height);
  *dimensions = {width, height};
  // Too many pixels: refused from the header, before libjpeg sizes a buffer from it.
  if (out == nullptr || int64_t{width} * height > kMaxImagePixels) {
    jpeg_destroy_decompress(&cinfo);
    return CheckPixels("JPEG", cinfo.image_width, cinfo.image_height);
  }
  const ImageRegion r = Clip(*region, width, height);
  // The DCT-domain scale: each halving is nearly free, and decoding fewer pixels is most of
  // the saving for large photographs trained at small sizes.
  unsigned denominator = 1;
  while (denominator < 8 && r.width / static_cast<int>(2 * denominator) >= min_side &&
         r.height / static_cast<int>(2 * denominator) >= min_side) {
    denominator *= 2;
  }
  cinfo.scale_num = 1;
  cinfo.scale_denom = denominator;
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const double sx = static_cast<double>(cinfo.output_width) / width;
  const double sy = static_cast<double>(cinfo.output_height) / height;
  const int x0 = static_cast<int>(std::floor(r.x * sx));
  const int y0 = static_cast<int>(std::floor(r.y * sy));
  const int x1 = std::max(
      x0 + 1, std::min<int>(cinfo.output_width, static_cast<int>(std::ceil((r.x + r.width) * sx))));
  const int y1 = std::max(
      y0 + 1,
      std::min<int>(cinfo.output_height, static_cast<int>(std::ceil((r.y + r.height) * sy))));
  // Only the region's columns (widened by libjpeg to whole blocks) and rows are decoded.
  JDIMENSION crop_x = static_cast<JDIMENSION>(x0);
  JDIMENSION crop_width = static_cast<JDIMENSION>(x1 - x0);
  if (crop_width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &crop_x, &crop_width);
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
  row = new std::vector<uint8_t>(static_cast<size_t>(cinfo.output_width) * channels);
  out->width = x1 - x0;
  out->height = y1 - y0;
  out->channels = channels;
  out->pixels.resize(static_cast<size_t>(out->width) * out->height * channels);
  const size_t skip = static_cast<size_t>(x0 - static_cast<int>(crop_x)) * channels;
  for (int y = 0; y < out->height; ++y) {
    JSAMPROW rows[1] = {row->data()};
    jpeg_read_scanlines(&cinfo, rows, 1);
    std::memcpy(out->pixels.data() + static_cast<size_t>(y) * out->width * channels,
                row->data() + skip, static_cast<size_t>(out->width) * channels);
  }
  delete row;
  row = nullptr;
  const bool cut_off = errors.cut_off;
  jpeg_destroy_decompress(&cinfo);  // the rows below the region are never decoded
  if (cut_off) return absl::DataLossError("damaged JPEG: the data ends before the image does");
  return absl::OkStatus();
}

absl::StatusOr<DecodedImage> Png(const uint8_t* data, size_t size, int channels,
                                 const ImageRegion& region) {
  // The declared size first, from the IHDR bytes: nothing is decoded or sized beyond it.
  if (auto declared = PngSize(data, size); !declared.ok()) return declared.status();
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size)) {
    return absl::DataLossError(absl::StrCat("damaged PNG: ", image.message));
  }
  if (auto s = CheckPixels("PNG", image.width, image.height); !s.ok()) {
    png_image_free(&image);
    return s;
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  std::vector<uint8_t> full(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, full.data(), 0, nullptr)) {
    png_image_free(&image);
    return absl::DataLossError(absl::StrCat("damaged PNG: ", image.message));
  }
  const int width = static_cast<int>(image.width), height = static_cast<int>(image.height);
  const ImageRegion r = Clip(region, width, height);
  DecodedImage out;
  out.width = r.width;
  out.height = r.height;
  out.channels = channels;
  out.pixels.resize(static_cast<size_t>(r.width) * r.height * channels);
  for (int y = 0; y < r.height; ++y) {
    std::memcpy(out.pixels.data() + static_cast<size_t>(y) * r.width * channels,
                full.data() + (static_cast<size_t>(r.y + y) * width + r.x) * channels,
                static_cast<size_t>(r.width) * channels);
  }
  return out;
}

}  // namespace

absl::StatusOr<ImageSize> ReadImageSize(const uint8_t* data, size_t size) {
  if (IsJpeg(data, size)) {
    ImageSize dimensions;
    if (auto s = Jpeg(data, size, 3, nullptr, 0, &dimensions, nullptr); !s.ok()) return s;
    return dimensions;
  }
  if (IsPng(data, size)) return PngSize(data, size);
  return NeitherFormat();
}

absl::StatusOr<DecodedImage> DecodeImageRegion(const uint8_t* data, size_t size, int channels,
                                               const ImageRegion& region, int min_side) {
  if (IsJpeg(data, size)) {
    DecodedImage out;
    ImageSize dimensions;
    if (auto s = Jpeg(data, size, channels, &region, min_side, &dimensions, &out); !s.ok()) {
      return s;
    }
    return out;
  }
  if (IsPng(data, size)) return Png(data, size, channels, region);
  return NeitherFormat();
}

}  // namespace stoke::data
