#include "model/decoder_layer.h"

#include <cmath>
#include <string_view>
#include <utility>

#include "model/param_hooks.h"
#include "model/tp_boundary.h"
#include "model/weight_grad.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "parallel/context_parallel.h"

namespace primus {

DecoderLayer::DecoderLayer(const ModelSpec& spec, ParamStore& params, int layer_index)
    : DecoderLayer(spec, params, "layers." + std::to_string(layer_index) + ".",
                   spec.is_moe_layer(layer_index), layer_index) {}

DecoderLayer::DecoderLayer(const ModelSpec& spec, ParamStore& params, const std::string& p, bool moe_layer,
                           int stats_layer)
    : spec_(spec), params_(params), prefix_(p) {
  auto need = [&](const std::string& n) {
    int i = params.find(p + n);
    PRIMUS_CHECK(i >= 0, "parameter {}{} missing", p, n);
    return i;
  };
  if (spec.mla.enabled) {
    mla_ = std::make_unique<MlaAttention>(spec, params, p);
  } else {
    w_qkv_ = need("self_attn.qkv_proj.weight");
    w_o_ = need("self_attn.o_proj.weight");
  }
  if (moe_layer) {
    moe_ = std::make_unique<MoeMlp>(spec, params, p + "mlp.", stats_layer);
  } else {
    w_gu_ = need("mlp.gate_up_proj.weight");
    w_down_ = need("mlp.down_proj.weight");
  }
  norm1_ = need("input_layernorm.weight");
  norm2_ = need("post_attention_layernorm.weight");
  if (spec.qkv_bias && !mla_) b_qkv_ = need("self_attn.qkv_proj.bias");
  if (spec.qk_norm && !mla_) {
    q_norm_ = need("self_attn.q_norm.weight");
    k_norm_ = need("self_attn.k_norm.weight");
  }
}

void DecoderLayer::enable_fp8(Fp8State& state, int64_t layer) {
  const std::pair<const char*, int*> slots[] = {{"self_attn.qkv_proj", &fp8_qkv_},
                                                {"self_attn.o_proj", &fp8_o_},
                                                {"mlp.gate_up_proj", &fp8_gu_},
                                                {"mlp.down_proj", &fp8_down_}};
  for (const Fp8Projection& p : fp8_projections(spec_, layer)) {
    const std::string full = prefix_ + p.name;
    if (!state.recipe().covers(layer, spec_.layers, full)) continue;
    for (const auto& [name, slot] : slots)
      if (std::string_view(name) == p.name) *slot = state.add(full);
    if (int* moe_slot = moe_ ? moe_->fp8_slot(p.name) : nullptr) *moe_slot = state.add(full);
  }
}

std::vector<int> DecoderLayer::gemm_weight_entries() const {
  std::vector<int> out = mla_ ? mla_->gemm_weight_entries() : std::vector<int>{w_qkv_, w_o_};
  if (moe_) {
    for (int e : moe_->gemm_weight_entries()) out.push_back(e);
  } else {
    out.insert(out.end(), {w_gu_, w_down_});
  }
  return out;
}

void DecoderLayer::set_adapters(ParamStore& store) {
  adapted_ = true;
  if (mla_) {
    mla_->set_adapters(store);
  } else {
    lora_qkv_ = LoraAdapter(store, prefix_ + "self_attn.qkv_proj");
    lora_o_ = LoraAdapter(store, prefix_ + "self_attn.o_proj");
  }
  if (moe_) return;  // the MoE MLP stays frozen, without adapters
  lora_gu_ = LoraAdapter(store, prefix_ + "mlp.gate_up_proj");
  lora_down_ = LoraAdapter(store, prefix_ + "mlp.down_proj");
}

std::vector<int> DecoderLayer::mlp_grad_entries() const {
  if (adapted_) {
    std::vector<int> out = lora_gu_.entries();
    for (int e : lora_down_.entries()) out.push_back(e);
    return out;
  }
  return moe_ ? moe_->gemm_weight_entries() : std::vector<int>{w_gu_, w_down_};
}

static ops::AttentionShape attention_shape(const ModelSpec& spec, const StepContext& ctx) {
  ops::AttentionShape s;
  s.batch = ctx.batch;
  s.seq = ctx.seq;
  s.heads = spec.heads;
  s.kv_heads = spec.kv_heads;
  s.head_dim = spec.head_dim;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_dim)));
  s.causal = true;
  s.seg_starts = ctx.seg_starts;
  return s;
}

