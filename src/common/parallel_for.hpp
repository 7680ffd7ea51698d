#pragma once
// A host loop over independent items on every core: the weight upload repacks each expert on its own
// (one thread took about 3 s for a gpt-oss-120b layer, 1.7 GB, on the CI machine: a 36-layer model,
// minutes).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mxmoe {

// f(i) for every i in [0, count), each exactly once, on up to `threads` threads (0: one per hardware
// thread), the calling thread among them. The first exception a call throws stops the remaining
// items and is rethrown here once every thread has returned.
template <class F>
void parallel_for(int64_t count, F&& f, unsigned threads = 0) {
  if (count <= 0) return;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<int64_t>(threads, count));
  std::atomic<int64_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  const auto work = [&] {
    for (int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      try {
        f(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(count);
      }
    }
  };
  {
    std::vector<std::jthread> pool;  // joined when the block ends, also if starting one throws
    pool.reserve(threads - 1);
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace mxmoe
