// CPU reference for the row-sparse embedding gradient. The backward sums exactly as the dense
// embedding_backward does (column blocks, each element in token order), only into a row's slot; the AdamW
// and updated-lookup variants are the dense ops on the densified gradient, which makes "bitwise the dense
// result" true by construction.
#include "ops/cpu/row_sparse_grad_cpu.h"

#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/embedding_cpu.h"
#include "ops/cpu/optimizer_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

void check_grad(const char* op, const RowSparseGrad& g) {
  PRIMUS_CHECK(g.defined(), "{}: the row-sparse gradient is not allocated", op);
  check_host(op, "g.rows", g.rows);
  check_dtype(op, "g.rows", g.rows, DType::kF32);
  PRIMUS_CHECK(g.rows.ndim() == 2, "{}: g.rows must be [C, D], got {}", op, g.rows.describe());
  check_tensor(op, "g.slot_of", g.slot_of, DType::kI32, {g.vocab()});
  check_tensor(op, "g.row_of", g.row_of, DType::kI32, {g.capacity()});
  check_tensor(op, "g.count", g.count, DType::kI32, {1});
}

// The gradient of table elements [first, first + n) as a dense f32 tensor.
Tensor dense_span(const RowSparseGrad& g, int64_t first, int64_t n) {
  Tensor out = Tensor::zeros({n}, DType::kF32);
  const int64_t d = g.dim(), vocab = g.vocab();
  const int32_t* slot = g.slot_of.data<int32_t>();
  const float* rows = g.rows.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = first + i, r = e / d;
    if (r < vocab && slot[r] >= 0) o[i] = rows[slot[r] * d + e % d];
  }
  return out;
}

// Slots for the rows of ids[0, n) (table rows id - vocab_begin; ids outside [0, total) refused) without one,
// in ascending row order after those in use.
void assign_slots(const char* op, const int32_t* ids, int64_t n, int64_t vocab_begin, int64_t total,
                  RowSparseGrad& g) {
  const int64_t vocab = g.vocab();
  for (int64_t i = 0; i < n; ++i)
    PRIMUS_CHECK(ids[i] >= 0 && ids[i] < total, "{}: token id {} at position {} is out of range [0, {})", op,
                 ids[i], i, total);
  int32_t* slot = g.slot_of.data<int32_t>();
  int32_t* row_of = g.row_of.data<int32_t>();
  int32_t& count = g.count.data<int32_t>()[0];
  std::vector<int32_t> fresh;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = ids[i] - vocab_begin;
    if (r >= 0 && r < vocab && slot[r] == -1) {
      slot[r] = -2;  // seen in this call
      fresh.push_back(static_cast<int32_t>(r));
    }
  }
  std::sort(fresh.begin(), fresh.end());
  if (count + static_cast<int64_t>(fresh.size()) > g.capacity())
    for (int32_t r : fresh) slot[r] = -1;  // nothing assigned: the map stays as it was
  PRIMUS_CHECK(count + static_cast<int64_t>(fresh.size()) <= g.capacity(),
               "{}: {} distinct table rows this step, more than the gradient's {} slots (the capacity must "
               "cover every token of a step)",
               op, count + static_cast<int64_t>(fresh.size()), g.capacity());
  for (int32_t r : fresh) {
    slot[r] = count;
    row_of[count++] = r;
  }
}

}  // namespace

RowSparseGrad row_sparse_grad(int64_t vocab, int64_t dim, int64_t capacity, const Stream& s) {
  PRIMUS_CHECK(vocab >= 1 && dim >= 1 && capacity >= 1 && capacity <= vocab,
               "row_sparse_grad: need vocab, dim >= 1 and 1 <= capacity <= vocab, got V {}, D {}, C {}",
               vocab, dim, capacity);
  RowSparseGrad g;
  g.rows = Tensor::zeros({capacity, dim}, DType::kF32, s);
  g.slot_of = Tensor::empty({vocab}, DType::kI32, s);
  std::fill_n(g.slot_of.data<int32_t>(), vocab, -1);
  g.row_of = Tensor::zeros({capacity}, DType::kI32, s);
  g.count = Tensor::zeros({1}, DType::kI32, s);
  return g;
}

