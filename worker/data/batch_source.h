// Where the training loop takes its batches from. A source yields batches already on
// the training device and prepared for the model, so the loop never waits on a host-side
// copy it could have hidden.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "worker/common/data_shape.h"

namespace stoke::worker {

struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch Next() = 0;
  // Batches of one pass over the data, on this rank.
  virtual int64_t BatchesPerEpoch() const = 0;
  virtual DataShape Shape() const = 0;
  // Seconds the caller spent blocked in Next() since the last call: the time training
  // waited for data.
  virtual double TakeWaitSeconds() { return 0; }
  // Samples skipped so far because their file could not be read (Dataset::SkippedSamples).
  virtual int64_t SkippedSamples() const { return 0; }
  // The model takes its images channels-last: a source that prepares image batches on
  // the device writes them in NHWC memory from here on (a data set's values are the same;
  // synthetic noise is drawn in that memory order, by the same rule). Called before the
  // first Next().
  virtual void SetImagesChannelsLast(bool /*on*/) {}
};

}  // namespace stoke::worker
