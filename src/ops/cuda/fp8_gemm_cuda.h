#pragma once
// CUDA FP8 GEMM (src/ops/cuda/fp8_gemm_cuda.cpp): cuBLASLt with per-operand scale modes, through the cached
// plans of ops/cuda/gemm_lt.h. Same contract as ops/fp8.h, which documents fp8_gemm; the dispatcher
// ops/fp8_gemm.cpp routes here. Layouts, scale modes and what is checked: docs/kernels/fp8.md.
#include <string>

#include "ops/fp8.h"

namespace primus::ops::cuda {

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, float alpha, float beta, bool fast_accum,
              const Stream& s, const Tensor* c_in);

// The leading dimension cuBLASLt is given for a 128x128 operand's scale_inv [ceil(rows / 128), ceil(K /
// 128)]. Fp8Tensor stores it unpadded (ld = ceil(K / 128)); some PyTorch versions pad ld to a multiple of 4,
// which suggests cuBLASLt may read it that way. kPad4 copies the scales into a zeroed [ceil(rows / 128),
// round_up(ceil(K / 128), 4)] scratch before each call (no copy when ceil(K / 128) is already a multiple of
// 4, where the two layouts coincide). kAuto (the default) takes env PRIMUS_FP8_BLOCK_SCALE_LD = unpadded |
// pad4, unpadded when unset. tests/gpu/fp8_gemm_gpu_test.cpp runs both and reports which matches the
// reference.
enum class Fp8BlockScaleLd { kAuto, kUnpadded, kPad4 };
void set_fp8_block_scale_ld(Fp8BlockScaleLd mode);
Fp8BlockScaleLd fp8_block_scale_ld();                       // the mode in effect (never kAuto)
const char* fp8_block_scale_ld_name(Fp8BlockScaleLd mode);  // "auto", "unpadded", "pad4"

// The cuBLASLt algorithm fp8_gemm would run for these operands (building its plan if needed): for reports.
std::string fp8_gemm_algo(const Fp8Tensor& a, const Fp8Tensor& b, const Tensor& c, bool fast_accum,
                          const Stream& s);

}  // namespace primus::ops::cuda
