// Soft-capping on the GPU: y = cap * tanh(x / cap) and dx = dy * (1 - (y / cap)^2), elementwise on bf16 or
// f32 tensors with the math in f32; 4 elements per thread where the pointers allow vector accesses.
// Memory-bound: forward 4 bytes per bf16 element (read x, write y), backward 6 (read y, dy, write dx).
#include "ops/cuda/kernel_utils.cuh"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "ops/cuda/softcap_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;
using detail::from_f32;
using detail::load_vec;
using detail::store_vec;
using detail::to_f32;
using detail::Vec;

constexpr int kBlock = 256;

// tanhf, not the approximate tanh.approx.f32 (2^-11 relative error), so the GPU's capped logits stay within
// an f32 rounding of the CPU reference before they are stored.
template <typename T, int N>
__global__ void softcap_fwd_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, float cap,
                                   float inv_cap) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  if (i0 + N <= n) {
    const Vec<T, N> xv = load_vec<T, N>(x + i0);
    Vec<T, N> out;
#pragma unroll
    for (int e = 0; e < N; ++e) out.v[e] = from_f32<T>(cap * tanhf(to_f32(xv.v[e]) * inv_cap));
    store_vec<T, N>(y + i0, out);
  } else {
    for (int64_t i = i0; i < n; ++i) y[i] = from_f32<T>(cap * tanhf(to_f32(x[i]) * inv_cap));
  }
}

template <typename T, int N>
__global__ void softcap_bwd_kernel(const T* __restrict__ y, const T* dy, T* dx, int64_t n, float inv_cap) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  auto grad = [inv_cap](T yi, T gi) {
    const float t = to_f32(yi) * inv_cap;
    return from_f32<T>(to_f32(gi) * (1.0f - t * t));
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

bool aligned_for4(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % (4 * dtype_size(t.dtype())) == 0;
}

dim3 grid_for(const char* op, int64_t n, int per_thread) {
  const int64_t g = ((n + per_thread - 1) / per_thread + kBlock - 1) / kBlock;
  PRIMUS_CHECK(g < (int64_t{1} << 31), "{}: too large ({} elements)", op, n);
  return dim3(static_cast<unsigned>(g));
}

// The dtype every tensor of the call shares: bf16 or f32.
DType check_all(const char* op, float cap, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  PRIMUS_CHECK(cap > 0.0f && std::isfinite(cap), "{}: the cap must be positive and finite, got {}", op, cap);
  const Tensor& first = *ts.begin()->second;
  const DType dt = first.dtype();
  PRIMUS_CHECK(dt == DType::kBF16 || dt == DType::kF32, "{}: {} must be bf16 or f32, got {}", op,
               ts.begin()->first, first.describe());
  for (const auto& [name, t] : ts) {
    detail::check_cuda_tensor(op, name, *t, dt);
    detail::check_same_cuda_device(op, first, *t);
    PRIMUS_CHECK(t->numel() == first.numel(), "{}: {} must have {} elements, got {}", op, name, first.numel(),
                 t->describe());
  }
  return dt;
}

}  // namespace

void softcap_forward(const Tensor& x, float cap, Tensor& y, const Stream& s) {
  constexpr const char* op = "softcap_forward";
  const DType dt = check_all(op, cap, {{"x", &x}, {"y", &y}});
  PRIMUS_CHECK(x.data_ptr() == y.data_ptr() || !detail::overlaps(x, y),
               "{}: y must be x itself or not overlap it", op);
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool vec = aligned_for4(x) && aligned_for4(y);
  const dim3 g = grid_for(op, n, vec ? 4 : 1);
  cudaStream_t cs = cuda_stream(s);
  auto run = [&]<typename T>(T*) {
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    if (vec) {
      softcap_fwd_kernel<T, 4><<<g, kBlock, 0, cs>>>(xp, yp, n, cap, 1.0f / cap);
    } else {
      softcap_fwd_kernel<T, 1><<<g, kBlock, 0, cs>>>(xp, yp, n, cap, 1.0f / cap);
    }
  };
  if (dt == DType::kBF16) {
    run(static_cast<bf16*>(nullptr));
  } else {
    run(static_cast<float*>(nullptr));
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void softcap_backward(const Tensor& y, const Tensor& dy, float cap, Tensor& dx, const Stream& s) {
  constexpr const char* op = "softcap_backward";
  const DType dt = check_all(op, cap, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  PRIMUS_CHECK(dx.data_ptr() == dy.data_ptr() || !detail::overlaps(dx, dy),
               "{}: dx must be dy itself or not overlap it", op);
  PRIMUS_CHECK(!detail::overlaps(dx, y), "{}: dx must not overlap y", op);
  const int64_t n = y.numel();
  if (n == 0) return;
  const bool vec = aligned_for4(y) && aligned_for4(dy) && aligned_for4(dx);
  const dim3 g = grid_for(op, n, vec ? 4 : 1);
  cudaStream_t cs = cuda_stream(s);
  auto run = [&]<typename T>(T*) {
    const T* yp = static_cast<const T*>(y.data_ptr());
    const T* gp = static_cast<const T*>(dy.data_ptr());
    T* out = static_cast<T*>(dx.data_ptr());
    if (vec) {
      softcap_bwd_kernel<T, 4><<<g, kBlock, 0, cs>>>(yp, gp, out, n, 1.0f / cap);
    } else {
      softcap_bwd_kernel<T, 1><<<g, kBlock, 0, cs>>>(yp, gp, out, n, 1.0f / cap);
    }
  };
  if (dt == DType::kBF16) {
    run(static_cast<bf16*>(nullptr));
  } else {
    run(static_cast<float*>(nullptr));
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
