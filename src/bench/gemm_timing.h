#pragma once
// GEMM timing as Primus's gemm benchmark and tuner do it: operand sets rotated so that each run starts with a
// cold L2 (50 MB on an H100, so sets cover >= 512 MB together), warm-up runs first, one pair of CUDA events
// per run, median reported. CUDA-only header (includes cublasLt.h through gemm_lt.h): include it from
// *_cuda.cpp files.
#include <functional>
#include <vector>

#include "bench/event_timing.h"
#include "bench/gemm_tuning.h"
#include "ops/cuda/gemm_lt.h"

namespace primus::bench {

namespace lt = ops::cuda::lt;

// How C relates to D in the timed call (see GemmCMode).
using COperand = GemmCMode;

// Random operand sets on the GPU for one problem (a, b, d, and c / bias / bgrad as the problem needs), enough
// of them to cover rotate_bytes but no more than max_bytes (at least one set). Freed on destruction.
class GemmOperandSets {
 public:
  GemmOperandSets(const lt::Problem& p, COperand c, size_t rotate_bytes, size_t max_bytes, const Stream& s,
                  uint64_t seed);
  ~GemmOperandSets();
  GemmOperandSets(const GemmOperandSets&) = delete;
  GemmOperandSets& operator=(const GemmOperandSets&) = delete;

  int count() const { return static_cast<int>(sets_.size()); }
  const lt::Operands& at(int i) const { return sets_[static_cast<size_t>(i) % sets_.size()]; }
  size_t bytes_per_set() const { return bytes_per_set_; }

 private:
  void* alloc(size_t bytes);
  std::vector<void*> allocations_;
  std::vector<lt::Operands> sets_;
  size_t bytes_per_set_ = 0;
};

// Fills `elems` elements of dtype t at device pointer p with N(0, 1) values (e4m3: N(0, 16), cast with
// saturation) -- a shifted copy of one random host pattern, then doubling device-to-device copies: fast for
// gigabyte buffers.
void fill_random(void* p, size_t elems, DType t, uint64_t seed, const Stream& s);

// Host copy of a device matrix converted to float (bf16, f16, f32).
std::vector<float> download_as_float(const void* p, size_t elems, DType t, const Stream& s);
// ||x - ref|| / ||ref|| in double; +inf when x holds a NaN or Inf.
double relative_error(const std::vector<float>& x, const std::vector<float>& ref);

}  // namespace primus::bench
