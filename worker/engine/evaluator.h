// Evaluation on the held-out split under no-grad: mean loss, and accuracy for
// classifiers or perplexity for language models. Sums stay on the device; the host reads
// them once, at the end of the pass (evaluation is not the hot loop).
#pragma once

#include <atomic>
#include <optional>

#include "worker/common/task.h"
#include "worker/data/eval_set.h"
#include "worker/models/network.h"

namespace stoke::worker {

// nullopt when `cancel` was set: it is read before every batch, so that a cancel during a
// long evaluation (a large eval.batches, a large held-out split) ends it within a batch.
std::optional<EvalResult> Evaluate(Network& net, EvalSet& eval, DataShape::Kind data_kind,
                                   bool bf16, const std::atomic<bool>& cancel);

}  // namespace stoke::worker
