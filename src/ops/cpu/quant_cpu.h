#pragma once
// CPU reference of the FP8 cast family (src/ops/cpu/quant.cpp): f32 and f64 inputs, OpenMP. The exact
// emulation the CUDA kernels are checked against byte for byte: each element is rounded to f32 first, scaled
// with one IEEE f32 multiply and cast with float_to_fp8 (ops/fp8.h). Same contract as ops/fp8.h; the
// dispatcher ops/quant.cpp checks the arguments before it routes here.
#include "ops/fp8.h"

namespace primus::ops::cpu {

void quantize(const Tensor& x, Fp8Tensor* out, Fp8Tensor* out_t, const QuantizeArgs& args, const Stream& s,
              const char* what);
void dequantize(const Fp8Tensor& t, Tensor& x, const Stream& s);
void amax(const Tensor& x, Tensor& amax, const Stream& s);

// The quantisation multiplier of a group whose max |x| is `amax`: fp8_max / amax in f32 when amax is finite
// and > 0, else 1; a quotient that overflows f32 (amax below fp8_max / FLT_MAX) is clamped to FLT_MAX.
float fp8_scale_from_amax(float amax, Fp8Format f);

}  // namespace primus::ops::cpu
