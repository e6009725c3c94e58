#pragma once
// SwiGLU: out = silu(gate) * up with gate/up packed side by side (one fused gate+up GEMM produces them).
#include "core/tensor.h"

namespace primus::ops {

// gu [R, 2F] = [gate | up]; out [R, F].
void swiglu_forward(const Tensor& gu, Tensor& out, const Stream& s);
// dgu [R, 2F] (overwritten) from dout [R, F].
void swiglu_backward(const Tensor& dout, const Tensor& gu, Tensor& dgu, const Stream& s);

}  // namespace primus::ops
