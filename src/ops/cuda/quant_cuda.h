#pragma once
// CUDA kernels of the FP8 cast family (src/ops/cuda/quant.cu): bf16 and f32 inputs, byte-exact against the
// CPU emulation (src/ops/cpu/quant.cpp). Same contract as ops/fp8.h; the dispatcher ops/quant.cpp checks the
// arguments before it routes here.
#include "ops/fp8.h"

namespace primus::ops::cuda {

void quantize(const Tensor& x, Fp8Tensor* out, Fp8Tensor* out_t, const QuantizeArgs& args, const Stream& s,
              const char* what);
void dequantize(const Fp8Tensor& t, Tensor& x, const Stream& s);
void amax(const Tensor& x, Tensor& amax, const Stream& s);

}  // namespace primus::ops::cuda
