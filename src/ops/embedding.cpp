#include "ops/embedding.h"

#include "ops/cpu/embedding_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/embedding_cuda.h"
#endif

namespace primus::ops {

int64_t embedding_vocab_total(const char* op, int64_t rows, int64_t vocab_begin, int64_t vocab_total) {
  PRIMUS_CHECK(vocab_total >= -1, "{}: vocab_total must be -1 (the table's rows) or the vocabulary, got {}",
               op, vocab_total);
  const int64_t total = vocab_total == -1 ? rows : vocab_total;
  PRIMUS_CHECK(vocab_begin >= 0 && vocab_begin + rows <= total,
               "{}: the table's rows [{}, {}) must lie in the vocabulary [0, {})", op, vocab_begin,
               vocab_begin + rows, total);
  return total;
}

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, const Stream& s,
                       int64_t vocab_begin, int64_t vocab_total) {
  check_same_device("embedding_forward", table.device(), {&tokens, &table, &out});
  PRIMUS_DISPATCH(table, embedding_forward, tokens, table, out, s, vocab_begin, vocab_total);
}

void embedding_forward_updated(const Tensor& tokens, const Tensor& master, const Tensor& grad,
                               const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                               const Stream& s) {
  check_same_device("embedding_forward_updated", master.device(), {&tokens, &master, &grad, &m, &v, &out});
  PRIMUS_DISPATCH(master, embedding_forward_updated, tokens, master, grad, m, v, p, out, s);
}

void embedding_forward_updated_split(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                     const Tensor& grad, const Tensor& m, const Tensor& v,
                                     const AdamWParams& p, Tensor& out, const Stream& s) {
  check_same_device("embedding_forward_updated_split", hi.device(),
                    {&tokens, &hi, &rem, &grad, &m, &v, &out});
  PRIMUS_DISPATCH(hi, embedding_forward_updated_split, tokens, hi, rem, grad, m, v, p, out, s);
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, const Stream& s,
                        int64_t vocab_begin, int64_t vocab_total) {
  check_same_device("embedding_backward", dtable.device(), {&tokens, &dout, &dtable});
  PRIMUS_DISPATCH(dtable, embedding_backward, tokens, dout, dtable, s, vocab_begin, vocab_total);
}

}  // namespace primus::ops
