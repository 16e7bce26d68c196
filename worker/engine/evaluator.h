// Evaluation on the held-out split under no-grad: mean loss, and accuracy for
// classifiers or perplexity for language models. Sums stay on the device; the host reads
// them once, at the end of the pass (evaluation is not the hot loop).
#pragma once

#include "worker/common/task.h"
#include "worker/data/eval_set.h"
#include "worker/models/network.h"

namespace stoke::worker {

EvalResult Evaluate(Network& net, EvalSet& eval, DataShape::Kind data_kind, bool bf16);

}  // namespace stoke::worker
