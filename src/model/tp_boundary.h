#pragma once
// The model side of tensor parallelism (parallel/tensor_parallel.h): the collectives at a parallel region's
// boundary, written so that a layer reads the same on one rank (where they are identities) as on many.
#include "model/fp8_linear.h"
#include "model/lora_adapter.h"
#include "model/step_context.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "parallel/tensor_parallel.h"

namespace primus {

// Tokens of the residual stream this rank holds: all of them, or 1/tp under sequence parallelism.
inline int64_t local_tokens(const StepContext& ctx) {
  return ctx.tp ? ctx.tp->local_rows(ctx.tokens()) : ctx.tokens();
}
// This rank's rows [local_tokens, d] -> every token's [tokens, d] (sequence parallelism's all-gather).
inline Tensor tp_gather_rows(const StepContext& ctx, const Tensor& x, const char* label) {
  return ctx.tp ? ctx.tp->gather_rows(x, ctx.stream, label) : x;
}
// Partial sums [tokens, d] -> their sum over tp, [local_tokens, d] (all-reduce, or reduce-scatter under SP).
inline Tensor tp_sum_rows(const StepContext& ctx, const Tensor& partial, const char* label) {
  return ctx.tp ? ctx.tp->sum_rows(partial, ctx.stream, label) : partial;
}

// Async TP (tp_comm_overlap) for a projection: the tp group overlaps, the projection is BF16 (an FP8
// projection's scales cover its whole input, so it is not split into row ranges) and has no LoRA adapter.
inline bool async_tp(const StepContext& ctx, int fp8_slot, const LoraAdapter* lora = nullptr) {
  return ctx.tp && ctx.tp->overlap() && (ctx.fp8 == nullptr || fp8_slot < 0) && !(lora && lora->on());
}

// y [local_tokens, d] = residual + x W^T summed over tp: a row-parallel projection (x [tokens, in/tp], w
// [d, in/tp]) and its residual add. On one rank the add rides on the GEMM's C input; without SP rank 0 adds
// it there before the all-reduce, so it is counted once. fp8_slot: the projection's FP8 slot (-1: BF16).
// A LoRA adapter (lora->on()) writes its partial product first (with the residual where this rank adds it),
// and the frozen GEMM accumulates on top, before the reduction; *lora_t receives its t.
inline void row_parallel_residual(const StepContext& ctx, const Tensor& x, const Tensor& w,
                                  const Tensor& residual, Tensor& y, const char* label, int fp8_slot = -1,
                                  const LoraAdapter* lora = nullptr, Tensor* lora_t = nullptr) {
  const Stream& s = ctx.stream;
  const bool adapted = lora && lora->on();
  // out = x W^T (+ c_in), with the adapter's t B^T written into out first.
  auto run = [&](Tensor& out, const Tensor* c_in) {
    if (!adapted) {
      project(ctx, fp8_slot, x, w, nullptr, out, c_in);
      return;
    }
    *lora_t = lora->down(ctx, x);
    lora->up(ctx, *lora_t, out, c_in);
    project(ctx, fp8_slot, x, w, nullptr, out, &out);
  };
  if (!ctx.tp) {
    run(y, &residual);
    return;
  }
  if (!ctx.tp->sequence_parallel()) {
    run(y, ctx.tp->rank() == 0 ? &residual : nullptr);
    ctx.tp->sum_rows(y, s, label);
    return;
  }
  if (async_tp(ctx, fp8_slot, lora)) {  // the reduce-scatter of each slice under the next slice's GEMM
    Tensor mine = ctx.tp->sum_rows_overlapped(ctx.tokens(), w.size(0), ctx.act_dtype, s, label,
                                              [&](int64_t r0, int64_t r1, const Tensor& out) {
                                                Tensor o = out;
                                                project(ctx, -1, x.slice(r0, r1), w, nullptr, o);
                                              });
    ops::add(mine, residual, y, s);
    return;
  }
  Tensor partial = ctx.act({ctx.tokens(), w.size(0)});
  run(partial, nullptr);
  Tensor mine = ctx.tp->sum_rows(partial, s, label);
  ops::add(mine, residual, y, s);
}

}  // namespace primus