// Context parallelism: one of the two chunks of a rank's chunk-major batch (parallel/context_parallel.h).
static ops::AttentionShape chunk_shape(const ModelSpec& spec, const StepContext& ctx) {
  ops::AttentionShape s = attention_shape(spec, ctx);
  s.batch = ctx.batch / 2;
  return s;
}

void DecoderLayer::rope(const StepContext& ctx, const Tensor& qkv, bool inverse) const {
  const int64_t total_heads = spec_.heads + 2 * spec_.kv_heads, rotated = spec_.heads + spec_.kv_heads;
  const int64_t W = spec_.qkv_dim();
  if (!ctx.cp) {
    Tensor x = qkv.view({ctx.batch, ctx.seq, W});
    ops::rope_apply(x, ctx.batch, ctx.seq, total_heads, rotated, spec_.head_dim, *ctx.rope_table,
                    ctx.pos_offset, ctx.positions, inverse, ctx.stream);
    return;
  }
  // Each chunk at its place in the whole sequence.
  const int64_t B = ctx.batch / 2, C = ctx.seq;
  for (int h = 0; h < 2; ++h) {
    Tensor x = qkv.slice(h * B * C, (h + 1) * B * C).view({B, C, W});
    ops::rope_apply(x, B, C, total_heads, rotated, spec_.head_dim, *ctx.rope_table, ctx.cp->chunk(h) * C,
                    inverse, ctx.stream);
  }
}

Tensor DecoderLayer::norm_gathered(const StepContext& ctx, const Tensor& x, int norm, Tensor& rstd,
                                   const char* label, const parallel::TensorParallel::RowsFn* consume) const {
  Tensor h = ctx.act({local_tokens(ctx), spec_.hidden});
  ops::rmsnorm_forward(x, params_.param(norm), spec_.norm_eps, h, rstd, ctx.stream);
  if (consume) return ctx.tp->gather_rows_overlapped(h, ctx.stream, label, *consume);
  return tp_gather_rows(ctx, h, label);
}

