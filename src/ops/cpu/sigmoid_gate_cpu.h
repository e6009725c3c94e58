#pragma once
// CPU reference implementations (src/ops/cpu/sigmoid_gate.cpp): f32 and f64, OpenMP.
// Same contract as ops/sigmoid_gate.h, which documents every function.
#include "ops/sigmoid_gate.h"

namespace primus::ops::cpu {

void sigmoid_gate_forward(const Tensor& g, const Tensor& x, Tensor& y, const Stream& s);
void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dg,
                           const Stream& s);

}  // namespace primus::ops::cpu
