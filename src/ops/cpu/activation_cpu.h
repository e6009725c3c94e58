#pragma once
// CPU reference implementations (src/ops/cpu/activation.cpp): f32 and f64, OpenMP.
// Same contract as ops/activation.h, which documents every function; the dispatcher ops/activation.cpp routes
// here.
#include "ops/activation.h"

namespace primus::ops::cpu {

void swiglu_forward(const Tensor& gu, Tensor& out, const Stream& s);
void swiglu_backward(const Tensor& dout, const Tensor& gu, Tensor& dgu, const Stream& s);

}  // namespace primus::ops::cpu
