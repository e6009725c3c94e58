#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "bench/event_timing.h"
#include "core/cuda_check.h"

namespace primus::bench {

TimingStats time_runs(const std::function<void(int)>& fn, int warmup, int iters, const Stream& s) {
  return time_for(fn, warmup, 0.0, iters, iters, s);
}

TimingStats time_for(const std::function<void(int)>& fn, int warmup, double seconds, int min_iters,
                     int max_iters, const Stream& s) {
  cudaStream_t cs = cuda_stream(s);
  int run = 0;
  for (int i = 0; i < warmup; ++i) fn(run++);
  PRIMUS_CUDA_CHECK(cudaStreamSynchronize(cs));
  constexpr int kBatch = 16;
  std::vector<cudaEvent_t> ev(2 * kBatch);
  for (auto& e : ev) PRIMUS_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<float> times;
  double total_ms = 0;
  try {
    while (static_cast<int>(times.size()) < max_iters &&
           (static_cast<int>(times.size()) < min_iters || total_ms < seconds * 1e3)) {
      const int n = std::min(kBatch, max_iters - static_cast<int>(times.size()));
      for (int i = 0; i < n; ++i) {
        PRIMUS_CUDA_CHECK(cudaEventRecord(ev[2 * i], cs));
        fn(run++);
        PRIMUS_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], cs));
      }
      PRIMUS_CUDA_CHECK(cudaEventSynchronize(ev[2 * n - 1]));
      for (int i = 0; i < n; ++i) {
        float ms = 0;
        PRIMUS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        times.push_back(ms);
        total_ms += ms;
      }
    }
  } catch (...) {
    for (auto& e : ev) cudaEventDestroy(e);
    throw;
  }
  for (auto& e : ev) PRIMUS_CUDA_CHECK(cudaEventDestroy(e));
  TimingStats st;
  st.runs = static_cast<int>(times.size());
  if (times.empty()) return st;
  st.mean_ms = total_ms / times.size();
  std::sort(times.begin(), times.end());
  st.min_ms = times.front();
  st.median_ms = times[times.size() / 2];
  return st;
}

}  // namespace primus::bench
