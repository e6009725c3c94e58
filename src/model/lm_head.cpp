#include "model/lm_head.h"

#include <algorithm>

#include "model/tp_boundary.h"
#include "model/weight_grad.h"
#include "ops/gemm.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/softcap.h"

namespace primus {

namespace {
// 1 GiB of logits per chunk keeps the head GEMMs large (K = rows for the weight gradient) while bounding
// memory.
constexpr size_t kLogitsBudget = size_t(1) << 30;
}  // namespace

LmHead::LmHead(const ModelSpec& spec, ParamStore& params) : spec_(spec), params_(params) {
  norm_ = params.find("norm.weight");
  weight_ = params.find(spec.tied_embeddings ? "embed_tokens.weight" : "lm_head.weight");
  PRIMUS_CHECK(norm_ >= 0 && weight_ >= 0, "lm head parameters missing");
}

int64_t LmHead::chunk_rows(int64_t rows, int64_t vocab, size_t elem_bytes, size_t budget_bytes) {
  int64_t r = static_cast<int64_t>(budget_bytes / (static_cast<size_t>(vocab) * elem_bytes));
  r = std::max<int64_t>(r / 64 * 64, 64);  // multiples of 64 rows keep the GEMMs aligned
  if (r >= rows) return rows;
  // Equal chunks: 8192 rows under a 4160-row budget run as 2 x 4096, not 4032 + 4032 + 128 -- a sliver chunk
  // still reads and writes the whole f32 weight gradient (2 GB at V 128256, d 4096) for little work. The
  // rounding to 64 rows may pass the budget by less than 64 rows.
  const int64_t chunks = (rows + r - 1) / r;
  const int64_t even = (rows + chunks - 1) / chunks;
  return std::min(rows, (even + 63) / 64 * 64);
}

void LmHead::run(const StepContext& ctx, const Tensor& x, const Tensor& targets, float grad_scale,
                 Tensor& losses, Tensor* dx) {
  // x holds this rank's tokens (all but under sequence parallelism); the projection sees every token.
  const int64_t nl = x.size(0), d = spec_.hidden;
  Tensor h = ctx.act({nl, d});
  Tensor rstd = ctx.empty({nl}, ctx.stat_dtype());
  norm_forward(ctx, x, norm_, h, rstd);
  h = tp_gather_rows(ctx, h, "sp gather head input");
  Tensor dh = dx ? ctx.act({h.size(0), d}) : Tensor();
  project(ctx, h, targets, grad_scale, losses, dx ? &dh : nullptr);
  if (!dx) return;
  dh = tp_sum_rows(ctx, dh, "tp head input gradient");  // each rank's vocabulary columns contributed a part
  *dx = ctx.act({nl, d});
  norm_backward(ctx, dh, x, norm_, rstd, *dx);
}

void LmHead::norm_forward(const StepContext& ctx, const Tensor& x, int norm_entry, Tensor& h,
                          Tensor& rstd) const {
  ops::rmsnorm_forward(x, params_.param(norm_entry), spec_.norm_eps, h, rstd, ctx.stream);
}

void LmHead::norm_backward(const StepContext& ctx, const Tensor& dh, const Tensor& x, int norm_entry,
                           const Tensor& rstd, Tensor& dx) const {
  Tensor dnorm = norm_grad(ctx, params_, norm_entry);
  ops::rmsnorm_backward(dh, x, params_.param(norm_entry), rstd, dx, dnorm, /*accumulate_dx=*/false,
                        ctx.stream);
}

void LmHead::project(const StepContext& ctx, const Tensor& h, const Tensor& targets, float grad_scale,
                     Tensor& losses, Tensor* dh) {
  const int64_t n = h.size(0), v = spec_.vocab;
  const Stream& s = ctx.stream;
  Tensor w = params_.param(weight_);
  Tensor dw = params_.grad(weight_);
  // Soft-capped logits (final_logit_softcapping) go to the loss from a second chunk buffer, the loss writes
  // its gradient over the raw logits, and the cap's backward reads the capped ones: the budget covers both.
  const float cap = spec_.logit_softcap;
  const int64_t rows = chunk_rows(n, v, dtype_size(ctx.act_dtype) * (cap > 0 ? 2 : 1), kLogitsBudget);
  Tensor logits_buf = ctx.act({std::min(rows, n), v});
  Tensor capped_buf = cap > 0 ? ctx.act({std::min(rows, n), v}) : Tensor();
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r1 = std::min(n, r0 + rows);
    Tensor hc = h.slice(r0, r1);
    Tensor logits = logits_buf.slice(0, r1 - r0);
    primus::project(ctx, fp8_slot_, hc, w, nullptr, logits);
    Tensor capped = cap > 0 ? capped_buf.slice(0, r1 - r0) : logits;
    if (cap > 0) ops::softcap_forward(logits, cap, capped, s);
    Tensor lc = losses.slice(r0, r1);
    Tensor tc = targets.slice(r0, r1);
    if (ctx.tp) {
      // Vocabulary-parallel: every rank's (max, sum of exp, target logit) per row, merged alike everywhere.
      const int64_t rows_c = r1 - r0, P = ctx.tp->size();
      Tensor stats = ctx.empty({rows_c, 3}, ctx.stat_dtype());
      ops::vocab_parallel_ce_stats(capped, tc, spec_.vocab_begin(), spec_.whole_vocab(), stats, s);
      Tensor all = ctx.empty({P, rows_c, 3}, ctx.stat_dtype());
      ctx.tp->group().all_gather(stats.flatten(), all.flatten(), s, "vocab-parallel loss statistics");
      ops::vocab_parallel_ce_finish(capped, tc, spec_.vocab_begin(), all, grad_scale, lc,
                                    dh ? &logits : nullptr, s);
      if (!dh) continue;
    } else if (!dh) {
      ops::softmax_cross_entropy(capped, tc, grad_scale, lc, nullptr, s);
      continue;
    } else {
      ops::softmax_cross_entropy(capped, tc, grad_scale, lc, &logits, s);  // in place without a cap
    }
    if (cap > 0) ops::softcap_backward(capped, logits, cap, logits, s);
    Tensor dhc = dh->slice(r0, r1);
    // The weight gradient runs now even in a zero-bubble schedule's input-gradient pass: its operand, the
    // logits gradient, lives in logits_buf, which the next chunk overwrites (deferring it would need a copy
    // of every chunk, 1 GiB each).
    StepContext now = ctx;
    now.deferred_wgrad = nullptr;
    project_backward(now, fp8_slot_, logits, hc, w, dhc, false, dw, Tensor(),
                     params_.grad_accumulate(weight_));
  }
}

}  // namespace primus
