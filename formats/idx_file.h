// MNIST's idx format (http://yann.lecun.com/exdb/mnist/): a big-endian header (two zero
// bytes, a type code, the number of dimensions, then each dimension as a 32-bit count)
// followed by the data. Read plain or gzip-compressed. Free of torch and protobuf, so
// the coordinator checks files with the same code the worker loads them with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/read_options.h"

namespace stoke::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // row-major, dims' product long
};

// Reads a whole idx file of unsigned bytes with `expected_dims` dimensions. The errors
// name the file and what is wrong with it (missing, wrong magic number, truncated), never
// quoting its bytes.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_dims,
                                     const ReadOptions& options = {});

struct IdxShape {
  std::vector<int64_t> dims;
  int max_value = -1;  // the largest byte when asked for (labels); -1 otherwise
};

// What an idx file holds, without loading it: the header; a check that the data is as
// long as the header says (the file's size; gzipped, the size its trailer records); and,
// with `scan_max`, the largest value, read a piece at a time. Memory stays small whatever
// the file's size or compression ratio: the coordinator checks submissions with it.
absl::StatusOr<IdxShape> InspectIdxFile(const std::string& path, int expected_dims, bool scan_max,
                                        const ReadOptions& options = {});

}  // namespace stoke::data
