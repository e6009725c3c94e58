#include "ops/row_sparse_grad.h"

#include "ops/cpu/row_sparse_grad_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/row_sparse_grad_cuda.h"
#endif

namespace primus::ops {

namespace {
void check_grad_device(const char* op, const RowSparseGrad& g, std::initializer_list<const Tensor*> more) {
  PRIMUS_CHECK(g.defined(), "{}: the row-sparse gradient is not allocated", op);
  check_same_device(op, g.rows.device(), {&g.rows, &g.slot_of, &g.row_of, &g.count});
  check_same_device(op, g.rows.device(), more);
}
}  // namespace

RowSparseGrad row_sparse_grad(int64_t vocab, int64_t dim, int64_t capacity, const Stream& s) {
  if (s.device.is_cpu()) return cpu::row_sparse_grad(vocab, dim, capacity, s);
#ifdef PRIMUS_WITH_CUDA
  return cuda::row_sparse_grad(vocab, dim, capacity, s);
#else
  throw Error(ErrorKind::kRuntime, "row_sparse_grad: CUDA stream given to a CPU-only build");
#endif
}

void embedding_backward_sparse(const Tensor& tokens, const Tensor& dout, RowSparseGrad& g, const Stream& s,
                               int64_t vocab_begin, int64_t vocab_total) {
  check_grad_device("embedding_backward_sparse", g, {&tokens, &dout});
  PRIMUS_DISPATCH(g.rows, embedding_backward_sparse, tokens, dout, g, s, vocab_begin, vocab_total);
}

void row_sparse_reserve(const Tensor& rows, RowSparseGrad& g, const Stream& s) {
  check_grad_device("row_sparse_reserve", g, {&rows});
  PRIMUS_DISPATCH(g.rows, row_sparse_reserve, rows, g, s);
}

void row_sparse_clear(RowSparseGrad& g, const Stream& s) {
  check_grad_device("row_sparse_clear", g, {});
  PRIMUS_DISPATCH(g.rows, row_sparse_clear, g, s);
}

void row_sparse_to_dense(const RowSparseGrad& g, Tensor& dense, const Stream& s) {
  check_grad_device("row_sparse_to_dense", g, {&dense});
  PRIMUS_DISPATCH(g.rows, row_sparse_to_dense, g, dense, s);
}

void adamw_step_sparse(Tensor& master, const RowSparseGrad& g, int64_t first, Tensor& m, Tensor& v,
                       const AdamWParams& p, Tensor* param_copy, const Stream& s) {
  check_grad_device("adamw_step_sparse", g, {&master, &m, &v});
  PRIMUS_DISPATCH(g.rows, adamw_step_sparse, master, g, first, m, v, p, param_copy, s);
}

void adamw_step_split_sparse(Tensor& hi, Tensor& rem, const RowSparseGrad& g, int64_t first, Tensor& m,
                             Tensor& v, const AdamWParams& p, const Stream& s) {
  check_grad_device("adamw_step_split_sparse", g, {&hi, &rem, &m, &v});
  PRIMUS_DISPATCH(g.rows, adamw_step_split_sparse, hi, rem, g, first, m, v, p, s);
}

void embedding_forward_updated_sparse(const Tensor& tokens, const Tensor& master, const RowSparseGrad& g,
                                      const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                                      const Stream& s) {
  check_grad_device("embedding_forward_updated_sparse", g, {&tokens, &master, &m, &v, &out});
  PRIMUS_DISPATCH(g.rows, embedding_forward_updated_sparse, tokens, master, g, m, v, p, out, s);
}

void embedding_forward_updated_split_sparse(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                            const RowSparseGrad& g, const Tensor& m, const Tensor& v,
                                            const AdamWParams& p, Tensor& out, const Stream& s) {
  check_grad_device("embedding_forward_updated_split_sparse", g, {&tokens, &hi, &rem, &m, &v, &out});
  PRIMUS_DISPATCH(g.rows, embedding_forward_updated_split_sparse, tokens, hi, rem, g, m, v, p, out, s);
}

}  // namespace primus::ops
