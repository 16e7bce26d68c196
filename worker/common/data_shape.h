// The samples a data source yields, as models see them: what the input pipeline tells a
// model so that it can shape itself. A plain struct, below both data and models.
#pragma once

#include <cstdint>
#include <vector>

namespace stoke::worker {

struct DataShape {
  enum class Kind { kVector, kImage, kTokens };
  Kind kind = Kind::kVector;
  // One input sample: [features], [channels, height, width] or [context].
  std::vector<int64_t> sample;
  int64_t num_classes = 0;  // classifiers: targets are class indices [B]
  int64_t vocab_size = 0;   // tokens: targets are next tokens [B, context]
  // Regression: floating targets, one of these dimensions per sample; empty: none.
  std::vector<int64_t> regression;
};

}  // namespace stoke::worker
