// A fixed pool of threads for the API layer's work that may wait (the job store's
// fsyncs, the core's lock), so that gRPC's callback threads never block on it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace stoke::server {

class Executor {
 public:
  explicit Executor(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~Executor() { Stop(); }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  // Runs what is queued, then joins the threads.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace stoke::server
