#pragma once
// CPU reference implementations (src/ops/cpu/embedding.cpp): f32 and f64, OpenMP.
// Same contract as ops/embedding.h, which documents every function; the dispatcher ops/embedding.cpp routes
// here.
#include <algorithm>
#include <cstdint>

#include "ops/cpu/cpu_common.h"
#include "ops/embedding.h"

namespace primus::ops::cpu {

namespace detail {
// dst_row(r)[c] += g[i * d + c] for every token i whose row r = ids[i] - vocab_begin lies in [0, vocab)
// (other shards' ids are skipped): column blocks split over the threads, each element summed by one thread in
// token order, so the result does not depend on the thread count. The dense backward's rows and the
// row-sparse one's slots (ops/row_sparse_grad.h) both sum this way, so a slot is bitwise its dense row.
template <typename T, typename RowPtr>
void scatter_add_rows(const int32_t* ids, int64_t n, const T* g, int64_t d, int64_t vocab_begin,
                      int64_t vocab, RowPtr dst_row) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (d + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n * d > kParallelGrain && blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(d, c0 + kBlock);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = ids[i] - vocab_begin;
      if (row < 0 || row >= vocab) continue;  // another shard's id
      const T* src = g + i * d;
      T* dst = dst_row(row);
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}
}  // namespace detail

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

}  // namespace primus::ops::cpu
