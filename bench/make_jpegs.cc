// Photograph-sized JPEGs for bench/images.sh, written with libjpeg-turbo on every core: a
// smooth random colour field with fine noise on top, so that the files are as large and as
// slow to decode as photographs of their size (about 1.5 bits a pixel at quality 90), in
// class folders for data.images.
//
//   stoke-make-jpegs DIR COUNT [WIDTH HEIGHT [CLASSES]]   (default 500 x 375, 10 classes)

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
// clang-format on
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

bool Write(const std::string& path, const std::vector<uint8_t>& rgb, int width, int height) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return false;
  jpeg_compress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(rgb.data()) +
                   static_cast<size_t>(cinfo.next_scanline) * static_cast<size_t>(width) * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return std::fclose(file) == 0;
}

std::vector<uint8_t> Picture(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0, 1);
  std::normal_distribution<float> noise(0, 18);
  // A 6 x 5 grid of colours, interpolated: large smooth areas, as photographs have.
  constexpr int kGx = 6, kGy = 5;
  float grid[kGy][kGx][3];
  for (auto& row : grid) {
    for (auto& cell : row) {
      for (float& c : cell) c = 255 * unit(rng);
    }
  }
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    const float gy = static_cast<float>(y) * (kGy - 1) / height;
    const int y0 = static_cast<int>(gy);
    const float fy = gy - y0;
    for (int x = 0; x < width; ++x) {
      const float gx = static_cast<float>(x) * (kGx - 1) / width;
      const int x0 = static_cast<int>(gx);
      const float fx = gx - x0;
      for (int c = 0; c < 3; ++c) {
        const float top = grid[y0][x0][c] + fx * (grid[y0][x0 + 1][c] - grid[y0][x0][c]);
        const float bottom =
            grid[y0 + 1][x0][c] + fx * (grid[y0 + 1][x0 + 1][c] - grid[y0 + 1][x0][c]);
        const float v = top + fy * (bottom - top) + noise(rng);
        rgb[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  }
  return rgb;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR COUNT [WIDTH HEIGHT [CLASSES]]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int count = std::atoi(argv[2]);
  const int width = argc > 4 ? std::atoi(argv[3]) : 500;
  const int height = argc > 4 ? std::atoi(argv[4]) : 375;
  const int classes = argc > 5 ? std::atoi(argv[5]) : 10;
  mkdir(dir.c_str(), 0755);
  for (int c = 0; c < classes; ++c) mkdir((dir + "/class" + std::to_string(c)).c_str(), 0755);
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads));
  std::vector<int> failed(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = t; i < count; i += threads) {
        char name[32];
        std::snprintf(name, sizeof name, "/%07d.jpg", i);
        const std::string path = dir + "/class" + std::to_string(i % classes) + name;
        if (!Write(path, Picture(width, height, static_cast<uint32_t>(i)), width, height)) {
          ++failed[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  int errors = 0;
  for (int f : failed) errors += f;
  std::printf("wrote %d JPEGs of %d x %d to %s (%d failed)\n", count - errors, width, height,
              dir.c_str(), errors);
  return errors == 0 ? 0 : 1;
}
