#include "parallel/context_parallel.h"

#include <cmath>
#include <cstring>

#include "core/env.h"
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

std::shared_ptr<StreamEvent> ContextParallel::gather_kv_async(const Tensor& kv, Tensor& all,
                                                              const Stream& s) const {
  all = Tensor::empty({size() * kv.size(0), kv.size(1)}, kv.dtype(), s);
  // PRIMUS_CP_OVERLAP=0 (an A/B switch, docs/performance.md): the gather on the compute stream, before every
  // block.
  static const bool overlap = env_int("PRIMUS_CP_OVERLAP", 1, 0, 1) == 1;
  if (!overlap || s.device.is_cpu()) {
    cp_.all_gather(kv.flatten(), all.flatten(), s, "cp key/value chunks");
    return nullptr;
  }
  if (!side_made_) {
    side_ = make_comm_stream(s);
    side_made_ = true;
  }
  stream_wait(side_, StreamEvent::record(s));  // kv is written
  cp_.all_gather(kv.flatten(), all.flatten(), side_, "cp key/value chunks");
  return StreamEvent::record(side_);
}

std::vector<ContextParallel::Block> ContextParallel::blocks() const {
  // This rank's own key chunks first (their keys are here before the gather has finished), then the others';
  // within each, by query half and key chunk.
  std::vector<Block> out;
  for (int pass = 0; pass < 2; ++pass)
    for (int h = 0; h < 2; ++h)
      for (int64_t j = 0; j <= chunk(h); ++j) {
        const int own = j == chunk(0) ? 0 : j == chunk(1) ? 1 : -1;
        if ((pass == 0) == (own >= 0)) out.push_back({h, j, own});
      }
  return out;
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
  Tensor kv_all;
  const auto gathered = gather_kv_async(kv, kv_all, s);
  Tensor packed = Tensor::empty({rows, W}, dt, s), part = Tensor::empty({rows, ow}, dt, s);
  Tensor part_lse = Tensor::empty({B, shape.heads, C}, at, s), acc = Tensor::empty({2 * rows, ow}, at, s);
  Tensor out2 = out.view({2 * rows, ow}), lse_flat = lse.flatten();
  const int64_t lse_len = B * shape.heads * C;
  ops::fill_(acc, 0.0f, s);
  ops::fill_(lse_flat, -INFINITY, s);
  ops::AttentionShape blk = shape;
  bool waited = false;
  for (const Block& b : blocks()) {
    if (b.own < 0 && !waited) {
      stream_wait(s, gathered);
      waited = true;
    }
    const Tensor keys = b.own >= 0
                            ? kv.slice(b.own * rows, (b.own + 1) * rows)
                            : kv_all.slice(block_of_chunk(b.key) * rows, (block_of_chunk(b.key) + 1) * rows);
    ops::concat_columns(q.slice(b.half * rows, (b.half + 1) * rows), keys, packed, s);
    blk.causal = b.key == chunk(b.half);  // earlier chunks are wholly visible; the own chunk is the diagonal
    Tensor part3 = part.view({B, C, ow});
    ops::attention_forward(packed.view({B, C, W}), blk, part3, part_lse, s);
    Tensor acc3 = acc.slice(b.half * rows, (b.half + 1) * rows).view({B, C, ow});
    Tensor acc_lse = lse_flat.slice(b.half * lse_len, (b.half + 1) * lse_len).view({B, shape.heads, C});
    ops::attention_merge(acc3, acc_lse, part3, part_lse, s);
  }
  if (!waited) stream_wait(s, gathered);  // (every block local: kv_all is released on this stream)
  ops::cast(acc, out2, s);
}

void ContextParallel::attention_backward(const Tensor& d_out, const Tensor& qkv, const Tensor& out,
                                         const Tensor& lse, const ops::AttentionShape& shape, Tensor& d_qkv,
                                         const Stream& s) const {
  const int64_t B = shape.batch, C = shape.seq, rows = B * C, W = shape.qkv_width();
  const int64_t qw = shape.heads * shape.head_dim, kvw = W - qw, ow = shape.out_width();
  const DType dt = qkv.dtype(), at = accumulation_dtype(dt);
  Tensor q = Tensor::empty({2 * rows, qw}, dt, s), kv = Tensor::empty({2 * rows, kvw}, dt, s);
  ops::split_columns(qkv.view({2 * rows, W}), q, kv, s);
  Tensor kv_all;  // gathered again rather than kept from the forward (memory)
  const auto gathered = gather_kv_async(kv, kv_all, s);
  Tensor dq_acc = Tensor::zeros({2 * rows, qw}, at, s),
         dkv_acc = Tensor::zeros({size() * 2 * rows, kvw}, at, s);
  Tensor packed = Tensor::empty({rows, W}, dt, s), d_packed = Tensor::empty({rows, W}, dt, s);
  Tensor dq = Tensor::empty({rows, qw}, dt, s), dkv = Tensor::empty({rows, kvw}, dt, s);
  Tensor tmp_q = Tensor::empty({rows, qw}, at, s), tmp_kv = Tensor::empty({rows, kvw}, at, s);
  const Tensor out2 = out.view({2 * rows, ow}), dout2 = d_out.view({2 * rows, ow}), lse_flat = lse.flatten();
  const int64_t lse_len = B * shape.heads * C;
  ops::AttentionShape blk = shape;
  bool waited = false;
  for (const Block& b : blocks()) {
    if (b.own < 0 && !waited) {
      stream_wait(s, gathered);
      waited = true;
    }
    const int64_t kb = block_of_chunk(b.key), h = b.half;
    const Tensor keys =
        b.own >= 0 ? kv.slice(b.own * rows, (b.own + 1) * rows) : kv_all.slice(kb * rows, (kb + 1) * rows);
    ops::concat_columns(q.slice(h * rows, (h + 1) * rows), keys, packed, s);
    blk.causal = b.key == chunk(h);
    // Against the merged output and log-sum-exp: each block's share of the whole softmax's gradient.
    Tensor dp3 = d_packed.view({B, C, W});
    ops::attention_backward(dout2.slice(h * rows, (h + 1) * rows).view({B, C, ow}), packed.view({B, C, W}),
                            out2.slice(h * rows, (h + 1) * rows).view({B, C, ow}),
                            lse_flat.slice(h * lse_len, (h + 1) * lse_len).view({B, shape.heads, C}), blk,
                            dp3, s);
    ops::split_columns(d_packed, dq, dkv, s);
    accumulate(dq_acc.slice(h * rows, (h + 1) * rows), dq, tmp_q, s);
    accumulate(dkv_acc.slice(kb * rows, (kb + 1) * rows), dkv, tmp_kv, s);
  }
  if (!waited) stream_wait(s, gathered);
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
