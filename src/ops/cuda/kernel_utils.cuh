#pragma once
// Small device helpers shared by the memory-bound CUDA op families (norm, rope, activation, embedding, loss,
// optimizer, elementwise): 16-byte packed loads/stores, bf16 <-> f32 conversion, warp and block reductions,
// and host-side launch checks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/tensor.h"

namespace primus::ops::cuda::detail {

using bf16 = __nv_bfloat16;

// N elements of T loaded or stored with the widest accesses their size allows: one access of 2, 4, 8 or 16
// bytes, or several 16-byte ones beyond that (the pointer must be aligned to min(16, N * sizeof(T)) bytes).
// Pack<T> is the 16-byte case, the unit of every vectorised access (one LDG.128 / STG.128 per thread).
template <typename T, int N>
struct alignas(sizeof(T) * N > 16 ? 16 : sizeof(T) * N) Vec {
  static constexpr int kN = N;
  T v[N];
};
template <typename T>
using Pack = Vec<T, 16 / sizeof(T)>;

template <int kBytes>
struct RawWord {
  using type = uint4;  // 16 and more: a run of 16-byte words
};
template <>
struct RawWord<2> {
  using type = unsigned short;
};
template <>
struct RawWord<4> {
  using type = unsigned int;
};
template <>
struct RawWord<8> {
  using type = uint2;
};

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  using W = typename RawWord<sizeof(T) * N>::type;
  constexpr int kWords = sizeof(T) * N > 16 ? sizeof(T) * N / 16 : 1;
  Vec<T, N> r;
#pragma unroll
  for (int i = 0; i < kWords; ++i) reinterpret_cast<W*>(&r)[i] = reinterpret_cast<const W*>(p)[i];
  return r;
}
template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  using W = typename RawWord<sizeof(T) * N>::type;
  constexpr int kWords = sizeof(T) * N > 16 ? sizeof(T) * N / 16 : 1;
#pragma unroll
  for (int i = 0; i < kWords; ++i) reinterpret_cast<W*>(p)[i] = reinterpret_cast<const W*>(&v)[i];
}

template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return load_vec<T, Pack<T>::kN>(p);
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& v) {
  store_vec<T, Pack<T>::kN>(p, v);
}
// Streaming variants (evict-first): for data touched exactly once, so that it does not push out of L2 what a
// neighbouring kernel or a second pass still needs.
template <typename T>
__device__ __forceinline__ Pack<T> load_pack_stream(const T* p) {
  Pack<T> r;
  *reinterpret_cast<uint4*>(&r) = __ldcs(reinterpret_cast<const uint4*>(p));
  return r;
}
template <typename T>
__device__ __forceinline__ void store_pack_stream(T* p, const Pack<T>& v) {
  __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
}

// Element-generic conversions to and from f32 (f64 passes through double precision where it matters).
template <typename T>
__device__ __forceinline__ float to_f32(T x) {
  return static_cast<float>(x);
}
template <>
__device__ __forceinline__ float to_f32<bf16>(bf16 x) {
  return __bfloat162float(x);
}
template <typename T>
__device__ __forceinline__ T from_f32(float x) {
  return static_cast<T>(x);
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the whole block; every thread gets the result. The tree order is fixed, so the result is bitwise
// reproducible. `scratch` holds at least 32 floats; the trailing barrier makes it reusable right away.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : 0.f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// True when the byte ranges of two tensors intersect.
inline bool overlaps(const Tensor& a, const Tensor& b) {
  const char* a0 = static_cast<const char*>(a.data_ptr());
  const char* b0 = static_cast<const char*>(b.data_ptr());
  return a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// Multiprocessor count of the current device (cached per process; the trainer drives one GPU per process).
int sm_count();
// `count` zeroed ints of pinned, host-mapped memory: how a kernel reports an error it cannot throw (it writes
// them with atomicExch_system; the host reads them on its next call without a sync). Each caller keeps its
// own block in a static.
int* mapped_words(int count);
// The device address of a mapped_words block.
int* mapped_words_device(int* host);

// Shared precondition checks of the CUDA ops: a defined, contiguous tensor on a CUDA device with the given
// dtype.
void check_cuda_tensor(const char* op, const char* name, const Tensor& t, DType dtype);
void check_same_cuda_device(const char* op, const Tensor& a, const Tensor& b);

}  // namespace primus::ops::cuda::detail
