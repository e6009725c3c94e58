#include "model/mla_attention.h"

#include "model/tp_boundary.h"
#include "model/weight_grad.h"
#include "ops/gemm.h"
#include "ops/norm.h"
#include "parallel/context_parallel.h"

namespace primus {

MlaAttention::MlaAttention(const ModelSpec& spec, ParamStore& params, const std::string& prefix)
    : spec_(spec), params_(params), prefix_(prefix) {
  const std::string p = prefix + "self_attn.";
  auto need = [&](const std::string& n) {
    int i = params.find(p + n);
    PRIMUS_CHECK(i >= 0, "parameter {}{} missing", p, n);
    return i;
  };
  if (spec.mla.q_lora_rank > 0) {
    w_qa_ = need("q_a_proj.weight");
    w_qb_ = need("q_b_proj.weight");
    q_norm_ = need("q_a_layernorm.weight");
  } else {
    w_q_ = need("q_proj.weight");
  }
  w_kva_ = need("kv_a_proj_with_mqa.weight");
  kv_norm_ = need("kv_a_layernorm.weight");
  w_kvb_ = need("kv_b_proj.weight");
  w_o_ = need("o_proj.weight");
}

std::vector<int> MlaAttention::gemm_weight_entries() const {
  std::vector<int> out = {w_kva_, w_kvb_, w_o_};
  if (w_q_ >= 0) out.push_back(w_q_);
  if (w_qa_ >= 0) out.insert(out.end(), {w_qa_, w_qb_});
  return out;
}

void MlaAttention::set_adapters(ParamStore& store) {
  const std::string p = prefix_ + "self_attn.";
  lora_q_ = LoraAdapter(store, p + "q_proj");
  lora_qa_ = LoraAdapter(store, p + "q_a_proj");
  lora_qb_ = LoraAdapter(store, p + "q_b_proj");
  lora_kva_ = LoraAdapter(store, p + "kv_a_proj_with_mqa");
  lora_kvb_ = LoraAdapter(store, p + "kv_b_proj");
  lora_o_ = LoraAdapter(store, p + "o_proj");
}

namespace {
// MLA's projections are BF16 (FP8 recipes do not cover them): project()'s FP8 slot -1.
constexpr int kBf16 = -1;
}  // namespace

ops::MlaDims MlaAttention::dims(const StepContext& ctx) const {
  ops::MlaDims d;
  d.batch = ctx.batch;
  d.seq = ctx.seq;
  d.heads = spec_.heads;
  d.nope = spec_.mla.qk_head_dim;
  d.rope = spec_.mla.qk_pos_emb_head_dim;
  d.v_dim = spec_.mla.v_head_dim;
  return d;
}

std::vector<MlaAttention::Half> MlaAttention::halves(const StepContext& ctx) const {
  const ops::MlaDims d = dims(ctx);
  if (!ctx.cp) return {{0, ctx.tokens(), d, ctx.pos_offset}};
  // Context parallelism: this rank's rows are its two chunks of every sequence ([2B, C], chunk-major), each
  // rotated at its place in the whole sequence.
  ops::MlaDims half = d;
  half.batch = ctx.batch / 2;
  const int64_t rows = half.tokens();
  return {{0, rows, half, ctx.cp->chunk(0) * ctx.seq}, {rows, 2 * rows, half, ctx.cp->chunk(1) * ctx.seq}};
}

ops::AttentionShape MlaAttention::attention_shape(const StepContext& ctx) const {
  ops::AttentionShape s;
  s.batch = ctx.batch;
  s.seq = ctx.seq;
  s.heads = spec_.heads;
  s.kv_heads = spec_.heads;
  s.head_dim = spec_.mla.qk_head_dim + spec_.mla.qk_pos_emb_head_dim;
  s.v_head_dim = spec_.mla.v_head_dim;
  s.scale = spec_.attn_scale;
  s.causal = true;
  s.seg_starts = ctx.seg_starts;  // packed rows: a sample attends within itself
  return s;
}

void MlaAttention::forward(const StepContext& ctx, const Tensor& h, const Tensor& residual, Tensor& x_mid,
                           MlaActivations& a) {
  const MlaConfig& m = spec_.mla;
  const ops::MlaDims d = dims(ctx);
  const int64_t n = ctx.tokens();
  const Stream& s = ctx.stream;
  const float eps = spec_.norm_eps;

  Tensor q = ctx.act({n, d.q_width()});
  if (w_q_ >= 0) {
    adapted_project(ctx, kBf16, &lora_q_, &a.t_q, h, params_.param(w_q_), nullptr, q);
  } else {
    a.q_a = ctx.act({n, m.q_lora_rank});
    adapted_project(ctx, kBf16, &lora_qa_, &a.t_qa, h, params_.param(w_qa_), nullptr, a.q_a);
    a.q_an = ctx.act({n, m.q_lora_rank});
    a.q_rstd = ctx.empty({n}, ctx.stat_dtype());
    ops::rmsnorm_forward(a.q_a, params_.param(q_norm_), eps, a.q_an, a.q_rstd, s);
    adapted_project(ctx, kBf16, &lora_qb_, &a.t_qb, a.q_an, params_.param(w_qb_), nullptr, q);
  }
  // kv_a_proj_with_mqa's rows are [c_kv | k_pe]: two GEMMs on its row blocks keep both outputs contiguous
  // (the latent norm and the pack read them as whole rows); an adapter's B is split alike.
  const Tensor w_kva = params_.param(w_kva_);
  const LoraAdapter::Rows c_rows{0, m.kv_lora_rank}, pe_rows{m.kv_lora_rank, m.kv_lora_rank + d.rope};
  a.kv_c = ctx.act({n, m.kv_lora_rank});
  Tensor k_pe = ctx.act({n, d.rope});
  if (lora_kva_.on()) {
    a.t_kva = lora_kva_.down(ctx, h);
    lora_kva_.up(ctx, a.t_kva, a.kv_c, nullptr, c_rows);
    lora_kva_.up(ctx, a.t_kva, k_pe, nullptr, pe_rows);
  }
  const Tensor* acc_kva = lora_kva_.on() ? &a.kv_c : nullptr;
  ops::linear_forward(h, w_kva.slice(c_rows.begin, c_rows.end), nullptr, a.kv_c, s, acc_kva);
  ops::linear_forward(h, w_kva.slice(pe_rows.begin, pe_rows.end), nullptr, k_pe, s,
                      lora_kva_.on() ? &k_pe : nullptr);
  a.kv_cn = ctx.act({n, m.kv_lora_rank});
  a.kv_rstd = ctx.empty({n}, ctx.stat_dtype());
  ops::rmsnorm_forward(a.kv_c, params_.param(kv_norm_), eps, a.kv_cn, a.kv_rstd, s);
  Tensor kv = ctx.act({n, d.kv_width()});
  adapted_project(ctx, kBf16, &lora_kvb_, &a.t_kvb, a.kv_cn, params_.param(w_kvb_), nullptr, kv);

  a.qkv = ctx.act({n, d.qkv_width()});
  for (const Half& part : halves(ctx)) {
    Tensor out = a.qkv.slice(part.first, part.end);
    ops::mla_pack_qkv(q.slice(part.first, part.end), kv.slice(part.first, part.end),
                      k_pe.slice(part.first, part.end), part.dims, *ctx.rope_table, part.pos_offset, out, s,
                      ctx.positions);
  }
  q = kv = k_pe = Tensor();

  const ops::AttentionShape shape = attention_shape(ctx);
  a.attn = ctx.act({n, shape.out_width()});
  a.lse = ctx.empty({ctx.batch, spec_.heads, ctx.seq}, ctx.stat_dtype());
  if (ctx.cp) {  // the sequence split over ranks: these chunks attend to every rank's keys
    ops::AttentionShape chunk = shape;
    chunk.batch = ctx.batch / 2;
    ctx.cp->attention_forward(a.qkv, chunk, a.attn, a.lse, s);
  } else {
    Tensor attn3 = a.attn.view({ctx.batch, ctx.seq, shape.out_width()});
    ops::attention_forward(a.qkv.view({ctx.batch, ctx.seq, shape.qkv_width()}), shape, attn3, a.lse, s);
  }
  // Tensor parallelism: this rank's heads' share of the output projection, summed over tp.
  row_parallel_residual(ctx, a.attn, params_.param(w_o_), residual, x_mid, "tp attention output", kBf16,
                        &lora_o_, &a.t_o);
}

void MlaAttention::recompute_selective(const StepContext& ctx, MlaActivations& a) {
  const Stream& s = ctx.stream;
  if (w_qa_ >= 0 && !a.q_an.defined()) {
    a.q_an = ctx.act(a.q_a.shape());
    ops::rmsnorm_forward(a.q_a, params_.param(q_norm_), spec_.norm_eps, a.q_an, a.q_rstd, s);
  }
  if (!a.kv_cn.defined()) {
    a.kv_cn = ctx.act(a.kv_c.shape());
    ops::rmsnorm_forward(a.kv_c, params_.param(kv_norm_), spec_.norm_eps, a.kv_cn, a.kv_rstd, s);
  }
}

void MlaAttention::backward(const StepContext& ctx, const Tensor& dx_mid, const Tensor& h, MlaActivations& a,
                            Tensor& dh) {
  recompute_selective(ctx, a);
  const MlaConfig& m = spec_.mla;
  const ops::MlaDims d = dims(ctx);
  const ops::AttentionShape shape = attention_shape(ctx);
  const int64_t n = ctx.tokens();
  const Stream& s = ctx.stream;

  // x_mid = residual + a Wo^T
  Tensor d_attn = ctx.act({n, shape.out_width()});
  // dx_mid may be the decoder's residual-stream gradient buffer (a queued GEMM copies it).
  adapted_project_backward(ctx, kBf16, lora_o_, a.t_o, dx_mid, a.attn, params_.param(w_o_), d_attn, false,
                           params_.grad(w_o_), Tensor(), params_.grad_accumulate(w_o_), dx_mid);
  Tensor dqkv = ctx.act({n, d.qkv_width()});
  if (ctx.cp) {
    ops::AttentionShape chunk = shape;
    chunk.batch = ctx.batch / 2;
    ctx.cp->attention_backward(d_attn, a.qkv, a.attn, a.lse, chunk, dqkv, s);
  } else {
    Tensor dqkv3 = dqkv.view({ctx.batch, ctx.seq, shape.qkv_width()});
    ops::attention_backward(d_attn.view({ctx.batch, ctx.seq, shape.out_width()}),
                            a.qkv.view({ctx.batch, ctx.seq, shape.qkv_width()}),
                            a.attn.view({ctx.batch, ctx.seq, shape.out_width()}), a.lse, shape, dqkv3, s);
  }
  d_attn = Tensor();
  a.attn = a.qkv = a.lse = Tensor();
  Tensor dq = ctx.act({n, d.q_width()}), dkv = ctx.act({n, d.kv_width()}), dk_pe = ctx.act({n, d.rope});
  for (const Half& part : halves(ctx)) {
    Tensor dq_p = dq.slice(part.first, part.end), dkv_p = dkv.slice(part.first, part.end),
           dk_pe_p = dk_pe.slice(part.first, part.end);
    ops::mla_unpack_dqkv(dqkv.slice(part.first, part.end), part.dims, *ctx.rope_table, part.pos_offset, dq_p,
                         dkv_p, dk_pe_p, s, ctx.positions);
  }
  dqkv = Tensor();

  // kv = rmsnorm(c_kv) Wkvb^T; [c_kv | k_pe] = h Wkva^T (one gradient mode for both row blocks: the entry is
  // written whole by the two GEMMs together)
  Tensor d_kvcn = ctx.act({n, m.kv_lora_rank});
  adapted_project_backward(ctx, kBf16, lora_kvb_, a.t_kvb, dkv, a.kv_cn, params_.param(w_kvb_), d_kvcn, false,
                           params_.grad(w_kvb_), Tensor(), params_.grad_accumulate(w_kvb_));
  dkv = Tensor();
  Tensor d_kvc = ctx.act({n, m.kv_lora_rank});
  Tensor g_kvn = norm_grad(ctx, params_, kv_norm_);
  ops::rmsnorm_backward(d_kvcn, a.kv_c, params_.param(kv_norm_), a.kv_rstd, d_kvc, g_kvn,
                        /*accumulate_dx=*/false, s);
  d_kvcn = Tensor();
  const Tensor w_kva = params_.param(w_kva_);
  const Tensor w_c = w_kva.slice(0, m.kv_lora_rank),
               w_pe = w_kva.slice(m.kv_lora_rank, m.kv_lora_rank + d.rope);
  if (const Tensor g_kva = params_.grad(w_kva_); g_kva.defined()) {
    const bool acc_kva = params_.grad_accumulate(w_kva_);
    weight_grad(ctx, d_kvc, h, g_kva.slice(0, m.kv_lora_rank), Tensor(), acc_kva);
    weight_grad(ctx, dk_pe, h, g_kva.slice(m.kv_lora_rank, m.kv_lora_rank + d.rope), Tensor(), acc_kva);
  }
  if (lora_kva_.on())  // its share of dh first, over both row blocks of its B
    lora_kva_.backward(ctx,
                       {{d_kvc, {0, m.kv_lora_rank}}, {dk_pe, {m.kv_lora_rank, m.kv_lora_rank + d.rope}}}, h,
                       a.t_kva, dh);
  ops::linear_backward_input(d_kvc, w_c, dh, lora_kva_.on(), s);
  ops::linear_backward_input(dk_pe, w_pe, dh, true, s);
  d_kvc = dk_pe = Tensor();

  // q
  if (w_q_ >= 0) {
    adapted_project_backward(ctx, kBf16, lora_q_, a.t_q, dq, h, params_.param(w_q_), dh, true,
                             params_.grad(w_q_), Tensor(), params_.grad_accumulate(w_q_));
  } else {
    Tensor d_qan = ctx.act({n, m.q_lora_rank});
    adapted_project_backward(ctx, kBf16, lora_qb_, a.t_qb, dq, a.q_an, params_.param(w_qb_), d_qan, false,
                             params_.grad(w_qb_), Tensor(), params_.grad_accumulate(w_qb_));
    dq = Tensor();
    Tensor d_qa = ctx.act({n, m.q_lora_rank});
    Tensor g_qn = norm_grad(ctx, params_, q_norm_);
    ops::rmsnorm_backward(d_qan, a.q_a, params_.param(q_norm_), a.q_rstd, d_qa, g_qn, /*accumulate_dx=*/false,
                          s);
    adapted_project_backward(ctx, kBf16, lora_qa_, a.t_qa, d_qa, h, params_.param(w_qa_), dh, true,
                             params_.grad(w_qa_), Tensor(), params_.grad_accumulate(w_qa_));
  }
  a = MlaActivations{};
}

}  // namespace primus
