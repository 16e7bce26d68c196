// Latencies of one kind of call, recorded from any thread; percentiles at the end.
#pragma once

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

namespace stoke::load {

class Latencies {
 public:
  void Add(double ms) {
    std::lock_guard<std::mutex> lock(mu_);
    ms_.push_back(ms);
  }
  size_t count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ms_.size();
  }
  // The q-quantile (0.5: median) by nearest rank; 0 when nothing was recorded.
  double Percentile(double q) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (ms_.empty()) return 0;
    std::vector<double> sorted = ms_;
    std::sort(sorted.begin(), sorted.end());
    const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
  }

 private:
  mutable std::mutex mu_;
  std::vector<double> ms_;
};

}  // namespace stoke::load
