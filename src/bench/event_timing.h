#pragma once
// Timing GPU work with CUDA events: warm-up runs first, then one event pair per run, median reported. Shared
// by the GEMM and attention benchmarks, the GEMM tuner and the GPU tests. CUDA builds only.
#include <functional>

#include "core/device.h"

namespace primus::bench {

struct TimingStats {
  double median_ms = 0, mean_ms = 0, min_ms = 0;
  int runs = 0;
};

// Runs fn(i) `warmup` times untimed, then times `iters` runs, one event pair each; fn gets the run index so
// that it can rotate operand sets.
TimingStats time_runs(const std::function<void(int)>& fn, int warmup, int iters, const Stream& s);
// As time_runs, but keeps going (in batches) until `seconds` of GPU time have been timed and min_iters runs
// done.
TimingStats time_for(const std::function<void(int)>& fn, int warmup, double seconds, int min_iters,
                     int max_iters, const Stream& s);

}  // namespace primus::bench