Tensor DecoderLayer::forward_full(const StepContext& ctx, const Tensor& x_in, LayerActivations& a,
                                  bool record_stats) {
  // x_in, x_mid, x_out and the norm statistics hold this rank's tokens (all but under sequence parallelism);
  // h1, h2 and everything between hold every token (tensor parallelism: this rank's heads and ffn columns).
  const int64_t n = ctx.tokens(), nl = local_tokens(ctx), d = spec_.hidden;
  const Stream& s = ctx.stream;
  a.x_in = x_in;

  a.rstd1 = ctx.empty({nl}, ctx.stat_dtype());
  // Async TP: the QKV projection runs on row ranges under the all-gather of the norm's output.
  const bool qkv_overlap = !mla_ && async_tp(ctx, fp8_qkv_, &lora_qkv_);
  Tensor qkv = mla_ ? Tensor() : ctx.act({n, spec_.qkv_dim()});
  const Tensor bias = b_qkv_ >= 0 ? params_.param(b_qkv_) : Tensor();
  const parallel::TensorParallel::RowsFn qkv_rows = [&](int64_t r0, int64_t r1, const Tensor& rows) {
    Tensor y = qkv.slice(r0, r1);
    project(ctx, -1, rows, params_.param(w_qkv_), b_qkv_ >= 0 ? &bias : nullptr, y);
  };
  a.h1 = norm_gathered(ctx, x_in, norm1_, a.rstd1, "sp gather attention input",
                       qkv_overlap ? &qkv_rows : nullptr);

  a.x_mid = ctx.act({nl, d});
  if (mla_) {
    mla_->forward(ctx, a.h1, x_in, a.x_mid, a.mla);
  } else {
    if (!qkv_overlap)  // (async TP never runs with an adapter: async_tp)
      adapted_project(ctx, fp8_qkv_, &lora_qkv_, &a.t_qkv, a.h1, params_.param(w_qkv_),
                      b_qkv_ >= 0 ? &bias : nullptr, qkv);
    if (spec_.qk_norm) {
      // qk-norm reads the raw projections, which backward needs again: normalise into a second buffer.
      a.qkv_raw = qkv;
      qkv = ctx.act({n, spec_.qkv_dim()});
      qkv.copy_from(a.qkv_raw, s);  // v columns pass through unchanged
      a.q_rstd = ctx.empty({n, spec_.heads}, ctx.stat_dtype());
      a.k_rstd = ctx.empty({n, spec_.kv_heads}, ctx.stat_dtype());
      ops::head_rmsnorm_forward(a.qkv_raw, 0, spec_.heads, spec_.head_dim, params_.param(q_norm_),
                                spec_.norm_eps, qkv, a.q_rstd, s);
      ops::head_rmsnorm_forward(a.qkv_raw, spec_.heads, spec_.kv_heads, spec_.head_dim,
                                params_.param(k_norm_), spec_.norm_eps, qkv, a.k_rstd, s);
    }
    rope(ctx, qkv, /*inverse=*/false);
    a.qkv = qkv;

    a.attn = ctx.act({n, spec_.q_dim()});
    a.lse = ctx.empty({ctx.batch, spec_.heads, ctx.seq}, ctx.stat_dtype());
    if (ctx.cp) {  // the sequence split over ranks: its chunks attend to every rank's keys
      ctx.cp->attention_forward(qkv, chunk_shape(spec_, ctx), a.attn, a.lse, s);
    } else {
      Tensor attn3 = a.attn.view({ctx.batch, ctx.seq, spec_.q_dim()});
      ops::attention_forward(qkv.view({ctx.batch, ctx.seq, spec_.qkv_dim()}), attention_shape(spec_, ctx),
                             attn3, a.lse, s);
    }
    row_parallel_residual(ctx, a.attn, params_.param(w_o_), x_in, a.x_mid, "tp attention output", fp8_o_,
                          &lora_o_, &a.t_o);
  }

  a.rstd2 = ctx.empty({nl}, ctx.stat_dtype());
  // Async TP: the gate|up projection under the all-gather, as the QKV one.
  const bool gu_overlap = !moe_ && async_tp(ctx, fp8_gu_, &lora_gu_);
  if (!moe_) a.gu = ctx.act({n, 2 * spec_.ffn});
  const parallel::TensorParallel::RowsFn gu_rows = [&](int64_t r0, int64_t r1, const Tensor& rows) {
    Tensor y = a.gu.slice(r0, r1);
    project(ctx, -1, rows, params_.param(w_gu_), nullptr, y);
  };
  a.h2 = norm_gathered(ctx, a.x_mid, norm2_, a.rstd2, "sp gather mlp input", gu_overlap ? &gu_rows : nullptr);

  Tensor x_out = ctx.act({nl, d});
  if (moe_) {
    // Tensor parallelism: every rank routes every token of h2 (gathered under SP) through its columns of each
    // expert; the partial outputs are summed (reduce-scattered under SP) like the dense MLP's.
    if (ctx.tp) {
      Tensor part = ctx.act({n, d});
      moe_->forward(ctx, a.h2, part, a.moe, record_stats);
      x_out = tp_sum_rows(ctx, part, "tp moe output");
    } else {
      moe_->forward(ctx, a.h2, x_out, a.moe, record_stats);
    }
    ops::add(x_out, a.x_mid, x_out, s);
  } else {
    if (!gu_overlap)
      adapted_project(ctx, fp8_gu_, &lora_gu_, &a.t_gu, a.h2, params_.param(w_gu_), nullptr, a.gu);
    a.act = ctx.act({n, spec_.ffn});
    ops::swiglu_forward(a.gu, a.act, s);
    row_parallel_residual(ctx, a.act, params_.param(w_down_), a.x_mid, x_out, "tp mlp output", fp8_down_,
                          &lora_down_, &a.t_down);
  }
  a.mode = RecomputeMode::kNone;
  return x_out;
}

