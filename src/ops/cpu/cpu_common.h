#pragma once
// Helpers shared by the CPU reference ops (internal to src/ops/cpu): argument checks whose messages name the
// op and the tensor ("rmsnorm_forward: w must be [64], got f32[63] on cpu"), element-type dispatch, and a
// deterministic parallel sum.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace primus::ops::cpu::detail {

// Loops smaller than this many elements run on the calling thread: an OpenMP fork costs a few microseconds,
// more than the work of a small op.
constexpr int64_t kParallelGrain = 1 << 14;

inline void check_host(const char* op, const char* name, const Tensor& t) {
  PRIMUS_CHECK(t.defined(), "{}: {} is undefined", op, name);
  PRIMUS_CHECK(t.device().is_cpu(), "{}: {} must be on cpu, got {}", op, name, t.describe());
  PRIMUS_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {} with strides {}", op, name, t.describe(),
               shape_str(t.strides()));
}

inline void check_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  PRIMUS_CHECK(t.dtype() == dtype, "{}: {} must be {}, got {}", op, name, dtype_name(dtype), t.describe());
}

inline void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  PRIMUS_CHECK(t.shape() == shape, "{}: {} must be {}, got {}", op, name, shape_str(shape), t.describe());
}

// Defined, on the CPU, contiguous, of this dtype and exactly this shape.
inline void check_tensor(const char* op, const char* name, const Tensor& t, DType dtype, const Shape& shape) {
  check_host(op, name, t);
  check_shape(op, name, t, shape);
  check_dtype(op, name, t, dtype);
}

inline void check_ndim(const char* op, const char* name, const Tensor& t, int ndim) {
  PRIMUS_CHECK(t.ndim() == ndim, "{}: {} must have {} dimensions, got {}", op, name, ndim, t.describe());
}

// The element type of a reference computation: f32 or f64.
inline DType check_float(const char* op, const char* name, const Tensor& t) {
  check_host(op, name, t);
  PRIMUS_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF64, "{}: {} must be f32 or f64, got {}", op,
               name, t.describe());
  return t.dtype();
}

// True when the byte ranges of two tensors intersect (both defined).
inline bool overlaps(const Tensor& a, const Tensor& b) {
  const char* a0 = static_cast<const char*>(a.data_ptr());
  const char* b0 = static_cast<const char*>(b.data_ptr());
  return a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

inline bool same_data(const Tensor& a, const Tensor& b) {
  return a.data_ptr() == b.data_ptr();
}

// Calls f(T{}) with T = float or double for an f32 / f64 dtype (checked beforehand by check_float).
template <typename F>
decltype(auto) with_float_type(DType dt, F&& f) {
  if (dt == DType::kF64) return f(double{});
  return f(float{});
}

// Sum of term(i) for i in [0, n), accumulated in double. The range is cut into fixed-size chunks whose
// partial sums are added in chunk order, so the result does not depend on the number of threads (bitwise
// reproducible).
template <typename Term>
double deterministic_sum(int64_t n, Term term) {
  constexpr int64_t kChunk = 1 << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(std::max<int64_t>(chunks, 1)), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    double acc = 0.0;
    for (int64_t i = c * kChunk; i < end; ++i) acc += term(i);
    partial[c] = acc;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace primus::ops::cpu::detail
