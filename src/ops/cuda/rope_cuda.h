#pragma once
// CUDA implementations (src/ops/cuda/rope.cu): bf16 activations/weights, f32 statistics and parameter grads.
// Same contract as ops/rope.h, which documents every function; the dispatcher ops/rope.cpp routes here.
#include "ops/rope.h"

namespace primus::ops::cuda {

void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, const Tensor* positions, bool inverse,
                const Stream& s);

}  // namespace primus::ops::cuda
