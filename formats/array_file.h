// Arrays of samples in NumPy's .npy files or in safetensors files, mapped into memory and
// never read whole: row i (the first dimension) is sample i. Torch-free, so that the
// coordinator checks a submission with the reader the worker trains from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/read_options.h"

namespace stoke::data {

enum class ArrayDtype { kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32 };

// "uint8", "int64", "float16", ...
const char* DtypeName(ArrayDtype dtype);
int64_t ElementBytes(ArrayDtype dtype);
inline bool IsInteger(ArrayDtype dtype) {
  return dtype == ArrayDtype::kUInt8 || dtype == ArrayDtype::kInt32 || dtype == ArrayDtype::kInt64;
}

class ArrayFile {
 public:
  // `name` is "file.npy", "file.safetensors" (a file holding one tensor) or
  // "file.safetensors:tensor". Errors name it and say what is wrong: a missing file or
  // tensor, a dtype Stoke cannot train on, Fortran order, a size that disagrees with the
  // header. Nothing is read but the header.
  static absl::StatusOr<std::shared_ptr<const ArrayFile>> Open(const std::string& name,
                                                               const ReadOptions& options = {});
  ~ArrayFile();
  ArrayFile(const ArrayFile&) = delete;
  ArrayFile& operator=(const ArrayFile&) = delete;

  const std::string& name() const { return name_; }
  ArrayDtype dtype() const { return dtype_; }
  // [rows, ...]: at least one dimension.
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rows() const { return shape_[0]; }
  // One row's dimensions (shape without the first) and bytes.
  std::vector<int64_t> row_shape() const { return {shape_.begin() + 1, shape_.end()}; }
  int64_t row_bytes() const { return row_bytes_; }
  const uint8_t* row(int64_t i) const { return data_ + i * row_bytes_; }

  // The smallest and largest value of an integer array's rows [begin, end), read a piece
  // at a time (looking at options.cancel between pieces).
  absl::Status IntegerRange(int64_t begin, int64_t end, int64_t* min, int64_t* max,
                            const ReadOptions& options = {}) const;

 private:
  ArrayFile() = default;

  std::string name_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* data_ = nullptr;
  ArrayDtype dtype_ = ArrayDtype::kUInt8;
  std::vector<int64_t> shape_;
  int64_t row_bytes_ = 0;
};

// The arrays in `path`: itself for a .npy file, "path:tensor" for each tensor of a
// safetensors file (reading its header only).
absl::StatusOr<std::vector<std::string>> ListArrays(const std::string& path,
                                                    const ReadOptions& options = {});

// The header of one .npy file held in memory (a member of a tar shard, one sample): the
// elements' dtype, the array's shape (no rows dimension implied) and where its data begins.
// INVALID_ARGUMENT naming `name` for what ArrayFile::Open refuses, or data shorter than the
// header promises. `bytes` may be only the first `size` of the file's `whole` bytes (its
// head; -1: they are all of it): the header must lie within them, the data within `whole`.
struct NpyHeader {
  ArrayDtype dtype = ArrayDtype::kUInt8;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  int64_t data_bytes = 0;
};
absl::StatusOr<NpyHeader> ReadNpyHeader(const std::string& name, const uint8_t* bytes, size_t size,
                                        int64_t whole = -1);

// Splits "file.safetensors:tensor" into the file and the tensor's name (empty when none
// is named); any other name is a file.
std::pair<std::string, std::string> SplitArrayName(const std::string& name);

}  // namespace stoke::data
