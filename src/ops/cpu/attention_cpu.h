#pragma once
// CPU reference implementations (src/ops/cpu/attention.cpp): f32 and f64, OpenMP.
// Same contract as ops/attention.h, which documents every function; the dispatcher ops/attention.cpp routes
// here.
#include "ops/attention.h"

namespace primus::ops::cpu {

void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse,
                       const Stream& s);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionShape& shape, Tensor& dqkv, const Stream& s);
void attention_merge(Tensor& acc, Tensor& acc_lse, const Tensor& part, const Tensor& part_lse,
                     const Stream& s);

}  // namespace primus::ops::cpu
