#pragma once
// CUDA FP8 GEMM (src/ops/cuda/fp8_gemm_cuda.cpp): cuBLASLt with per-operand scale modes, through the cached
// plans of ops/cuda/gemm_lt.h. Same contract as ops/fp8.h, which documents fp8_gemm; the dispatcher
// ops/fp8_gemm.cpp routes here. Layouts, scale modes and what is checked: docs/kernels/fp8.md.
#include <string>

#include "ops/fp8.h"

namespace primus::ops::cuda {

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, float alpha, float beta, bool fast_accum,
              const Stream& s, const Tensor* c_in);

// A 128x128 operand's scale_inv [ceil(rows / 128), ceil(K / 128)] is handed to cuBLASLt with its leading
// dimension padded to a multiple of 4 (a padded copy when ceil(K / 128) % 4 != 0): the layout cuBLASLt reads,
// measured on the H100 (docs/kernels/fp8.md).
// The cuBLASLt algorithm fp8_gemm would run for these operands (building its plan if needed): for reports.
std::string fp8_gemm_algo(const Fp8Tensor& a, const Fp8Tensor& b, const Tensor& c, bool fast_accum,
                          const Stream& s);

}  // namespace primus::ops::cuda
