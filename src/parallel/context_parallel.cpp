#include "parallel/context_parallel.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/elementwise.h"

namespace primus::parallel {

namespace {

// The dtype partial results are folded in: f32, or f64 for a gradient-check model.
DType accumulation_dtype(DType act) {
  return act == DType::kF64 ? DType::kF64 : DType::kF32;
}

// acc += part (part in the activation dtype, acc in the accumulation dtype; tmp: part's shape in acc's).
void accumulate(Tensor acc, const Tensor& part, Tensor& tmp, const Stream& s) {
  if (part.dtype() == acc.dtype()) {
    ops::add(acc, part, acc, s);
    return;
  }
  ops::cast(part, tmp, s);
  ops::add(acc, tmp, acc, s);
}

}  // namespace

ContextParallel::ContextParallel(comm::Communicator& cp) : cp_(cp) {}

Tensor ContextParallel::local_tokens(const Tensor& full) const {
  PRIMUS_CHECK(full.ndim() == 2 && full.dtype() == DType::kI32 && full.device().is_cpu(),
               "context parallelism: expected host i32 [B, T] tokens, got {}", full.describe());
  const int64_t B = full.size(0), T = full.size(1), C = T / (2 * size());
  PRIMUS_CHECK(C * 2 * size() == T,
               "context parallelism: sequence length {} does not split into 2 x {} chunks", T, size());
  Tensor out = Tensor::empty({2 * B, C}, DType::kI32);
  const int32_t* src = full.data<int32_t>();
  int32_t* dst = out.data<int32_t>();
  for (int h = 0; h < 2; ++h)
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(dst + (h * B + b) * C, src + b * T + chunk(h) * C,
                  static_cast<size_t>(C) * sizeof(int32_t));
  return out;
}

int64_t ContextParallel::block_of_chunk(int64_t c) const {
  const int64_t n = size();
  return c < n ? 2 * c : 2 * (2 * n - 1 - c) + 1;  // owner c holds it first; owner 2n-1-c second
}

Tensor ContextParallel::gather_kv(const Tensor& kv, const Stream& s) const {
  Tensor all = Tensor::empty({size() * kv.size(0), kv.size(1)}, kv.dtype(), s);
  cp_.all_gather(kv.flatten(), all.flatten(), s, "cp key/value chunks");
  return all;
}

void ContextParallel::attention_forward(const Tensor& qkv, const ops::AttentionShape& shape, Tensor& out,
                                        Tensor& lse, const Stream& s) const {
  const int64_t B = shape.batch, C = shape.seq, rows = B * C, W = shape.qkv_width();
  const int64_t qw = shape.heads * shape.head_dim, kvw = W - qw, ow = shape.out_width();
  const DType dt = qkv.dtype(), at = accumulation_dtype(dt);
  PRIMUS_CHECK(
      qkv.numel() == 2 * rows * W && out.numel() == 2 * rows * ow && lse.numel() == 2 * B * shape.heads * C,
      "cp attention: qkv {} / out {} / lse {} do not hold 2 chunks of [{}, {}]", qkv.describe(),
      out.describe(), lse.describe(), B, C);
  Tensor q = Tensor::empty({2 * rows, qw}, dt, s), kv = Tensor::empty({2 * rows, kvw}, dt, s);
  ops::split_columns(qkv.view({2 * rows, W}), q, kv, s);
  const Tensor kv_all = gather_kv(kv, s);
  Tensor packed = Tensor::empty({rows, W}, dt, s), part = Tensor::empty({rows, ow}, dt, s);
  Tensor part_lse = Tensor::empty({B, shape.heads, C}, at, s), acc = Tensor::empty({rows, ow}, at, s);
  Tensor out2 = out.view({2 * rows, ow}), lse_flat = lse.flatten();
  ops::AttentionShape blk = shape;
  for (int h = 0; h < 2; ++h) {
    const int64_t c = chunk(h);
    Tensor acc_lse =
        lse_flat.slice(h * B * shape.heads * C, (h + 1) * B * shape.heads * C).view({B, shape.heads, C});
    ops::fill_(acc, 0.0f, s);
    ops::fill_(acc_lse, -INFINITY, s);
    const Tensor qh = q.slice(h * rows, (h + 1) * rows);
    for (int64_t j = 0; j <= c; ++j) {
      const int64_t kb = block_of_chunk(j);
      ops::concat_columns(qh, kv_all.slice(kb * rows, (kb + 1) * rows), packed, s);
      blk.causal = j == c;  // earlier chunks are wholly visible; the own chunk is the causal diagonal
      Tensor part3 = part.view({B, C, ow});
      ops::attention_forward(packed.view({B, C, W}), blk, part3, part_lse, s);
      Tensor acc3 = acc.view({B, C, ow});
      ops::attention_merge(acc3, acc_lse, part3, part_lse, s);
    }
    Tensor dst = out2.slice(h * rows, (h + 1) * rows);
    ops::cast(acc, dst, s);
  }
}

void ContextParallel::attention_backward(const Tensor& d_out, const Tensor& qkv, const Tensor& out,
                                         const Tensor& lse, const ops::AttentionShape& shape, Tensor& d_qkv,
                                         const Stream& s) const {
  const int64_t B = shape.batch, C = shape.seq, rows = B * C, W = shape.qkv_width();
  const int64_t qw = shape.heads * shape.head_dim, kvw = W - qw, ow = shape.out_width();
  const DType dt = qkv.dtype(), at = accumulation_dtype(dt);
  Tensor q = Tensor::empty({2 * rows, qw}, dt, s), kv = Tensor::empty({2 * rows, kvw}, dt, s);
  ops::split_columns(qkv.view({2 * rows, W}), q, kv, s);
  const Tensor kv_all = gather_kv(kv, s);  // gathered again rather than kept from the forward (memory)
  Tensor dq_acc = Tensor::zeros({2 * rows, qw}, at, s),
         dkv_acc = Tensor::zeros({size() * 2 * rows, kvw}, at, s);
  Tensor packed = Tensor::empty({rows, W}, dt, s), d_packed = Tensor::empty({rows, W}, dt, s);
  Tensor dq = Tensor::empty({rows, qw}, dt, s), dkv = Tensor::empty({rows, kvw}, dt, s);
  Tensor tmp_q = Tensor::empty({rows, qw}, at, s), tmp_kv = Tensor::empty({rows, kvw}, at, s);
  const Tensor out2 = out.view({2 * rows, ow}), dout2 = d_out.view({2 * rows, ow}), lse_flat = lse.flatten();
  ops::AttentionShape blk = shape;
  for (int h = 0; h < 2; ++h) {
    const int64_t c = chunk(h);
    const Tensor lse_h =
        lse_flat.slice(h * B * shape.heads * C, (h + 1) * B * shape.heads * C).view({B, shape.heads, C});
    const Tensor qh = q.slice(h * rows, (h + 1) * rows);
    const Tensor out_h = out2.slice(h * rows, (h + 1) * rows).view({B, C, ow});
    const Tensor dout_h = dout2.slice(h * rows, (h + 1) * rows).view({B, C, ow});
    for (int64_t j = 0; j <= c; ++j) {
      const int64_t kb = block_of_chunk(j);
      ops::concat_columns(qh, kv_all.slice(kb * rows, (kb + 1) * rows), packed, s);
      blk.causal = j == c;
      // Against the merged output and log-sum-exp: each block's share of the whole softmax's gradient.
      Tensor dp3 = d_packed.view({B, C, W});
      ops::attention_backward(dout_h, packed.view({B, C, W}), out_h, lse_h, blk, dp3, s);
      ops::split_columns(d_packed, dq, dkv, s);
      accumulate(dq_acc.slice(h * rows, (h + 1) * rows), dq, tmp_q, s);
      accumulate(dkv_acc.slice(kb * rows, (kb + 1) * rows), dkv, tmp_kv, s);
    }
  }
  // Every rank's contributions to this rank's key/value chunks, summed here.
  Tensor dkv_mine = Tensor::empty({2 * rows, kvw}, at, s);
  cp_.reduce_scatter(dkv_acc.flatten(), dkv_mine.flatten(), comm::ReduceOp::kSum, s,
                     "cp key/value gradients");
  Tensor dq_all = Tensor::empty({2 * rows, qw}, dt, s), dkv_all = Tensor::empty({2 * rows, kvw}, dt, s);
  ops::cast(dq_acc, dq_all, s);
  ops::cast(dkv_mine, dkv_all, s);
  Tensor d2 = d_qkv.view({2 * rows, W});
  ops::concat_columns(dq_all, dkv_all, d2, s);
}

}  // namespace primus::parallel
