// Column sums of dy for the bias gradient. See gemm_bias_grad.h.
#include "ops/cuda/gemm_bias_grad.h"

#include <cuda_bf16.h>

#include <algorithm>

namespace primus::ops::cuda {

namespace {

constexpr int kCols = 64;  // columns per block: a warp reads 2 x 32 adjacent elements of a row
constexpr int kWarps = 8;  // warps per block, each striding over rows
constexpr int64_t kMinRowsPerChunk = 256;

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// scratch[chunk, n] = sum of dy[m, n] over the chunk's rows, in a fixed order.
template <typename T>
__global__ void column_partial_kernel(const T* __restrict__ dy, int64_t rows, int64_t cols,
                                      int64_t rows_per_chunk, float* __restrict__ scratch) {
  __shared__ float acc[kWarps][kCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kCols + lane;
  const int64_t c1 = c0 + 32;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r_end = min(rows, r_begin + rows_per_chunk);
  float s0 = 0.f, s1 = 0.f;
  for (int64_t r = r_begin + warp; r < r_end; r += kWarps) {
    const T* row = dy + r * cols;
    if (c0 < cols) s0 += to_f32(row[c0]);
    if (c1 < cols) s1 += to_f32(row[c1]);
  }
  acc[warp][lane] = s0;
  acc[warp][lane + 32] = s1;
  __syncthreads();
  if (warp == 0) {
    float t0 = 0.f, t1 = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      t0 += acc[w][lane];
      t1 += acc[w][lane + 32];
    }
    float* out = scratch + static_cast<int64_t>(blockIdx.y) * cols;
    if (c0 < cols) out[c0] = t0;
    if (c1 < cols) out[c1] = t1;
  }
}

// dst[n] += sum over chunks of scratch[chunk, n], chunks in order.
__global__ void fold_chunks_kernel(const float* __restrict__ scratch, int64_t chunks, int64_t cols,
                                   float* __restrict__ dst) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= cols) return;
  float s = 0.f;
  for (int64_t c = 0; c < chunks; ++c) s += scratch[c * cols + n];
  dst[n] += s;
}

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int64_t bias_grad_chunks(int64_t rows, int64_t cols, int sms) {
  if (rows <= 0 || cols <= 0) return 1;
  const int64_t col_blocks = cdiv(cols, kCols);
  // About four blocks per SM, but never chunks so short that the second pass dominates.
  int64_t chunks = std::max<int64_t>(1, cdiv(4 * static_cast<int64_t>(sms), col_blocks));
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, rows / kMinRowsPerChunk));
  chunks = std::min<int64_t>(chunks, 65535);
  return cdiv(rows, cdiv(rows, chunks));  // no empty trailing chunk
}

cudaError_t launch_bias_grad_accumulate(const void* dy, bool dy_bf16, int64_t rows, int64_t cols,
                                        float* dbias, float* scratch, int64_t chunks, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t rows_per_chunk = cdiv(rows, chunks);
  dim3 grid(static_cast<unsigned>(cdiv(cols, kCols)), static_cast<unsigned>(chunks));
  if (dy_bf16) {
    column_partial_kernel<<<grid, kWarps * 32, 0, s>>>(static_cast<const __nv_bfloat16*>(dy), rows, cols,
                                                       rows_per_chunk, scratch);
  } else {
    column_partial_kernel<<<grid, kWarps * 32, 0, s>>>(static_cast<const float*>(dy), rows, cols,
                                                       rows_per_chunk, scratch);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  fold_chunks_kernel<<<static_cast<unsigned>(cdiv(cols, 256)), 256, 0, s>>>(scratch, chunks, cols, dbias);
  return cudaGetLastError();
}

cudaError_t launch_add_f32(float* dst, const float* src, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  fold_chunks_kernel<<<static_cast<unsigned>(cdiv(n, 256)), 256, 0, s>>>(src, 1, n, dst);
  return cudaGetLastError();
}

}  // namespace primus::ops::cuda
