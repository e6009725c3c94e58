#pragma once
// CPU reference of the FP8 GEMM (src/ops/cpu/fp8_gemm.cpp). Same contract as ops/fp8.h, which documents
// fp8_gemm; the dispatcher ops/fp8_gemm.cpp routes here. c is f32 or f64; fast_accum is ignored.
#include "ops/fp8.h"

namespace primus::ops::cpu {

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, float alpha, float beta, bool fast_accum,
              const Stream& s, const Tensor* c_in);

}  // namespace primus::ops::cpu
