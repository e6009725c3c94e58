#pragma once
// Deterministic bias gradient for linear_backward_weight when cuBLASLt's BGRADB epilogue is not used:
// dbias[n] += sum_m dy[m, n]. Two passes (fixed-order partial sums per row chunk, then a fixed-order sum of
// the chunks), so the result is bitwise reproducible run to run.
//
// Plain launchers on raw pointers: this header is included by gemm_bias_grad.cu, which must not see fmt
// (nvcc's C++20 front end rejects fmt 9's consteval checks). Validation happens in gemm_cuda.cpp.
#include <cuda_runtime.h>

#include <cstdint>

namespace primus::ops::cuda {

// Row chunks the first pass uses for a [rows, cols] dy on a GPU with `sms` multiprocessors; the caller
// provides a scratch of chunks * cols floats.
int64_t bias_grad_chunks(int64_t rows, int64_t cols, int sms);
// dy: [rows, cols] bf16 (dy_bf16) or f32, contiguous; dbias: [cols] f32, accumulated into.
cudaError_t launch_bias_grad_accumulate(const void* dy, bool dy_bf16, int64_t rows, int64_t cols,
                                        float* dbias, float* scratch, int64_t chunks, cudaStream_t s);
// dst[i] += src[i] for i < n: folds the epilogue's overwritten bias gradient into dbias.
cudaError_t launch_add_f32(float* dst, const float* src, int64_t n, cudaStream_t s);

}  // namespace primus::ops::cuda
