// CPU reference for matrix products: OpenBLAS sgemm (f32) / dgemm (f64), row-major, split over OpenMP
// threads.
#include <cstring>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/gemm_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// Products smaller than this many multiply-adds run as one BLAS call on the calling thread.
constexpr double kParallelGemmWork = 1 << 18;
// Larger ones are cut into bands of this many rows (or columns) of c, whatever the thread count: every band
// is then the same BLAS call with 1 thread or 16, so results do not depend on the thread count (BLAS kernels
// pick different code paths for different shapes, so splitting by thread count would change the last bits).
constexpr int64_t kBand = 128;

// c = alpha * op(a) @ op(b) + beta * c for contiguous row-major operands, bands spread over the OpenMP
// threads, each running single-threaded BLAS.
template <typename T>
void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, const T* b,
               T beta, T* c) {
  const int64_t lda = std::max<int64_t>(1, trans_a ? m : k);
  const int64_t ldb = std::max<int64_t>(1, trans_b ? k : n);
  const int64_t ldc = std::max<int64_t>(1, n);
  const bool by_rows = m >= n;
  const int64_t extent = by_rows ? m : n;
  const int64_t bands = (extent + kBand - 1) / kBand;
  if (bands <= 1 || static_cast<double>(m) * n * k < kParallelGemmWork) {
    gemm_raw<T>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < bands; ++t) {
    const int64_t lo = t * kBand, len = std::min(extent, lo + kBand) - lo;
    if (by_rows) {
      gemm_raw<T>(trans_a, trans_b, len, n, k, alpha, trans_a ? a + lo : a + lo * lda, lda, b, ldb, beta,
                  c + lo * ldc, ldc);
    } else {
      gemm_raw<T>(trans_a, trans_b, m, len, k, alpha, a, lda, trans_b ? b + lo * ldb : b + lo, ldb, beta,
                  c + lo, ldc);
    }
  }
}

void check_blas_size(const char* op, int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMax = std::numeric_limits<blasint>::max();
  PRIMUS_CHECK(m <= kMax && n <= kMax && k <= kMax, "{}: sizes M={} N={} K={} exceed the BLAS integer range",
               op, m, n, k);
}

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta,
          const Stream& s, const Tensor* c_in) {
  constexpr const char* op = "gemm";
  const DType dt = check_float(op, "a", a);
  check_ndim(op, "a", a, 2);
  check_host(op, "b", b);
  check_ndim(op, "b", b, 2);
  check_dtype(op, "b", b, dt);
  const int64_t m = trans_a ? a.size(1) : a.size(0);
  const int64_t k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0);
  const int64_t n = trans_b ? b.size(0) : b.size(1);
  PRIMUS_CHECK(kb == k, "gemm: inner dimensions differ: op(a) is [{}, {}] ({}{}), op(b) is [{}, {}] ({}{})",
               m, k, a.describe(), trans_a ? ", transposed" : "", kb, n, b.describe(),
               trans_b ? ", transposed" : "");
  check_tensor(op, "c", c, dt, {m, n});
  PRIMUS_CHECK(!overlaps(c, a) && !overlaps(c, b), "gemm: c must not overlap a or b");
  check_blas_size(op, m, n, k);
  if (c_in != nullptr) {
    check_tensor(op, "c_in", *c_in, dt, {m, n});
    // A separate c_in is copied into c first so that BLAS computes in place; beta == 0 ignores it altogether.
    if (!same_data(*c_in, c) && beta != 0.0f) {
      PRIMUS_CHECK(!overlaps(*c_in, c), "gemm: c_in partially overlaps c");
      std::memcpy(c.data_ptr(), c_in->data_ptr(), c.nbytes());
    }
  }
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    blas_gemm<T>(trans_a, trans_b, m, n, k, T(alpha), a.data<T>(), b.data<T>(), T(beta), c.data<T>());
  });
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& s,
                    const Tensor* residual) {
  constexpr const char* op = "linear_forward";
  const DType dt = check_float(op, "x", x);
  check_ndim(op, "x", x, 2);
  check_host(op, "w", w);
  check_ndim(op, "w", w, 2);
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  check_tensor(op, "w", w, dt, {n, k});
  check_tensor(op, "y", y, dt, {m, n});
  PRIMUS_CHECK(!overlaps(y, x) && !overlaps(y, w), "linear_forward: y must not overlap x or w");
  if (bias != nullptr) check_tensor(op, "bias", *bias, dt, {n});
  if (residual != nullptr) {
    check_tensor(op, "residual", *residual, dt, {m, n});
    PRIMUS_CHECK(same_data(*residual, y) || !overlaps(*residual, y),
                 "linear_forward: residual must be y itself or not overlap it");
  }
  check_blas_size(op, m, n, k);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    T* yp = y.data<T>();
    // y is preset to residual (+ bias) and the product is accumulated on top with beta = 1.
    T beta = T(0);
    if (residual != nullptr) {
      if (!same_data(*residual, y)) std::memcpy(yp, residual->data_ptr(), y.nbytes());
      beta = T(1);
    }
    if (bias != nullptr) {
      const T* bp = bias->data<T>();
      const bool add = beta != T(0);
#pragma omp parallel for schedule(static) if (m * n > kParallelGrain)
      for (int64_t i = 0; i < m; ++i) {
        T* row = yp + i * n;
        if (add) {
          for (int64_t j = 0; j < n; ++j) row[j] += bp[j];
        } else {
          for (int64_t j = 0; j < n; ++j) row[j] = bp[j];
        }
      }
      beta = T(1);
    }
    blas_gemm<T>(false, true, m, n, k, T(1), x.data<T>(), w.data<T>(), beta, yp);
  });
}

void linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate, const Stream& s) {
  constexpr const char* op = "linear_backward_input";
  const DType dt = check_float(op, "dy", dy);
  check_ndim(op, "dy", dy, 2);
  check_host(op, "w", w);
  check_ndim(op, "w", w, 2);
  const int64_t m = dy.size(0), n = dy.size(1), k = w.size(1);
  check_tensor(op, "w", w, dt, {n, k});
  check_tensor(op, "dx", dx, dt, {m, k});
  PRIMUS_CHECK(!overlaps(dx, dy) && !overlaps(dx, w), "linear_backward_input: dx must not overlap dy or w");
  check_blas_size(op, m, n, k);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    blas_gemm<T>(false, false, m, k, n, T(1), dy.data<T>(), w.data<T>(), accumulate ? T(1) : T(0),
                 dx.data<T>());
  });
}

void linear_backward_weight(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* dbias, const Stream& s,
                            bool accumulate) {
  constexpr const char* op = "linear_backward_weight";
  const DType dt = check_float(op, "dy", dy);
  check_ndim(op, "dy", dy, 2);
  check_host(op, "x", x);
  check_ndim(op, "x", x, 2);
  const int64_t m = dy.size(0), n = dy.size(1), k = x.size(1);
  check_tensor(op, "x", x, dt, {m, k});
  check_tensor(op, "dw", dw, dt, {n, k});
  PRIMUS_CHECK(!overlaps(dw, dy) && !overlaps(dw, x), "linear_backward_weight: dw must not overlap dy or x");
  if (dbias != nullptr) check_tensor(op, "dbias", *dbias, dt, {n});
  check_blas_size(op, m, n, k);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    blas_gemm<T>(true, false, n, k, m, T(1), dy.data<T>(), x.data<T>(), accumulate ? T(1) : T(0),
                 dw.data<T>());
    if (dbias == nullptr) return;
    // Column sums in double, one column block per task: race-free and independent of the thread count.
    const T* dyp = dy.data<T>();
    T* db = dbias->data<T>();
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (m * n > kParallelGrain)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t j0 = blk * kBlock, j1 = std::min(n, j0 + kBlock);
      double acc[kBlock] = {};
      for (int64_t i = 0; i < m; ++i) {
        const T* row = dyp + i * n;
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += static_cast<double>(row[j]);
      }
      for (int64_t j = j0; j < j1; ++j)
        db[j] = static_cast<T>((accumulate ? static_cast<double>(db[j]) : 0.0) + acc[j - j0]);
    }
  });
}

}  // namespace primus::ops::cpu
