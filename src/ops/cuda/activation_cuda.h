#pragma once
// CUDA implementations (src/ops/cuda/activation.cu): bf16 activations/weights, f32 statistics and parameter
// grads. Same contract as ops/activation.h, which documents every function; the dispatcher ops/activation.cpp
// routes here.
#include "ops/activation.h"

namespace primus::ops::cuda {

void swiglu_forward(const Tensor& gu, Tensor& out, const Stream& s);
void swiglu_backward(const Tensor& dout, const Tensor& gu, Tensor& dgu, const Stream& s);

}  // namespace primus::ops::cuda
