#pragma once
// CUDA implementations (src/ops/cuda/moe_permute.cu): bf16 rows, f32 probabilities and accumulation.
// Same contract as ops/moe_permute.h, which documents every function; the dispatcher ops/moe_permute.cpp
// routes here.
#include "ops/moe_permute.h"

namespace primus::ops::cuda {

MoePermutePlan moe_permute_plan(const Tensor& ids, int64_t num_experts, int64_t capacity, const Stream& s);
void moe_permute(const Tensor& x, const MoePermutePlan& plan, Tensor& x_perm, const Stream& s);
void moe_permute_backward(const Tensor& dx_perm, const MoePermutePlan& plan, Tensor& dx, const Stream& s);
void moe_unpermute(const Tensor& y_perm, const MoePermutePlan& plan, const Tensor& probs, Tensor& out,
                   const Stream& s);
void moe_unpermute_backward(const Tensor& dout, const Tensor& y_perm, const MoePermutePlan& plan,
                            const Tensor& probs, Tensor& dy_perm, Tensor& dprobs, const Stream& s);

}  // namespace primus::ops::cuda
