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

// Moments stored as M (float, or bf16 for the precision-aware optimizer's state): N of them widened to f32,
// and N f32 values stored back (bf16 rounded to nearest even, as the CPU reference stores them).
template <typename M, int N>
__device__ __forceinline__ Vec<float, N> load_moments(const M* p) {
  if constexpr (std::is_same_v<M, float>) {
    return load_vec<float, N>(p);
  } else {
    const Vec<M, N> x = load_vec<M, N>(p);
    Vec<float, N> r;
#pragma unroll
    for (int e = 0; e < N; ++e) r.v[e] = to_f32(x.v[e]);
    return r;
  }
}
template <typename M, int N>
__device__ __forceinline__ void store_moments(M* p, const Vec<float, N>& x) {
  if constexpr (std::is_same_v<M, float>) {
    store_vec<float, N>(p, x);
  } else {
    Vec<M, N> r;
#pragma unroll
    for (int e = 0; e < N; ++e) r.v[e] = from_f32<M>(x.v[e]);
    store_vec<M, N>(p, r);
  }
}

// master -= lr * (mhat / (sqrt(vhat) + eps) + wd * master); P = the param_copy element type (bf16 or float),
// or void for none.
// MM, MV: the element types of m and v (float or bf16).
template <int N, typename P, typename G, typename MM = float, typename MV = float>
__global__ void adamw_kernel(float* __restrict__ master, G grad, MM* __restrict__ m, MV* __restrict__ v,
                             P* __restrict__ copy, int64_t n, AdamCoeffs c) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  if (i0 + N <= n) {
    Vec<float, N> w = load_vec<float, N>(master + i0);
    const Vec<float, N> g = grad.template load<N>(i0);
    Vec<float, N> mv = load_moments<MM, N>(m + i0), vv = load_moments<MV, N>(v + i0);
#pragma unroll
    for (int e = 0; e < N; ++e) adam_update(w.v[e], g.v[e], mv.v[e], vv.v[e], c);
    store_vec<float, N>(master + i0, w);
    store_moments<MM, N>(m + i0, mv);
    store_moments<MV, N>(v + i0, vv);
    if constexpr (!std::is_void_v<P>) {
      Vec<P, N> out;
#pragma unroll
      for (int e = 0; e < N; ++e) out.v[e] = copy_value<P>(w.v[e]);
      store_vec<P, N>(copy + i0, out);
    }
  } else {
    for (int64_t i = i0; i < n; ++i) {
      float w = master[i], mi = to_f32(m[i]), vi = to_f32(v[i]);
      adam_update(w, grad.at(i), mi, vi, c);
      master[i] = w;
      m[i] = from_f32<MM>(mi);
      v[i] = from_f32<MV>(vi);
      if constexpr (!std::is_void_v<P>) copy[i] = copy_value<P>(w);
    }
  }
}

// AdamW on (hi, rem) pairs: join, the same element update as adamw_kernel, split.
template <int N, typename G, typename MM = float, typename MV = float>
__global__ void adamw_split_kernel(uint16_t* __restrict__ hi, int16_t* __restrict__ rem, G grad,
                                   MM* __restrict__ m, MV* __restrict__ v, int64_t n, AdamCoeffs c) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  if (i0 + N <= n) {
    Vec<uint16_t, N> h = load_vec<uint16_t, N>(hi + i0);
    Vec<int16_t, N> r = load_vec<int16_t, N>(rem + i0);
    const Vec<float, N> g = grad.template load<N>(i0);
    Vec<float, N> mv = load_moments<MM, N>(m + i0), vv = load_moments<MV, N>(v + i0);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float w = join_master(h.v[e], r.v[e]);
      adam_update(w, g.v[e], mv.v[e], vv.v[e], c);
      split_master(w, h.v[e], r.v[e]);
    }
    store_vec<uint16_t, N>(hi + i0, h);
    store_vec<int16_t, N>(rem + i0, r);
    store_moments<MM, N>(m + i0, mv);
    store_moments<MV, N>(v + i0, vv);
  } else {
    for (int64_t i = i0; i < n; ++i) {
      float w = join_master(hi[i], rem[i]), mi = to_f32(m[i]), vi = to_f32(v[i]);
      adam_update(w, grad.at(i), mi, vi, c);
      split_master(w, hi[i], rem[i]);
      m[i] = from_f32<MM>(mi);
      v[i] = from_f32<MV>(vi);
    }
  }
}

// Calls run(MM*, MV*) with m and v as their element types: each f32, or bf16 (the precision-aware optimizer's
// state) beside the f32 master. The kernels above take any of the four pairs.
template <typename F>
void with_moments(const char* op, const Tensor& m, const Tensor& v, F&& run) {
  for (const Tensor* t : {&m, &v})
    PRIMUS_CHECK(t->dtype() == DType::kF32 || t->dtype() == DType::kBF16,
                 "{}: the Adam moments must be f32 or bf16, got {}", op, t->describe());
  auto* mp = const_cast<void*>(m.data_ptr());
  auto* vp = const_cast<void*>(v.data_ptr());
  const bool mb = m.dtype() == DType::kBF16, vb = v.dtype() == DType::kBF16;
  if (mb && vb) {
    run(static_cast<bf16*>(mp), static_cast<bf16*>(vp));
  } else if (mb) {
    run(static_cast<bf16*>(mp), static_cast<float*>(vp));
  } else if (vb) {
    run(static_cast<float*>(mp), static_cast<bf16*>(vp));
  } else {
    run(static_cast<float*>(mp), static_cast<float*>(vp));
  }
}

// The moments' vector loads: N = 4 elements of each need 4 x their element size in alignment.
inline bool moments_aligned4(const Tensor& m, const Tensor& v) {
  auto ok = [](const Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % (4 * dtype_size(t.dtype())) == 0;
  };
  return ok(m) && ok(v);
}

}  // namespace primus::ops::cuda::detail
