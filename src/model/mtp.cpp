#include "model/mtp.h"

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

void MtpDepth::forward(const StepContext& ctx, const Tensor& e, const Tensor& h_prev, MtpActivations& a,
                       RecomputeMode mode, bool record_stats) {
  const int64_t n = ctx.tokens(), d = spec_.hidden;
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
  const int64_t n = ctx.tokens(), d = spec_.hidden;
  const Stream& s = ctx.stream;
  Tensor dx = ctx.act({n, d});
  Tensor g_f = params_.grad(fnorm_);
  ops::rmsnorm_backward(dh_k, a.x, params_.param(fnorm_), a.f_rstd, dx, g_f, /*accumulate_dx=*/false, s);
  dh_k = Tensor();
  Tensor du = layer_->backward(ctx, dx, a.layer);
  Tensor d_cat = ctx.act({n, 2 * d});
  ops::linear_backward_input(du, params_.param(eh_), d_cat, false, s);
  Tensor g_eh = params_.grad(eh_);
  ops::linear_backward_weight(du, a.cat, g_eh, nullptr, s, params_.grad_accumulate(eh_));
  du = Tensor();
  a.cat = Tensor();
  Tensor d_en = ctx.act({n, d}), d_hn = ctx.act({n, d});
  ops::split_columns(d_cat, d_en, d_hn, s);
  d_cat = Tensor();
  Tensor g_e = params_.grad(enorm_), g_h = params_.grad(hnorm_);
  ops::rmsnorm_backward(d_en, a.e, params_.param(enorm_), a.e_rstd, de, g_e, /*accumulate_dx=*/false, s);
  ops::rmsnorm_backward(d_hn, h_prev, params_.param(hnorm_), a.h_rstd, dh_prev, g_h, /*accumulate_dx=*/false,
                        s);
  a.clear();
}

std::vector<int64_t> mtp_counted_tokens(const Tensor& host_targets, int64_t depths) {
  PRIMUS_CHECK(
      host_targets.device().is_cpu() && host_targets.dtype() == DType::kI32 && host_targets.ndim() == 2,
      "mtp_counted_tokens: targets must be host i32 [B, T], got {}", host_targets.describe());
  const int64_t B = host_targets.size(0), T = host_targets.size(1);
  const int32_t* t = host_targets.data<int32_t>();
  std::vector<int64_t> out(static_cast<size_t>(depths), 0);
  for (int64_t k = 1; k <= depths; ++k)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = k; i < T; ++i) out[k - 1] += t[b * T + i] >= 0;
  return out;
}

}  // namespace primus
