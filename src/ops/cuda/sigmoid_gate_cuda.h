#pragma once
// CUDA implementations (src/ops/cuda/sigmoid_gate.cu): g and dg f32, x / y / dy / dx bf16.
// Same contract as ops/sigmoid_gate.h, which documents every function.
#include "ops/sigmoid_gate.h"

namespace primus::ops::cuda {

void sigmoid_gate_forward(const Tensor& g, const Tensor& x, Tensor& y, const Stream& s);
void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dg,
                           const Stream& s);

}  // namespace primus::ops::cuda
