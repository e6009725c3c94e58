#pragma once
// A projection's weight gradient dW (+ db) = dy^T x, run at once or, in a zero-bubble pipeline schedule's
// input-gradient pass (StepContext::deferred_wgrad), queued for its weight-gradient pass. The queued GEMM
// keeps its operands alive; dy is copied when it is `residual_grad`, the residual stream's gradient that the
// rest of the backward keeps accumulating into. `g` / `g_bias` are views of the gradient buffer, stable while
// queued: under FSDP the region's whole gradient buffer stays allocated until the BW pass has run the
// region's queue (LlamaModel::chunk_backward calls ParamHooks::backward_deferred at the region's end and
// queues its after_backward behind the GEMMs; DataParallel reduce-scatters and frees the buffer there).
// `accumulate` is the write mode decided now, in the order the backward reaches the projection. An
// undefined `g` is a frozen weight: no gradient (its bias's either).
#include <utility>

#include "model/param_store.h"
#include "model/step_context.h"
#include "ops/gemm.h"

namespace primus {

inline void weight_grad(const StepContext& ctx, const Tensor& dy, const Tensor& x, Tensor g, Tensor g_bias,
                        bool accumulate, const Tensor& residual_grad = Tensor()) {
  if (!g.defined()) return;  // a frozen weight (LoRA's base model, ParamStore::allocate_frozen)
  auto run = [s = ctx.stream, accumulate](const Tensor& g_out, const Tensor& in, Tensor& gw, Tensor& gb) {
    ops::linear_backward_weight(g_out, in, gw, gb.defined() ? &gb : nullptr, s, accumulate);
  };
  if (!ctx.deferred_wgrad) {
    run(dy, x, g, g_bias);
    return;
  }
  Tensor g_out = dy;
  if (residual_grad.defined() && dy.data_ptr() == residual_grad.data_ptr()) {
    g_out = ctx.act(dy.shape());
    g_out.copy_from(dy, ctx.stream);
  }
  ctx.deferred_wgrad->push_back(
      [run, g_out, x, g = std::move(g), gb = std::move(g_bias)]() mutable { run(g_out, x, g, gb); });
}

// A norm weight's gradient buffer, or scratch for a frozen one (LoRA's base model): the norm kernels compute
// it in the same pass as dx, and the scratch is dropped.
inline Tensor norm_grad(const StepContext& ctx, const ParamStore& p, int entry) {
  Tensor g = p.grad(entry);
  return g.defined() ? g : ctx.empty(p.entry(entry).shape, p.master_dtype());
}

}  // namespace primus
