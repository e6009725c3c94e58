#pragma once
// CUDA implementations (src/ops/cuda/softcap.cu): bf16 or f32 tensors with the math in f32 (f64 in f64).
// Same contract as ops/softcap.h, which documents every function.
#include "ops/softcap.h"

namespace primus::ops::cuda {

void softcap_forward(const Tensor& x, float cap, Tensor& y, const Stream& s);
void softcap_backward(const Tensor& y, const Tensor& dy, float cap, Tensor& dx, const Stream& s);

}  // namespace primus::ops::cuda
