#pragma once
// The AdamW kernels over a flat span, for any source of the span's gradient: the dense f32 buffer
// (optimizer.cu) or the row-sparse embedding gradient read through its slot map (row_sparse_grad.cu). One
// body, so the two differ in the gradient load only and their element updates (adam_math.cuh) give the same
// bits. A gradient source G has `load<N>(i0)` (elements i0 .. i0 + N - 1 of the span, a Vec) and `at(i)`.
//
// N = elements per thread (4 when every state pointer is 16-byte aligned, else 1); the last thread of a span
// whose length is not a multiple of N handles its partial group element by element.
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/adam_math.cuh"
#include "ops/cuda/kernel_utils.cuh"

namespace primus::ops::cuda::detail {

// adamw_step's param_copy rule, for either gradient source: none, master itself (nothing to receive), or a
// bf16 / f32 tensor of master's size on its device overlapping none of master and `others`. Returns whether
// the kernel writes it.
inline bool adamw_writes_copy(const char* op, const Tensor& master, const Tensor* param_copy,
                              std::initializer_list<const Tensor*> others) {
  if (param_copy == nullptr || !param_copy->defined() || param_copy->data_ptr() == master.data_ptr())
    return false;
  PRIMUS_CHECK(param_copy->dtype() == DType::kBF16 || param_copy->dtype() == DType::kF32,
               "{}: param_copy must be bf16 or f32, got {}", op, param_copy->describe());
  check_cuda_tensor(op, "param_copy", *param_copy, param_copy->dtype());
  check_same_cuda_device(op, master, *param_copy);
  PRIMUS_CHECK(param_copy->numel() == master.numel(),
               "{}: param_copy must have {} elements like master, got {}", op, master.numel(),
               param_copy->describe());
  PRIMUS_CHECK(!overlaps(*param_copy, master), "{}: param_copy must be master itself or not overlap it", op);
  for (const Tensor* t : others)
    PRIMUS_CHECK(!overlaps(*param_copy, *t), "{}: param_copy must not overlap {}", op, t->describe());
  return true;
}

// The param_copy element of an updated master: bf16 by the compute rounding (core/master_split.h), so that
// the copy is bitwise the hi a split store would hold; f32 as is.
template <typename P>
__device__ __forceinline__ P copy_value(float w) {
  if constexpr (std::is_same_v<P, bf16>) {
    return compute_bf16(w);
  } else {
    return w;
  }
}

// The dense gradient buffer of the span.
struct DenseGrad {
  const float* __restrict__ p;
  template <int N>
  __device__ __forceinline__ Vec<float, N> load(int64_t i0) const {
    return load_vec<float, N>(p + i0);
  }
  __device__ __forceinline__ float at(int64_t i) const { return p[i]; }
};

// master -= lr * (mhat / (sqrt(vhat) + eps) + wd * master); P = the param_copy element type (bf16 or float),
// or void for none.
template <int N, typename P, typename G>
__global__ void adamw_kernel(float* __restrict__ master, G grad, float* __restrict__ m, float* __restrict__ v,
                             P* __restrict__ copy, int64_t n, AdamCoeffs c) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  if (i0 + N <= n) {
    Vec<float, N> w = load_vec<float, N>(master + i0);
    const Vec<float, N> g = grad.template load<N>(i0);
    Vec<float, N> mv = load_vec<float, N>(m + i0), vv = load_vec<float, N>(v + i0);
#pragma unroll
    for (int e = 0; e < N; ++e) adam_update(w.v[e], g.v[e], mv.v[e], vv.v[e], c);
    store_vec<float, N>(master + i0, w);
    store_vec<float, N>(m + i0, mv);
    store_vec<float, N>(v + i0, vv);
    if constexpr (!std::is_void_v<P>) {
      Vec<P, N> out;
#pragma unroll
      for (int e = 0; e < N; ++e) out.v[e] = copy_value<P>(w.v[e]);
      store_vec<P, N>(copy + i0, out);
    }
  } else {
    for (int64_t i = i0; i < n; ++i) {
      float w = master[i], mi = m[i], vi = v[i];
      adam_update(w, grad.at(i), mi, vi, c);
      master[i] = w;
      m[i] = mi;
      v[i] = vi;
      if constexpr (!std::is_void_v<P>) copy[i] = copy_value<P>(w);
    }
  }
}

// AdamW on (hi, rem) pairs: join, the same element update as adamw_kernel, split.
template <int N, typename G>
__global__ void adamw_split_kernel(uint16_t* __restrict__ hi, int16_t* __restrict__ rem, G grad,
                                   float* __restrict__ m, float* __restrict__ v, int64_t n, AdamCoeffs c) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  if (i0 + N <= n) {
    Vec<uint16_t, N> h = load_vec<uint16_t, N>(hi + i0);
    Vec<int16_t, N> r = load_vec<int16_t, N>(rem + i0);
    const Vec<float, N> g = grad.template load<N>(i0);
    Vec<float, N> mv = load_vec<float, N>(m + i0), vv = load_vec<float, N>(v + i0);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float w = join_master(h.v[e], r.v[e]);
      adam_update(w, g.v[e], mv.v[e], vv.v[e], c);
      split_master(w, h.v[e], r.v[e]);
    }
    store_vec<uint16_t, N>(hi + i0, h);
    store_vec<int16_t, N>(rem + i0, r);
    store_vec<float, N>(m + i0, mv);
    store_vec<float, N>(v + i0, vv);
  } else {
    for (int64_t i = i0; i < n; ++i) {
      float w = join_master(hi[i], rem[i]), mi = m[i], vi = v[i];
      adam_update(w, grad.at(i), mi, vi, c);
      split_master(w, hi[i], rem[i]);
      m[i] = mi;
      v[i] = vi;
    }
  }
}

}  // namespace primus::ops::cuda::detail
