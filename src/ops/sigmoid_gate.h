#pragma once
// Sigmoid-gated sum, per row: y += sigmoid(g) * x. Qwen2-MoE's gated shared expert (and Megatron's
// moe_shared_expert_gate) scales the shared expert's output x [n, d] by sigmoid of one logit per token
// g [n] = h . w_gate (a GEMM the caller runs in f32) before adding it to the routed output y.
#include "core/tensor.h"

namespace primus::ops {

// y [n, d] += sigmoid(g[t]) * x [n, d]. CPU: every tensor f32 or f64 (one dtype). CUDA: g f32, x and y bf16
// (the sum is rounded once, from f32).
void sigmoid_gate_forward(const Tensor& g, const Tensor& x, Tensor& y, const Stream& s);

// Backward of y += sigmoid(g) * x, given dy [n, d]:
//   dx [n, d] = sigmoid(g[t]) * dy                                   (overwritten)
//   dg [n]    = sigmoid(g[t]) (1 - sigmoid(g[t])) * sum_j dy[t, j] x[t, j]   (overwritten)
// CUDA: g and dg f32, x, dy, dx bf16 (the row sums in f32).
void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dg,
                           const Stream& s);

}  // namespace primus::ops
