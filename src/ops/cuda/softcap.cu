// Soft-capping on the GPU: y = cap * tanh(x / cap) and dx = dy * (1 - (y / cap)^2), elementwise one-pass
// kernels on the shared machinery of elementwise_utils.cuh (bf16 / f32 with the math in f32, f64 in f64).
// Memory-bound: forward 4 bytes per bf16 element (read x, write y), backward 6 (read y, dy, write dx).
#include "ops/cuda/elementwise_utils.cuh"
#include "ops/cuda/kernel_utils.cuh"

#include <cmath>

#include "ops/cuda/softcap_cuda.h"

namespace primus::ops::cuda {
namespace {

using namespace elementwise_detail;

// tanh (tanhf for f32), not the approximate tanh.approx.f32 (2^-11 relative error), so the GPU's capped
// logits stay within an f32 rounding of the CPU reference before they are stored.
template <typename T, int N>
__global__ void softcap_fwd_kernel(const T* x, T* y, int64_t n, Acc<T> cap, Acc<T> inv_cap) {
  const int64_t i0 = thread_first(N);
  if (i0 >= n) return;
  if (i0 + N <= n) {
    const Vec<T, N> xv = load_vec<T, N>(x + i0);
    Vec<T, N> out;
#pragma unroll
    for (int e = 0; e < N; ++e) out.v[e] = from_acc<T>(cap * tanh(to_acc(xv.v[e]) * inv_cap));
    store_vec<T, N>(y + i0, out);
  } else {
    for (int64_t i = i0; i < n; ++i) y[i] = from_acc<T>(cap * tanh(to_acc(x[i]) * inv_cap));
  }
}

template <typename T, int N>
__global__ void softcap_bwd_kernel(const T* __restrict__ y, const T* dy, T* dx, int64_t n, Acc<T> inv_cap) {
  const int64_t i0 = thread_first(N);
  if (i0 >= n) return;
  auto grad = [inv_cap](T yi, T gi) {
    const Acc<T> t = to_acc(yi) * inv_cap;
    return from_acc<T>(to_acc(gi) * (Acc<T>(1) - t * t));
  };
  if (i0 + N <= n) {
    const Vec<T, N> yv = load_vec<T, N>(y + i0), gv = load_vec<T, N>(dy + i0);
    Vec<T, N> out;
#pragma unroll
    for (int e = 0; e < N; ++e) out.v[e] = grad(yv.v[e], gv.v[e]);
    store_vec<T, N>(dx + i0, out);
  } else {
    for (int64_t i = i0; i < n; ++i) dx[i] = grad(y[i], dy[i]);
  }
}

// Every tensor a float CUDA tensor of `first`'s dtype and size, on its device; the cap positive.
void check_args(const char* op, float cap, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  PRIMUS_CHECK(cap > 0.0f && std::isfinite(cap), "{}: the cap must be positive and finite, got {}", op, cap);
  const Tensor& first = *ts.begin()->second;
  for (const auto& [name, t] : ts) {
    check_float_cuda(op, name, *t);
    detail::check_same_cuda_device(op, first, *t);
    PRIMUS_CHECK(t->dtype() == first.dtype() && t->numel() == first.numel(),
                 "{}: {} must be {} with {} elements like {}, got {}", op, name, dtype_name(first.dtype()),
                 first.numel(), ts.begin()->first, t->describe());
  }
}

}  // namespace

void softcap_forward(const Tensor& x, float cap, Tensor& y, const Stream& s) {
  constexpr const char* op = "softcap_forward";
  check_args(op, cap, {{"x", &x}, {"y", &y}});
  PRIMUS_CHECK(x.data_ptr() == y.data_ptr() || !detail::overlaps(x, y),
               "{}: y must be x itself or not overlap it", op);
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool vec = all_aligned({x.data_ptr(), y.data_ptr()});
  with_type(op, x, [&](auto tag) {
    using T = decltype(tag);
    const auto* xp = static_cast<const T*>(x.data_ptr());
    auto* yp = static_cast<T*>(y.data_ptr());
    const Acc<T> c = cap, inv = Acc<T>(1) / c;
    if (vec) {
      softcap_fwd_kernel<T, 8><<<grid_for(op, n, 8), kBlock, 0, cuda_stream(s)>>>(xp, yp, n, c, inv);
    } else {
      softcap_fwd_kernel<T, 1><<<grid_for(op, n, 1), kBlock, 0, cuda_stream(s)>>>(xp, yp, n, c, inv);
    }
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

void softcap_backward(const Tensor& y, const Tensor& dy, float cap, Tensor& dx, const Stream& s) {
  constexpr const char* op = "softcap_backward";
  check_args(op, cap, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  PRIMUS_CHECK(dx.data_ptr() == dy.data_ptr() || !detail::overlaps(dx, dy),
               "{}: dx must be dy itself or not overlap it", op);
  PRIMUS_CHECK(!detail::overlaps(dx, y), "{}: dx must not overlap y", op);
  const int64_t n = y.numel();
  if (n == 0) return;
  const bool vec = all_aligned({y.data_ptr(), dy.data_ptr(), dx.data_ptr()});
  with_type(op, y, [&](auto tag) {
    using T = decltype(tag);
    const auto* yp = static_cast<const T*>(y.data_ptr());
    const auto* gp = static_cast<const T*>(dy.data_ptr());
    auto* out = static_cast<T*>(dx.data_ptr());
    const Acc<T> inv = Acc<T>(1) / Acc<T>(cap);
    if (vec) {
      softcap_bwd_kernel<T, 8><<<grid_for(op, n, 8), kBlock, 0, cuda_stream(s)>>>(yp, gp, out, n, inv);
    } else {
      softcap_bwd_kernel<T, 1><<<grid_for(op, n, 1), kBlock, 0, cuda_stream(s)>>>(yp, gp, out, n, inv);
    }
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace primus::ops::cuda
