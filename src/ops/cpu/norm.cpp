// CPU reference for RMSNorm and per-head RMSNorm (qk-norm). Row statistics are accumulated in double; weight
// gradients are reduced one column block per task, so they are race-free and independent of the thread count.
#include <cmath>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/norm_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// A "segment" is one normalised vector of length d: a whole row for rmsnorm, one head of a row for
// head_rmsnorm. Segment (r, h) starts at element r * row_stride + (h + head_begin) * d of x / y / dy / dx,
// its rstd sits at r * n_heads + h.
struct Segments {
  int64_t rows, n_heads, d, row_stride, head_begin;
  int64_t offset(int64_t r, int64_t h) const { return r * row_stride + (head_begin + h) * d; }
};

template <typename T>
void forward_impl(const T* x, const T* w, double eps, T* y, T* rstd, const Segments& sg) {
  const int64_t n = sg.rows * sg.n_heads;
#pragma omp parallel for schedule(static) if (n * sg.d > kParallelGrain)
  for (int64_t seg = 0; seg < n; ++seg) {
    const int64_t off = sg.offset(seg / sg.n_heads, seg % sg.n_heads);
    const T* xs = x + off;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t e = 0; e < sg.d; ++e) ss += static_cast<double>(xs[e]) * static_cast<double>(xs[e]);
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(sg.d) + eps);
    const T rt = static_cast<T>(r);
    rstd[seg] = rt;
    T* ys = y + off;  // may be x itself: each element is read before it is written
    for (int64_t e = 0; e < sg.d; ++e) ys[e] = xs[e] * rt * w[e];
  }
}

// dw[e] += sum over segments of dy * x * rstd. Runs before the dx pass so that dx may alias dy.
template <typename T>
void weight_grad(const T* dy, const T* x, const T* rstd, T* dw, const Segments& sg) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (sg.d + kBlock - 1) / kBlock;
  const int64_t n = sg.rows * sg.n_heads;
#pragma omp parallel for schedule(static) if (n * sg.d > kParallelGrain && blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t e0 = blk * kBlock, e1 = std::min(sg.d, e0 + kBlock);
    double acc[kBlock] = {};
    for (int64_t seg = 0; seg < n; ++seg) {
      const int64_t off = sg.offset(seg / sg.n_heads, seg % sg.n_heads);
      const double r = static_cast<double>(rstd[seg]);
      for (int64_t e = e0; e < e1; ++e)
        acc[e - e0] += static_cast<double>(dy[off + e]) * static_cast<double>(x[off + e]) * r;
    }
    for (int64_t e = e0; e < e1; ++e) dw[e] = static_cast<T>(static_cast<double>(dw[e]) + acc[e - e0]);
  }
}

// dx = rstd * w * dy - x * rstd^3 / d * sum(w * dy * x), per segment; overwrites or accumulates.
template <typename T>
void input_grad(const T* dy, const T* x, const T* w, const T* rstd, T* dx, bool accumulate,
                const Segments& sg) {
  const int64_t n = sg.rows * sg.n_heads;
#pragma omp parallel for schedule(static) if (n * sg.d > kParallelGrain)
  for (int64_t seg = 0; seg < n; ++seg) {
    const int64_t off = sg.offset(seg / sg.n_heads, seg % sg.n_heads);
    const T* g = dy + off;
    const T* xs = x + off;
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (int64_t e = 0; e < sg.d; ++e)
      dot += static_cast<double>(w[e]) * static_cast<double>(g[e]) * static_cast<double>(xs[e]);
    const double r = static_cast<double>(rstd[seg]);
    const T a = static_cast<T>(r);
    const T c = static_cast<T>(r * r * r * dot / static_cast<double>(sg.d));
    T* out = dx + off;
    if (accumulate) {
      for (int64_t e = 0; e < sg.d; ++e) out[e] += a * w[e] * g[e] - c * xs[e];
    } else {
      for (int64_t e = 0; e < sg.d; ++e) out[e] = a * w[e] * g[e] - c * xs[e];
    }
  }
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s) {
  constexpr const char* op = "rmsnorm_forward";
  const DType dt = check_float(op, "x", x);
  check_ndim(op, "x", x, 2);
  const int64_t rows = x.size(0), d = x.size(1);
  PRIMUS_CHECK(d >= 1, "rmsnorm_forward: x must have at least one column, got {}", x.describe());
  check_tensor(op, "w", w, dt, {d});
  check_tensor(op, "y", y, dt, {rows, d});
  check_tensor(op, "rstd", rstd, dt, {rows});
  PRIMUS_CHECK(eps >= 0.0f, "rmsnorm_forward: eps must be >= 0, got {}", eps);
  PRIMUS_CHECK(same_data(x, y) || !overlaps(x, y), "rmsnorm_forward: y must be x itself or not overlap it");
  const Segments sg{rows, 1, d, d, 0};
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(x.data<T>(), w.data<T>(), static_cast<double>(eps), y.data<T>(), rstd.data<T>(), sg);
  });
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw, bool accumulate_dx, const Stream& s) {
  constexpr const char* op = "rmsnorm_backward";
  const DType dt = check_float(op, "x", x);
  check_ndim(op, "x", x, 2);
  const int64_t rows = x.size(0), d = x.size(1);
  check_tensor(op, "dy", dy, dt, {rows, d});
  check_tensor(op, "w", w, dt, {d});
  check_tensor(op, "rstd", rstd, dt, {rows});
  check_tensor(op, "dx", dx, dt, {rows, d});
  check_tensor(op, "dw", dw, dt, {d});
  PRIMUS_CHECK(!overlaps(dx, x) && (same_data(dx, dy) || !overlaps(dx, dy)),
               "rmsnorm_backward: dx must not overlap x, and must be dy itself or not overlap it");
  const Segments sg{rows, 1, d, d, 0};
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    weight_grad<T>(dy.data<T>(), x.data<T>(), rstd.data<T>(), dw.data<T>(), sg);
    input_grad<T>(dy.data<T>(), x.data<T>(), w.data<T>(), rstd.data<T>(), dx.data<T>(), accumulate_dx, sg);
  });
}

