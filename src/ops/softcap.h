#pragma once
// Soft-capping: a smooth clamp of logits to (-cap, cap), y = cap * tanh(x / cap). Grok-2 caps the output
// logits (final_logit_softcapping) and the MoE router's logits (router_logit_softcapping) this way.
#include "core/tensor.h"

namespace primus::ops {

// y = cap * tanh(x / cap), cap > 0; x and y one float dtype and size (CPU: f32 / f64; CUDA: bf16 / f32, the
// math in f32). y may be x itself (in place).
void softcap_forward(const Tensor& x, float cap, Tensor& y, const Stream& s);

// The backward from the capped values (so that the input need not be kept): dx = dy * (1 - (y / cap)^2),
// since d/dx cap tanh(x / cap) = 1 - tanh^2. y, dy, dx one dtype and size; dx may be dy itself (in place).
void softcap_backward(const Tensor& y, const Tensor& dy, float cap, Tensor& dx, const Stream& s);

}  // namespace primus::ops
