#pragma once
// Helpers shared by the CPU reference ops (internal to src/ops/cpu): argument checks whose messages name the
// op and the tensor ("rmsnorm_forward: w must be [64], got f32[63] on cpu"), element-type dispatch, and a
// deterministic parallel sum.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace primus::ops::cpu::detail {

// Loops over fewer elements than this run on the calling thread. An OpenMP fork/join costs microseconds on
// idle cores but up to a scheduler tick when the cores are shared (parallel CI jobs), which would dwarf a
// small op.
constexpr int64_t kParallelGrain = 1 << 16;

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

// The CPU backend has one thread pool, OpenMP's: OpenBLAS is switched to one thread (once, process-wide) and
// ops split their products over OpenMP threads themselves. Two pools on the same cores fight: OpenBLAS
// workers spin after each call while OpenMP threads wait for cores and vice versa, and a threaded BLAS called
// from inside an OpenMP region oversubscribes (measured: blocked attention 20x slower, a layer's forward 2x
// slower on 2 cores).
inline void use_single_threaded_blas() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// c = alpha * op(a) @ op(b) + beta * c on row-major buffers with explicit leading dimensions (sgemm / dgemm)
// on the calling thread. Never reads c when beta == 0 (an uninitialised, even NaN, c is fine) and handles the
// sizes BLAS rejects.
template <typename T>
void gemm_raw(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
              const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) {
    for (int64_t i = 0; i < m; ++i) {
      T* row = c + i * ldc;
      if (beta == T(0)) {
        std::memset(row, 0, static_cast<size_t>(n) * sizeof(T));
      } else if (beta != T(1)) {
        for (int64_t j = 0; j < n; ++j) row[j] *= beta;
      }
    }
    return;
  }
  use_single_threaded_blas();
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto bi = [](int64_t v) { return static_cast<blasint>(v); };
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, bi(m), bi(n), bi(k), alpha, a, bi(lda), b, bi(ldb), beta, c, bi(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, bi(m), bi(n), bi(k), alpha, a, bi(lda), b, bi(ldb), beta, c, bi(ldc));
  }
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
