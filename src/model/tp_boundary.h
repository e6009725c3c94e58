#pragma once
// The model side of tensor parallelism (parallel/tensor_parallel.h): the collectives at a parallel region's
// boundary, written so that a layer reads the same on one rank (where they are identities) as on many.
#include <utility>

#include "model/fp8_linear.h"
#include "model/lora_adapter.h"
#include "model/step_context.h"
#include "model/weight_grad.h"
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

// y = x W^T (+ bias) (+ c_in) through project(); with a LoRA adapter (lora->on()) its product t B^T is
// written first (with c_in where given) and the frozen GEMM accumulates on top through its C input
// (model/lora_adapter.h); *lora_t receives t for the backward.
inline void adapted_project(const StepContext& ctx, int fp8_slot, const LoraAdapter* lora, Tensor* lora_t,
                            const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                            const Tensor* c_in = nullptr) {
  if (!lora || !lora->on()) {
    project(ctx, fp8_slot, x, w, bias, y, c_in);
    return;
  }
  *lora_t = lora->down(ctx, x);
  lora->up(ctx, *lora_t, y, c_in);
  project(ctx, fp8_slot, x, w, bias, y, &y);
}

// The backward of adapted_project: dx = dy W (dx += when accumulate_dx), the adapter's share first and the
// frozen dgrad accumulating on it, and W's gradient through project_backward (none for a frozen weight).
inline void adapted_project_backward(const StepContext& ctx, int fp8_slot, const LoraAdapter& lora,
                                     const Tensor& lora_t, const Tensor& dy, const Tensor& x, const Tensor& w,
                                     Tensor& dx, bool accumulate_dx, Tensor g, Tensor g_bias,
                                     bool accumulate_w, const Tensor& residual_grad = Tensor()) {
  if (lora.on()) lora.backward(ctx, {{dy, {}}}, x, lora_t, dx, accumulate_dx);
  project_backward(ctx, fp8_slot, dy, x, w, dx, accumulate_dx || lora.on(), std::move(g), std::move(g_bias),
                   accumulate_w, residual_grad);
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
  // out = x W^T (+ c_in), with the adapter's t B^T written into out first.
  auto run = [&](Tensor& out, const Tensor* c_in) {
    adapted_project(ctx, fp8_slot, lora, lora_t, x, w, nullptr, out, c_in);
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

// The backward of a projection y = x W^T in a layer's two tensor-parallel places. Both compute the input
// gradient dx = dy W (the adapter's share first, the frozen GEMM accumulating, when `lora` is on) and W's
// gradient (g, g_bias; at once or deferred: weight_grad), and both run async TP's overlapped moves when
// async_tp() allows. residual_grad: see weight_grad().
//
// Row-parallel (o, down): dy_local is this rank's rows of dL/dy; they are gathered over tp first (the own
// rows' input gradient under the gather with async TP). dx [tokens, in/tp] is overwritten.
inline void row_parallel_backward(const StepContext& ctx, int fp8_slot, const LoraAdapter& lora,
                                  const Tensor& lora_t, const Tensor& dy_local, const Tensor& x,
                                  const Tensor& w, Tensor& dx, Tensor g, bool accumulate_w,
                                  const Tensor& residual_grad, const char* label) {
  const Stream& s = ctx.stream;
  if (async_tp(ctx, fp8_slot, &lora)) {
    const Tensor dy =
        ctx.tp->gather_rows_overlapped(dy_local, s, label, [&](int64_t r0, int64_t r1, const Tensor& rows) {
          Tensor o = dx.slice(r0, r1);
          ops::linear_backward_input(rows, w, o, /*accumulate=*/false, s);
        });
    weight_grad(ctx, dy, x, std::move(g), Tensor(), accumulate_w, residual_grad);
    return;
  }
  const Tensor dy = tp_gather_rows(ctx, dy_local, label);
  adapted_project_backward(ctx, fp8_slot, lora, lora_t, dy, x, w, dx, /*accumulate_dx=*/false, std::move(g),
                           Tensor(), accumulate_w, residual_grad);
}

// Column-parallel (qkv, gate|up): dy [tokens, out/tp] over every token; returns dL/dx summed over tp, this
// rank's rows (the reduce-scatter in slices under the next slice's GEMM and the last under the weight
// gradient with async TP).
inline Tensor column_parallel_backward(const StepContext& ctx, int fp8_slot, const LoraAdapter& lora,
                                       const Tensor& lora_t, const Tensor& dy, const Tensor& x,
                                       const Tensor& w, Tensor g, Tensor g_bias, bool accumulate_w,
                                       const Tensor& residual_grad, const char* label) {
  const Stream& s = ctx.stream;
  if (async_tp(ctx, fp8_slot, &lora)) {
    return ctx.tp->sum_rows_overlapped(
        dy.size(0), x.size(1), ctx.act_dtype, s, label,
        [&](int64_t r0, int64_t r1, const Tensor& out) {
          Tensor o = out;
          ops::linear_backward_input(dy.slice(r0, r1), w, o, /*accumulate=*/false, s);
        },
        [&] { weight_grad(ctx, dy, x, std::move(g), std::move(g_bias), accumulate_w, residual_grad); });
  }
  Tensor dx = ctx.act({dy.size(0), x.size(1)});
  adapted_project_backward(ctx, fp8_slot, lora, lora_t, dy, x, w, dx, /*accumulate_dx=*/false, std::move(g),
                           std::move(g_bias), accumulate_w, residual_grad);
  return tp_sum_rows(ctx, dx, label);
}

}  // namespace primus
