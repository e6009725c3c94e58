#include "model/mtp.h"

#include <vector>

#include "model/tp_boundary.h"
#include "model/weight_grad.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/norm.h"

namespace primus {

MtpDepth::MtpDepth(const ModelSpec& spec, ParamStore& params, int depth) : spec_(spec), params_(params) {
  const std::string p = "mtp." + std::to_string(depth) + ".";
  auto need = [&](const std::string& n) {
    int i = params.find(p + n);
    PRIMUS_CHECK(i >= 0, "parameter {}{} missing", p, n);
    return i;
  };
  enorm_ = need("enorm.weight");
  hnorm_ = need("hnorm.weight");
  eh_ = need("eh_proj.weight");
  fnorm_ = need("final_layernorm.weight");
  const bool moe = spec.layers > 0 && spec.is_moe_layer(spec.layers - 1);
  // MoE statistics of depth k are labelled as layer L + k (Primus's recompute_layer_ids numbering).
  layer_ =
      std::make_unique<DecoderLayer>(spec, params, p + "layer.", moe, static_cast<int>(spec.layers) + depth);
}

std::vector<int> MtpDepth::gemm_weight_entries() const {
  std::vector<int> out = layer_->gemm_weight_entries();
  out.push_back(eh_);
  return out;
}

// Tensor parallelism: the depth works on the residual stream's rows this rank holds (every token, or 1/tp
// of them under sequence parallelism), as a decoder layer's norms do, and its layer splits like a main
// layer. eh_proj (2d -> d) is replicated, not split: its output is the layer's residual input, which tp ranks
// hold whole, so a column split would need an all-gather of the output columns (and under sequence
// parallelism a scatter of the rows again) in the forward and the backward, while replicated it needs no
// collective at all. Under sequence parallelism each rank projects its own rows (the FLOPs of a column
// split); without it every rank projects every row (2d^2 per token, small next to the layer). Its gradient,
// like the norms', is then partial under sequence parallelism and summed over tp after the backward
// (ParamEntry::tp_sum).
void MtpDepth::forward(const StepContext& ctx, const Tensor& e, const Tensor& h_prev, MtpActivations& a,
                       RecomputeMode mode, bool record_stats) {
  const int64_t n = local_tokens(ctx), d = spec_.hidden;
  const Stream& s = ctx.stream;
  const float eps = spec_.norm_eps;
  a.e = e;
  a.en = ctx.act({n, d});
  a.e_rstd = ctx.empty({n}, ctx.stat_dtype());
  ops::rmsnorm_forward(e, params_.param(enorm_), eps, a.en, a.e_rstd, s);
  a.hn = ctx.act({n, d});
  a.h_rstd = ctx.empty({n}, ctx.stat_dtype());
  ops::rmsnorm_forward(h_prev, params_.param(hnorm_), eps, a.hn, a.h_rstd, s);
  // HF DeepSeek-V3 and Megatron concatenate [embedding | hidden] before eh_proj.
  a.cat = ctx.act({n, 2 * d});
  ops::concat_columns(a.en, a.hn, a.cat, s);
  a.en = a.hn = Tensor();
  Tensor u = ctx.act({n, d});
  ops::linear_forward(a.cat, params_.param(eh_), nullptr, u, s);
  a.x = layer_->forward(ctx, u, &a.layer, mode, record_stats);
  a.h = ctx.act({n, d});
  a.f_rstd = ctx.empty({n}, ctx.stat_dtype());
  ops::rmsnorm_forward(a.x, params_.param(fnorm_), eps, a.h, a.f_rstd, s);
}

void MtpDepth::backward(const StepContext& ctx, Tensor dh_k, const Tensor& h_prev, MtpActivations& a,
                        Tensor& de, Tensor& dh_prev) {
  const int64_t n = local_tokens(ctx), d = spec_.hidden;
  const Stream& s = ctx.stream;
  Tensor dx = ctx.act({n, d});
  // (LoRA: the depth runs on the frozen base, whose weights have no gradient: norm scratch, no eh_proj GEMM.)
  Tensor g_f = norm_grad(ctx, params_, fnorm_);
  ops::rmsnorm_backward(dh_k, a.x, params_.param(fnorm_), a.f_rstd, dx, g_f, /*accumulate_dx=*/false, s);
  dh_k = Tensor();
  Tensor du = layer_->backward(ctx, dx, a.layer);
  Tensor d_cat = ctx.act({n, 2 * d});
  ops::linear_backward_input(du, params_.param(eh_), d_cat, false, s);
  if (Tensor g_eh = params_.grad(eh_); g_eh.defined())
    ops::linear_backward_weight(du, a.cat, g_eh, nullptr, s, params_.grad_accumulate(eh_));
  du = Tensor();
  a.cat = Tensor();
  Tensor d_en = ctx.act({n, d}), d_hn = ctx.act({n, d});
  ops::split_columns(d_cat, d_en, d_hn, s);
  d_cat = Tensor();
  Tensor g_e = norm_grad(ctx, params_, enorm_), g_h = norm_grad(ctx, params_, hnorm_);
  ops::rmsnorm_backward(d_en, a.e, params_.param(enorm_), a.e_rstd, de, g_e, /*accumulate_dx=*/false, s);
  ops::rmsnorm_backward(d_hn, h_prev, params_.param(hnorm_), a.h_rstd, dh_prev, g_h, /*accumulate_dx=*/false,
                        s);
  a.clear();
}

MtpBatch mtp_batch(const Tensor& tokens, const Tensor& targets, int64_t depths, const Tensor* seg_starts) {
  auto host_i32 = [](const Tensor& t) {
    return t.device().is_cpu() && t.dtype() == DType::kI32 && t.ndim() == 2;
  };
  PRIMUS_CHECK(host_i32(tokens) && host_i32(targets) && tokens.shape() == targets.shape(),
               "mtp_batch: tokens and targets must be host i32 [B, T] alike, got {} and {}",
               tokens.describe(), targets.describe());
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int32_t* x = tokens.data<int32_t>();
  const int32_t* y = targets.data<int32_t>();
  // Token i's sequence within its row is [s[i], end[i]) when packed (its sample), else the whole row [0, T).
  if (seg_starts) ops::check_segment_starts("mtp_batch", *seg_starts, B, T);
  const int32_t* s = seg_starts ? seg_starts->data<int32_t>() : nullptr;
  std::vector<int64_t> end(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = T; t-- > 0;) {
      const int64_t i = b * T + t;
      end[static_cast<size_t>(i)] = s && t + 1 < T && s[i + 1] == s[i] ? end[static_cast<size_t>(i + 1)]
                                    : s                                ? t + 1
                                                                       : T;
    }
  MtpBatch m;
  for (int64_t i = 0; i < B * T; ++i) m.counted += y[i] >= 0;
  for (int64_t k = 1; k <= depths; ++k) {
    Tensor ids = Tensor::empty({B, T}, DType::kI32), tk = Tensor::empty({B, T}, DType::kI32);
    int32_t* u = ids.data<int32_t>();
    int32_t* v = tk.data<int32_t>();
    int64_t counted = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = b * T + t, lo = s ? s[i] : 0, hi = end[static_cast<size_t>(i)];
        u[i] = x[b * T + lo + (t - lo + k) % (hi - lo)];
        v[i] = t + k < hi ? y[i + k] : -1;
        counted += v[i] >= 0;
      }
    m.tokens.push_back(std::move(ids));
    m.targets.push_back(std::move(tk));
    m.counts.push_back(counted);
  }
  return m;
}

}  // namespace primus
