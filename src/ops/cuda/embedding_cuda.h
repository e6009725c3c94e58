#pragma once
// CUDA implementations (src/ops/cuda/embedding.cu): bf16 activations/weights, f32 statistics and parameter
// grads. Same contract as ops/embedding.h, which documents every function; the dispatcher ops/embedding.cpp
// routes here.
#include "ops/embedding.h"

namespace primus::ops::cuda {

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, const Stream& s,
                       int64_t vocab_begin = 0, int64_t vocab_total = -1);
void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, const Stream& s,
                        int64_t vocab_begin = 0, int64_t vocab_total = -1);
void embedding_forward_updated(const Tensor& tokens, const Tensor& master, const Tensor& grad,
                               const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                               const Stream& s);
void embedding_forward_updated_split(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                     const Tensor& grad, const Tensor& m, const Tensor& v,
                                     const AdamWParams& p, Tensor& out, const Stream& s);

}  // namespace primus::ops::cuda
