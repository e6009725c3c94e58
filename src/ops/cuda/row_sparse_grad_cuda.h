#pragma once
// CUDA implementations of the row-sparse embedding gradient (ops/row_sparse_grad.h, which documents every
// function). src/ops/cuda/row_sparse_grad.cu holds the slot bookkeeping, the densification and the AdamW
// variants; src/ops/cuda/embedding.cu holds embedding_backward_sparse and the updated lookups, which share
// the dense ops' kernels. The dispatcher ops/row_sparse_grad.cpp routes here.
#include "ops/row_sparse_grad.h"

namespace primus::ops::cuda {

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

namespace detail {

// Shared by row_sparse_grad.cu and embedding.cu (defined in row_sparse_grad.cu).

// g's four tensors: defined, contiguous, on one CUDA device, with the dtypes and shapes of the layout.
void check_row_sparse_grad(const char* op, const RowSparseGrad& g);
// Throws if an earlier embedding_backward_sparse ran out of slots (a device flag in pinned, host-mapped
// memory: the kernel that hands out slots cannot throw, so the next call of any op of this family reports it,
// once).
void raise_row_sparse_overflow(const char* op);
// Gives every row marked -2 in g.slot_of the next free slot, in ascending row order, on s (one block; reads
// and advances g.count on the device). Past the capacity it gives none (the row goes back to -1) and sets the
// flag.
void launch_row_sparse_assign(RowSparseGrad& g, const Stream& s);

}  // namespace detail
}  // namespace primus::ops::cuda