namespace {
Segments head_segments(const char* op, const Tensor& x, int64_t head_begin, int64_t n_heads,
                       int64_t head_dim) {
  check_ndim(op, "x", x, 2);
  PRIMUS_CHECK(head_dim >= 1, "{}: head_dim must be >= 1, got {}", op, head_dim);
  const int64_t cols = x.size(1);
  PRIMUS_CHECK(cols % head_dim == 0, "{}: x must be [R, heads * {}], got {}", op, head_dim, x.describe());
  const int64_t total = cols / head_dim;
  PRIMUS_CHECK(head_begin >= 0 && n_heads >= 1 && head_begin + n_heads <= total,
               "{}: heads [{}, {}) are outside the {} heads of x {}", op, head_begin, head_begin + n_heads,
               total, x.describe());
  return Segments{x.size(0), n_heads, head_dim, cols, head_begin};
}
}  // namespace

void head_rmsnorm_forward(const Tensor& x, int64_t head_begin, int64_t n_heads, int64_t head_dim,
                          const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s) {
  constexpr const char* op = "head_rmsnorm_forward";
  const DType dt = check_float(op, "x", x);
  const Segments sg = head_segments(op, x, head_begin, n_heads, head_dim);
  check_tensor(op, "w", w, dt, {head_dim});
  check_tensor(op, "y", y, dt, x.shape());
  check_tensor(op, "rstd", rstd, dt, {sg.rows, n_heads});
  PRIMUS_CHECK(eps >= 0.0f, "head_rmsnorm_forward: eps must be >= 0, got {}", eps);
  PRIMUS_CHECK(same_data(x, y) || !overlaps(x, y),
               "head_rmsnorm_forward: y must be x itself or not overlap it");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(x.data<T>(), w.data<T>(), static_cast<double>(eps), y.data<T>(), rstd.data<T>(), sg);
  });
}

void head_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           int64_t head_begin, int64_t n_heads, int64_t head_dim, Tensor& dx, Tensor& dw,
                           const Stream& s) {
  constexpr const char* op = "head_rmsnorm_backward";
  const DType dt = check_float(op, "x", x);
  const Segments sg = head_segments(op, x, head_begin, n_heads, head_dim);
  check_tensor(op, "dy", dy, dt, x.shape());
  check_tensor(op, "w", w, dt, {head_dim});
  check_tensor(op, "rstd", rstd, dt, {sg.rows, n_heads});
  check_tensor(op, "dx", dx, dt, x.shape());
  check_tensor(op, "dw", dw, dt, {head_dim});
  PRIMUS_CHECK(!overlaps(dx, x) && (same_data(dx, dy) || !overlaps(dx, dy)),
               "head_rmsnorm_backward: dx must not overlap x, and must be dy itself or not overlap it");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    weight_grad<T>(dy.data<T>(), x.data<T>(), rstd.data<T>(), dw.data<T>(), sg);
    input_grad<T>(dy.data<T>(), x.data<T>(), w.data<T>(), rstd.data<T>(), dx.data<T>(), false, sg);
  });
}

}  // namespace primus::ops::cpu
