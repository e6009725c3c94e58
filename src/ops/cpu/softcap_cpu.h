#pragma once
// CPU reference implementations (src/ops/cpu/softcap.cpp): f32 and f64, the math in f64, OpenMP.
// Same contract as ops/softcap.h, which documents every function.
#include "ops/softcap.h"

namespace primus::ops::cpu {

void softcap_forward(const Tensor& x, float cap, Tensor& y, const Stream& s);
void softcap_backward(const Tensor& y, const Tensor& dy, float cap, Tensor& dx, const Stream& s);

}  // namespace primus::ops::cpu
