#pragma once
// The machinery of the one-pass elementwise kernels (elementwise.cu, softcap.cu): the arithmetic type of an
// element, the first element of a thread, the dtype dispatch, the checks, the vector-access test and the
// grid. Each thread handles N consecutive elements (8 with 16-byte accesses when every pointer is 16-byte
// aligned, else 1); the thread that owns the last, partial group handles it element by element.
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/kernel_utils.cuh"

namespace primus::ops::cuda::elementwise_detail {

using detail::bf16;
using detail::from_f32;
using detail::load_vec;
using detail::store_vec;
using detail::Vec;

constexpr int kBlock = 256;

// Arithmetic type of an element: f64 stays f64, everything else computes in f32.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__device__ __forceinline__ Acc<T> to_acc(T x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __bfloat162float(x);
  } else {
    return x;
  }
}
template <typename T, typename A>
__device__ __forceinline__ T from_acc(A x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

__device__ __forceinline__ int64_t thread_first(int n) {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * n;
}

// Calls f(T{}) for the element type of a floating tensor (bf16, f32, f64).
template <typename F>
void with_type(const char* op, const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::kBF16:
      return f(bf16{});
    case DType::kF32:
      return f(float{});
    case DType::kF64:
      return f(double{});
    default:
      PRIMUS_FAIL("{}: {} must be bf16, f32 or f64", op, t.describe());
  }
}

inline void check_float_cuda(const char* op, const char* name, const Tensor& t) {
  PRIMUS_CHECK(t.defined() && t.device().is_cuda() && t.is_contiguous(),
               "{}: {} must be a contiguous CUDA tensor, got {}", op, name,
               t.defined() ? t.describe() : "undefined");
  PRIMUS_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF32 || t.dtype() == DType::kF64,
               "{}: {} must be bf16, f32 or f64, got {}", op, name, t.describe());
}

inline bool all_aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (!detail::aligned16(p)) return false;
  return true;
}

inline unsigned grid_for(const char* op, int64_t n, int per_thread) {
  const int64_t g = ceil_div<int64_t>(ceil_div<int64_t>(n, per_thread), kBlock);
  PRIMUS_CHECK(g < (int64_t{1} << 31), "{}: too large ({} elements)", op, n);
  return static_cast<unsigned>(g);
}

}  // namespace primus::ops::cuda::elementwise_detail