Tensor DecoderLayer::forward(const StepContext& ctx, const Tensor& x_in, LayerActivations* slot,
                             RecomputeMode mode, bool record_stats) {
  LayerActivations local;
  LayerActivations& a = slot ? *slot : local;
  Tensor x_out = forward_full(ctx, x_in, a, record_stats && slot != nullptr);
  if (!slot) return x_out;
  if (mode == RecomputeMode::kFull) {
    Tensor keep = a.x_in;
    a.clear();
    a.x_in = keep;
  } else if (mode == RecomputeMode::kSelective) {
    a.h1 = Tensor();
    a.h2 = Tensor();
    a.act = Tensor();
    a.mla.drop_selective();
    if (moe_) {
      a.moe.act_perm = Tensor();
      a.moe.sh_act = Tensor();
      a.moe.selective_dropped = true;
    }
  }
  a.mode = mode;
  return x_out;
}

void DecoderLayer::recompute_dropped(const StepContext& ctx, LayerActivations& a) {
  const Stream& s = ctx.stream;
  if (a.mode == RecomputeMode::kFull) {
    Tensor x_in = a.x_in;
    forward_full(ctx, x_in, a, /*record_stats=*/false);  // x_out is discarded: the next layer consumed it
    return;
  }
  if (a.mode == RecomputeMode::kSelective) {
    const int64_t n = ctx.tokens();
    a.h1 = norm_gathered(ctx, a.x_in, norm1_, a.rstd1, "sp gather attention input");
    a.h2 = norm_gathered(ctx, a.x_mid, norm2_, a.rstd2, "sp gather mlp input");
    if (moe_) {
      moe_->recompute_selective(ctx, a.moe);
    } else {
      a.act = ctx.act({n, spec_.ffn});
      ops::swiglu_forward(a.gu, a.act, s);
    }
    a.mode = RecomputeMode::kNone;
  }
}

Tensor DecoderLayer::attention_backward(const StepContext& ctx, const Tensor& dx, LayerActivations& a) {
  const int64_t n = ctx.tokens();
  const Stream& s = ctx.stream;
  Tensor d_attn = ctx.act({n, spec_.q_dim()});
  row_parallel_backward(ctx, fp8_o_, lora_o_, a.t_o, dx, a.attn, params_.param(w_o_), d_attn,
                        params_.grad(w_o_), params_.grad_accumulate(w_o_), dx,
                        "sp gather attention output gradient");
  Tensor d_qkv = ctx.act({n, spec_.qkv_dim()});
  if (ctx.cp) {
    ctx.cp->attention_backward(d_attn, a.qkv, a.attn, a.lse, chunk_shape(spec_, ctx), d_qkv, s);
  } else {
    Tensor d_qkv3 = d_qkv.view({ctx.batch, ctx.seq, spec_.qkv_dim()});
    ops::attention_backward(
        d_attn.view({ctx.batch, ctx.seq, spec_.q_dim()}), a.qkv.view({ctx.batch, ctx.seq, spec_.qkv_dim()}),
        a.attn.view({ctx.batch, ctx.seq, spec_.q_dim()}), a.lse, attention_shape(spec_, ctx), d_qkv3, s);
  }
  d_attn = Tensor();
  a.attn = Tensor();
  a.qkv = Tensor();
  rope(ctx, d_qkv, /*inverse=*/true);
  if (spec_.qk_norm) {
    Tensor d_raw = ctx.act({n, spec_.qkv_dim()});
    d_raw.copy_from(d_qkv, s);  // v columns: the norm does not touch them
    Tensor gq = norm_grad(ctx, params_, q_norm_), gk = norm_grad(ctx, params_, k_norm_);
    ops::head_rmsnorm_backward(d_qkv, a.qkv_raw, params_.param(q_norm_), a.q_rstd, 0, spec_.heads,
                               spec_.head_dim, d_raw, gq, s);
    ops::head_rmsnorm_backward(d_qkv, a.qkv_raw, params_.param(k_norm_), a.k_rstd, spec_.heads,
                               spec_.kv_heads, spec_.head_dim, d_raw, gk, s);
    d_qkv = d_raw;
  }
  // The bias gradient follows the weight's mode: both are overwritten by the step's first write, or both add.
  return column_parallel_backward(ctx, fp8_qkv_, lora_qkv_, a.t_qkv, d_qkv, a.h1, params_.param(w_qkv_),
                                  params_.grad(w_qkv_), b_qkv_ >= 0 ? params_.grad(b_qkv_) : Tensor(),
                                  params_.grad_accumulate(w_qkv_), dx, "tp attention input gradient");
}

