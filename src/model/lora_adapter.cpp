#include "model/lora_adapter.h"

#include "core/philox.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "parallel/context_parallel.h"

namespace primus {

LoraAdapter::LoraAdapter(ParamStore& store, const std::string& projection) : store_(&store) {
  a_ = store.find(projection + ".lora_A.weight");
  b_ = store.find(projection + ".lora_B.weight");
  PRIMUS_CHECK((a_ >= 0) == (b_ >= 0), "LoRA adapter of {}: lora_A and lora_B must both exist", projection);
  scale_ = static_cast<float>(store.spec().adapters.scale());
  dropout_ = static_cast<float>(store.spec().adapters.dropout);
  name_key_ = name_hash64(projection);
  if (a_ >= 0) {
    col_begin_ = store.entry(a_).slice.col_begin;
    whole_cols_ = store.entry(a_).slice.whole_cols;
  }
}

uint64_t LoraAdapter::mask_key(const StepContext& ctx) const {
  return mix64(mix64(ctx.origin.seed ^ name_key_) + static_cast<uint64_t>(ctx.origin.first_sample));
}

namespace {
// Where x's rows sit in the whole batch: context parallelism's chunks, so that a rank drops what one process
// drops at the same tokens.
ops::DropoutRows mask_rows(const StepContext& ctx) {
  ops::DropoutRows rows;
  if (!ctx.cp) return rows;
  // This rank's [2B, C] chunk-major tokens (parallel/context_parallel.h) in the whole [B, T] batch.
  rows.chunk = ctx.seq;
  rows.batch = ctx.batch / 2;
  rows.seq = 2 * ctx.cp->size() * ctx.seq;
  rows.chunks[0] = ctx.cp->chunk(0);
  rows.chunks[1] = ctx.cp->chunk(1);
  return rows;
}
}  // namespace

Tensor LoraAdapter::dropped(const StepContext& ctx, const Tensor& x) const {
  if (dropout_ <= 0.0f || !ctx.training) return x;
  Tensor out = ctx.act(x.shape());
  ops::dropout_apply(x, dropout_, mask_key(ctx), col_begin_, whole_cols_, out, ctx.stream, mask_rows(ctx));
  return out;
}

Tensor LoraAdapter::down(const StepContext& ctx, const Tensor& x) const {
  const Tensor a = store_->param(a_);
  Tensor t = ctx.act({x.size(0), a.size(0)});
  ops::gemm(dropped(ctx, x), false, a, true, t, scale_, 0.0f, ctx.stream);
  return t;
}

namespace {
Tensor b_rows(const Tensor& b, LoraAdapter::Rows rows) {
  return rows.end < 0 ? b : b.slice(rows.begin, rows.end);
}
}  // namespace

void LoraAdapter::up(const StepContext& ctx, const Tensor& t, Tensor& y, const Tensor* c_in,
                     Rows rows) const {
  ops::gemm(t, false, b_rows(store_->param(b_), rows), true, y, 1.0f, c_in ? 1.0f : 0.0f, ctx.stream, c_in);
}

void LoraAdapter::backward(const StepContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& t,
                           Tensor& dx) const {
  backward(ctx, std::vector<OutputGrad>{{dy, Rows{}}}, x, t, dx);
}

void LoraAdapter::backward(const StepContext& ctx, const std::vector<OutputGrad>& dy_parts, const Tensor& x,
                           const Tensor& t, Tensor& dx, bool accumulate_dx) const {
  PRIMUS_CHECK(!dy_parts.empty(), "LoRA adapter backward without an output gradient");
  const Tensor a = store_->param(a_), b = store_->param(b_);
  Tensor ga = store_->grad(a_), gb = store_->grad(b_);
  Tensor u = ctx.act({dy_parts[0].dy.size(0), a.size(0)});
  for (size_t i = 0; i < dy_parts.size(); ++i) {
    const OutputGrad& p = dy_parts[i];
    Tensor gb_p = b_rows(gb, p.rows);
    ops::gemm(p.dy, true, t, false, gb_p, 1.0f, 1.0f, ctx.stream);
    ops::gemm(p.dy, false, b_rows(b, p.rows), false, u, scale_, i == 0 ? 0.0f : 1.0f, ctx.stream);
  }
  const Tensor xd = dropped(ctx, x);
  ops::gemm(u, true, xd, false, ga, 1.0f, 1.0f, ctx.stream);
  const bool masked = xd.data_ptr() != x.data_ptr();
  if (accumulate_dx && masked) {  // the mask must not touch what dx already holds: the share in scratch
    Tensor share = ctx.act(dx.shape());
    ops::gemm(u, false, a, false, share, 1.0f, 0.0f, ctx.stream);
    ops::dropout_apply(share, dropout_, mask_key(ctx), col_begin_, whole_cols_, share, ctx.stream,
                       mask_rows(ctx));
    ops::add(dx, share, dx, ctx.stream);
    return;
  }
  ops::gemm(u, false, a, false, dx, 1.0f, accumulate_dx ? 1.0f : 0.0f, ctx.stream);
  if (masked)  // the same mask on the gradient of x
    ops::dropout_apply(dx, dropout_, mask_key(ctx), col_begin_, whole_cols_, dx, ctx.stream, mask_rows(ctx));
}

}  // namespace primus
