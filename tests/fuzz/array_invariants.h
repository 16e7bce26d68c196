// What every array a reader opens must hold to, for the array fuzz targets (.npy and
// safetensors): each row lies in the file (rows of no bytes are refused), and an integer
// array's range scan answers with a range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/array_file.h"

namespace stoke::fuzz {

inline void CheckArray(const data::ArrayFile& array, size_t file_bytes) {
  if (array.row_bytes() <= 0 || array.rows() <= 0 ||
      array.rows() > static_cast<int64_t>(file_bytes) / array.row_bytes()) {
    __builtin_trap();
  }
  if (data::IsInteger(array.dtype())) {
    int64_t min = 0, max = 0;
    if (!array.IntegerRange(0, array.rows(), &min, &max).ok() || min > max) __builtin_trap();
  }
}

}  // namespace stoke::fuzz
