#pragma once
// CUDA implementations (src/ops/cuda/loss.cu): bf16 activations/weights, f32 statistics and parameter grads.
// Same contract as ops/loss.h, which documents every function; the dispatcher ops/loss.cpp routes here.
#include "ops/loss.h"

namespace primus::ops::cuda {

void softmax_cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale, Tensor& losses,
                           Tensor* dlogits, const Stream& s);
void vocab_parallel_ce_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                             int64_t vocab_total, Tensor& stats, const Stream& s);
void vocab_parallel_ce_finish(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                              const Tensor& all_stats, float grad_scale, Tensor& losses, Tensor* dlogits,
                              const Stream& s);

}  // namespace primus::ops::cuda
