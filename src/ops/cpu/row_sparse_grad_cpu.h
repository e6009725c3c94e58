#pragma once
// CPU reference implementations (src/ops/cpu/row_sparse_grad.cpp): f32. Same contract as
// ops/row_sparse_grad.h, which documents every function; the dispatcher ops/row_sparse_grad.cpp routes here.
#include "ops/row_sparse_grad.h"

namespace primus::ops::cpu {

RowSparseGrad row_sparse_grad(int64_t vocab, int64_t dim, int64_t capacity, const Stream& s);
void embedding_backward_sparse(const Tensor& tokens, const Tensor& dout, RowSparseGrad& g, const Stream& s,
                               int64_t vocab_begin = 0, int64_t vocab_total = -1);
void row_sparse_reserve(const Tensor& rows, RowSparseGrad& g, const Stream& s);
void row_sparse_clear(RowSparseGrad& g, const Stream& s);
void row_sparse_to_dense(const RowSparseGrad& g, Tensor& dense, const Stream& s);
void adamw_step_sparse(Tensor& master, const RowSparseGrad& g, int64_t first, Tensor& m, Tensor& v,
                       const AdamWParams& p, Tensor* param_copy, const Stream& s);
void adamw_step_split_sparse(Tensor& hi, Tensor& rem, const RowSparseGrad& g, int64_t first, Tensor& m,
                             Tensor& v, const AdamWParams& p, const Stream& s);
void embedding_forward_updated_sparse(const Tensor& tokens, const Tensor& master, const RowSparseGrad& g,
                                      const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                                      const Stream& s);
void embedding_forward_updated_split_sparse(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                            const RowSparseGrad& g, const Tensor& m, const Tensor& v,
                                            const AdamWParams& p, Tensor& out, const Stream& s);

}  // namespace primus::ops::cpu