Tensor DecoderLayer::mlp_backward(const StepContext& ctx, const Tensor& dx, LayerActivations& a) {
  const int64_t n = ctx.tokens();
  // x_out = x_mid + swiglu(h2 Wgu^T) Wdown^T. dx holds this rank's tokens; the MLP's gradients need every
  // token's (tensor parallelism: the row-parallel output's backward).
  Tensor d_act = ctx.act({n, spec_.ffn});
  row_parallel_backward(ctx, fp8_down_, lora_down_, a.t_down, dx, a.act, params_.param(w_down_), d_act,
                        params_.grad(w_down_), params_.grad_accumulate(w_down_), dx,
                        "sp gather mlp output gradient");
  a.act = Tensor();
  Tensor d_gu = ctx.act({n, 2 * spec_.ffn});
  ops::swiglu_backward(d_act, a.gu, d_gu, ctx.stream);
  d_act = Tensor();
  a.gu = Tensor();
  return column_parallel_backward(ctx, fp8_gu_, lora_gu_, a.t_gu, d_gu, a.h2, params_.param(w_gu_),
                                  params_.grad(w_gu_), Tensor(), params_.grad_accumulate(w_gu_), dx,
                                  "tp mlp input gradient");
}

Tensor DecoderLayer::backward(const StepContext& ctx, Tensor dx, LayerActivations& a) {
  recompute_dropped(ctx, a);
  const int64_t n = ctx.tokens(), d = spec_.hidden;
  const Stream& s = ctx.stream;

  // MLP: x_out = x_mid + swiglu(h2 Wgu^T) Wdown^T, or x_mid + moe(h2).
  Tensor d_h2;
  if (moe_) {
    d_h2 = ctx.act({n, d});
    moe_->backward(ctx, tp_gather_rows(ctx, dx, "sp gather moe output gradient"), a.h2, a.moe, d_h2);
    d_h2 = tp_sum_rows(ctx, d_h2, "tp moe input gradient");
  } else {
    d_h2 = mlp_backward(ctx, dx, a);
  }
  a.h2 = Tensor();
  if (ctx.hooks && !ctx.deferred_wgrad) {  // the MLP's matrices are complete: their norm can run beside the
                                           // attention's backward
    const std::vector<int> done = mlp_grad_entries();
    if (!done.empty()) ctx.hooks->grads_final(done);
  }
  // dx becomes dL/dx_mid: the residual gradient plus the norm's contribution, accumulated in place.
  Tensor g_norm2 = norm_grad(ctx, params_, norm2_);
  ops::rmsnorm_backward(d_h2, a.x_mid, params_.param(norm2_), a.rstd2, dx, g_norm2, /*accumulate_dx=*/true,
                        s);
  d_h2 = Tensor();

  // Attention: x_mid = x_in + attn(qkv(h1)) Wo^T
  Tensor d_h1;
  if (mla_) {
    d_h1 = ctx.act({n, d});
    mla_->backward(ctx, tp_gather_rows(ctx, dx, "sp gather attention output gradient"), a.h1, a.mla, d_h1);
    d_h1 = tp_sum_rows(ctx, d_h1, "tp attention input gradient");
  } else {
    d_h1 = attention_backward(ctx, dx, a);
  }
  Tensor g_norm1 = norm_grad(ctx, params_, norm1_);
  ops::rmsnorm_backward(d_h1, a.x_in, params_.param(norm1_), a.rstd1, dx, g_norm1, /*accumulate_dx=*/true, s);
  a.clear();
  return dx;
}

}  // namespace primus
