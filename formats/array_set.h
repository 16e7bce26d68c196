// A data set of arrays (data.arrays): inputs and targets, row i of each one sample, with
// held-out rows for evaluation, and what they imply for a model: images or vectors, class
// indices or regression targets. The coordinator checks a submission with it and the
// worker trains from it, so that what passes one loads in the other. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/array_file.h"
#include "formats/read_options.h"

namespace stoke::data {

struct ArrayNames {
  std::string inputs;
  std::string targets;
  std::string val_inputs;  // with val_targets; empty: hold out val_fraction of the rows
  std::string val_targets;
  double val_fraction = 0.1;
};

struct ArraySet {
  std::shared_ptr<const ArrayFile> inputs;
  std::shared_ptr<const ArrayFile> targets;
  std::shared_ptr<const ArrayFile> val_inputs;  // the training files when rows are held out
  std::shared_ptr<const ArrayFile> val_targets;
  int64_t train_rows = 0;  // rows [0, train_rows) of inputs/targets
  int64_t val_begin = 0;   // rows [val_begin, val_end) of val_inputs/val_targets
  int64_t val_end = 0;

  // uint8 inputs of [N, C, H, W], [N, H, W] or [N, H, W, C] (C of 1, 3 or 4 last, as
  // images saved from NumPy often are): pixels, scaled and normalized as image data.
  bool images = false;
  bool channels_last = false;   // stored [N, H, W, C]: each sample is transposed when read
  std::vector<int64_t> sample;  // one input as models see it: [C, H, W] for images
  int64_t num_classes = 0;      // integer targets: 1 + the largest label
  // Floating targets: one target's dimensions, [1] for targets of shape [N].
  std::vector<int64_t> regression;
};

// How a sample of `dtype` and shape `row` (one row, or one .npy member of a shard) reaches
// a model: uint8 of [C, H, W], [H, W] or [H, W, C] (C of 1, 3 or 4 last) is an image, any
// other a vector or tensor as stored.
struct SampleLayout {
  bool images = false;
  bool channels_last = false;   // stored [H, W, C]: transposed when read
  std::vector<int64_t> sample;  // as models see it: [C, H, W] for images
};
SampleLayout LayoutOfSample(ArrayDtype dtype, const std::vector<int64_t>& row);

// Opens and checks the arrays: matching rows, matching validation arrays, labels that are
// class indices (counted, in pieces that look at options.cancel). Errors name the field
// (data.arrays.inputs, ...) and the file.
absl::StatusOr<ArraySet> OpenArraySet(const ArrayNames& names, const ReadOptions& options = {});

// "uint8 [60000, 1, 28, 28]", for messages and `stoke data inspect`.
std::string DescribeArray(const ArrayFile& array);

}  // namespace stoke::data