void embedding_backward_sparse(const Tensor& tokens, const Tensor& dout, RowSparseGrad& g, const Stream& s,
                               int64_t vocab_begin, int64_t vocab_total) {
  constexpr const char* op = "embedding_backward_sparse";
  check_grad(op, g);
  const int64_t vocab = g.vocab(), d = g.dim();
  const int64_t total = embedding_vocab_total(op, vocab, vocab_begin, vocab_total);
  check_host(op, "tokens", tokens);
  check_dtype(op, "tokens", tokens, DType::kI32);
  const int64_t n = tokens.numel();
  check_tensor(op, "dout", dout, DType::kF32, {n, d});
  const int32_t* ids = tokens.data<int32_t>();
  assign_slots(op, ids, n, vocab_begin, total, g);
  const int32_t* slot = g.slot_of.data<int32_t>();
  float* w = g.rows.data<float>();
  detail::scatter_add_rows(ids, n, dout.data<float>(), d, vocab_begin, vocab,
                           [&](int64_t r) { return w + static_cast<int64_t>(slot[r]) * d; });
}

void row_sparse_reserve(const Tensor& rows, RowSparseGrad& g, const Stream& s) {
  constexpr const char* op = "row_sparse_reserve";
  check_grad(op, g);
  check_host(op, "rows", rows);
  check_dtype(op, "rows", rows, DType::kI32);
  assign_slots(op, rows.data<int32_t>(), rows.numel(), 0, g.vocab(), g);
}

void row_sparse_clear(RowSparseGrad& g, const Stream& s) {
  check_grad("row_sparse_clear", g);
  int32_t& count = g.count.data<int32_t>()[0];
  const int64_t d = g.dim();
  for (int32_t k = 0; k < count; ++k) {
    g.slot_of.data<int32_t>()[g.row_of.data<int32_t>()[k]] = -1;
    std::fill_n(g.rows.data<float>() + k * d, d, 0.0f);
  }
  count = 0;
}

void row_sparse_to_dense(const RowSparseGrad& g, Tensor& dense, const Stream& s) {
  constexpr const char* op = "row_sparse_to_dense";
  check_grad(op, g);
  check_tensor(op, "dense", dense, DType::kF32, {g.vocab(), g.dim()});
  Tensor all = dense_span(g, 0, g.vocab() * g.dim());
  std::copy_n(all.data<float>(), all.numel(), dense.data<float>());
}

void adamw_step_sparse(Tensor& master, const RowSparseGrad& g, int64_t first, Tensor& m, Tensor& v,
                       const AdamWParams& p, Tensor* param_copy, const Stream& s) {
  check_grad("adamw_step_sparse", g);
  PRIMUS_CHECK(first >= 0, "adamw_step_sparse: first must be >= 0, got {}", first);
  const Tensor grad = dense_span(g, first, master.numel());
  cpu::adamw_step(master, grad, m, v, p, param_copy, s);
}

void adamw_step_split_sparse(Tensor& hi, Tensor& rem, const RowSparseGrad& g, int64_t first, Tensor& m,
                             Tensor& v, const AdamWParams& p, const Stream& s) {
  check_grad("adamw_step_split_sparse", g);
  PRIMUS_CHECK(first >= 0, "adamw_step_split_sparse: first must be >= 0, got {}", first);
  const Tensor grad = dense_span(g, first, hi.numel());
  cpu::adamw_step_split(hi, rem, grad, m, v, p, s);
}

void embedding_forward_updated_sparse(const Tensor& tokens, const Tensor& master, const RowSparseGrad& g,
                                      const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                                      const Stream& s) {
  check_grad("embedding_forward_updated_sparse", g);
  Tensor grad = Tensor::empty({g.vocab(), g.dim()}, DType::kF32);
  cpu::row_sparse_to_dense(g, grad, s);
  cpu::embedding_forward_updated(tokens, master, grad, m, v, p, out, s);
}

void embedding_forward_updated_split_sparse(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                            const RowSparseGrad& g, const Tensor& m, const Tensor& v,
                                            const AdamWParams& p, Tensor& out, const Stream& s) {
  check_grad("embedding_forward_updated_split_sparse", g);
  Tensor grad = Tensor::empty({g.vocab(), g.dim()}, DType::kF32);
  cpu::row_sparse_to_dense(g, grad, s);
  cpu::embedding_forward_updated_split(tokens, hi, rem, grad, m, v, p, out, s);
}

}  // namespace primus::ops::cpu
