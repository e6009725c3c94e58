// CPU reference for the token embedding: a row gather forward, a row scatter-add backward. The backward
// splits the work by column blocks, so each dtable element is summed by one thread in token order:
// deterministic whatever the thread count, and no atomics. A vocabulary-sharded table (rows [vocab_begin,
// vocab_begin + V) of vocab_total) looks up zeros for, and takes no gradient from, the ids of other shards.
#include <cstring>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/embedding_cpu.h"
#include "ops/cpu/optimizer_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

void check_tokens(const char* op, const Tensor& tokens, int64_t vocab) {
  check_host(op, "tokens", tokens);
  check_ndim(op, "tokens", tokens, 1);
  check_dtype(op, "tokens", tokens, DType::kI32);
  const int32_t* ids = tokens.data<int32_t>();
  const int64_t n = tokens.numel();
  for (int64_t i = 0; i < n; ++i) {
    PRIMUS_CHECK(ids[i] >= 0 && ids[i] < vocab, "{}: token id {} at position {} is out of range [0, {})", op,
                 ids[i], i, vocab);
  }
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, const Stream& s,
                       int64_t vocab_begin, int64_t vocab_total) {
  constexpr const char* op = "embedding_forward";
  const DType dt = check_float(op, "table", table);
  check_ndim(op, "table", table, 2);
  const int64_t vocab = table.size(0), d = table.size(1);
  check_tokens(op, tokens, embedding_vocab_total(op, vocab, vocab_begin, vocab_total));
  const int64_t n = tokens.numel();
  check_tensor(op, "out", out, dt, {n, d});
  PRIMUS_CHECK(!overlaps(out, table), "embedding_forward: out must not overlap table");
  const int32_t* ids = tokens.data<int32_t>();
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(dt);
  const char* src = static_cast<const char*>(table.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
#pragma omp parallel for schedule(static) if (n * d > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[i] - vocab_begin;
    if (row >= 0 && row < vocab) {
      std::memcpy(dst + i * row_bytes, src + row * row_bytes, row_bytes);
    } else {
      std::memset(dst + i * row_bytes, 0, row_bytes);  // another shard's id (all-bits-zero is 0.0)
    }
  }
}

void embedding_forward_updated(const Tensor& tokens, const Tensor& master, const Tensor& grad,
                               const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                               const Stream& s) {
  constexpr const char* op = "embedding_forward_updated";
  const DType dt = check_float(op, "master", master);
  check_ndim(op, "master", master, 2);
  const int64_t vocab = master.size(0), d = master.size(1);
  check_tensor(op, "grad", grad, dt, {vocab, d});
  // The moments as adamw_step takes them: the master's dtype, or bf16 (precision-aware optimizer state).
  for (const Tensor* t : {&m, &v}) check_tensor(op, "m/v", *t, t->dtype(), {vocab, d});
  check_tokens(op, tokens, vocab);
  const int64_t n = tokens.numel();
  check_tensor(op, "out", out, out.dtype(), {n, d});
  // The truth: gather the rows, apply the reference AdamW to the copies, let it write out's dtype.
  Tensor rows[4] = {Tensor::empty({n, d}, dt), Tensor::empty({n, d}, dt), Tensor::empty({n, d}, m.dtype()),
                    Tensor::empty({n, d}, v.dtype())};
  const Tensor* src[4] = {&master, &grad, &m, &v};
  for (int k = 0; k < 4; ++k) embedding_forward(tokens, *src[k], rows[k], s);
  cpu::adamw_step(rows[0], rows[1], rows[2], rows[3], p, &out, s);
}

void embedding_forward_updated_split(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                     const Tensor& grad, const Tensor& m, const Tensor& v,
                                     const AdamWParams& p, Tensor& out, const Stream& s) {
  constexpr const char* op = "embedding_forward_updated_split";
  check_host(op, "hi", hi);
  check_ndim(op, "hi", hi, 2);
  check_tensor(op, "rem", rem, DType::kI16, hi.shape());
  // The definition: the updated lookup of the joined f32 master table.
  Tensor master = Tensor::empty(hi.shape(), DType::kF32);
  cpu::master_join(hi, rem, master, s);
  cpu::embedding_forward_updated(tokens, master, grad, m, v, p, out, s);
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, const Stream& s,
                        int64_t vocab_begin, int64_t vocab_total) {
  constexpr const char* op = "embedding_backward";
  const DType dt = check_float(op, "dtable", dtable);
  check_ndim(op, "dtable", dtable, 2);
  const int64_t vocab = dtable.size(0), d = dtable.size(1);
  check_tokens(op, tokens, embedding_vocab_total(op, vocab, vocab_begin, vocab_total));
  const int64_t n = tokens.numel();
  check_tensor(op, "dout", dout, dt, {n, d});
  PRIMUS_CHECK(!overlaps(dout, dtable), "embedding_backward: dout must not overlap dtable");
  const int32_t* ids = tokens.data<int32_t>();
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    T* w = dtable.data<T>();
    detail::scatter_add_rows(ids, n, dout.data<T>(), d, vocab_begin, vocab,
                             [&](int64_t row) { return w + row * d; });
  });
}

}  // namespace primus::ops::cpu
