#pragma once
// Multi-latent attention (DeepSeek-V2/V3), the attention of a DecoderLayer when `multi_latent_attention` is
// on. With dn = qk_head_dim, dr = qk_pos_emb_head_dim, dv = v_head_dim and h the input norm's output:
//   q     = rmsnorm(h Wqa^T) Wqb^T               (q_lora_rank > 0)   or   h Wq^T
//   c_kv  = h Wkva[:kv_lora]^T,  k_pe = h Wkva[kv_lora:]^T      (one GEMM's rows split: two GEMMs)
//   kv    = rmsnorm(c_kv) Wkvb^T                 per head [k_nope | v]
//   qkv   = pack(q, kv, rope(k_pe)) with rope on q's rotary slice  (ops/mla.h)
//   a     = attention(qkv; D = dn + dr, Dv = dv, causal, scale m^2 / sqrt(dn + dr))
//   x_mid = residual + a Wo^T
// The latent norms' outputs are the cheap tensors selective recompute drops.
#include <string>
#include <vector>

#include "model/lora_adapter.h"
#include "model/model_spec.h"
#include "model/param_store.h"
#include "model/step_context.h"
#include "ops/attention.h"
#include "ops/mla.h"

namespace primus {

struct MlaActivations {
  Tensor q_a, q_rstd, q_an;     // q_lora_rank > 0: h Wqa^T, its rstd, the normed latent (dropped: selective)
  Tensor kv_c, kv_rstd, kv_cn;  // the compressed kv latent, its rstd, the normed latent (dropped: selective)
  Tensor qkv;                   // packed q | k | v after rope: what attention consumed
  Tensor attn, lse;             // attention output [n, H dv] and its log-sum-exp
  // LoRA adapters' t = s x A^T per adapted projection (model/lora_adapter.h)
  Tensor t_q, t_qa, t_qb, t_kva, t_kvb, t_o;
  void drop_selective() { q_an = kv_cn = Tensor(); }
};

class MlaAttention {
 public:
  // prefix: "layers.3." or "mtp.0.layer.".
  MlaAttention(const ModelSpec& spec, ParamStore& params, const std::string& prefix);

  // x_mid [n, d] = residual + attention(h) Wo^T; fills `a` with what backward needs.
  void forward(const StepContext& ctx, const Tensor& h, const Tensor& residual, Tensor& x_mid,
               MlaActivations& a);
  // Recomputes the latent norms' outputs (selective recompute dropped them) from the kept latents.
  void recompute_selective(const StepContext& ctx, MlaActivations& a);
  // dh [n, d] (overwritten) from dx_mid [n, d] (= dL/dx_mid; the residual's share is the caller's); h is the
  // forward's input. Accumulates the parameter gradients and frees the activations.
  void backward(const StepContext& ctx, const Tensor& dx_mid, const Tensor& h, MlaActivations& a, Tensor& dh);
  // Parameter entries whose gradient each backward writes whole with GEMMs.
  std::vector<int> gemm_weight_entries() const;
  // LoRA: the adapters of the projections `store` (the trainable adapter store) has; the base is then frozen.
  void set_adapters(ParamStore& store);

 private:
  ops::MlaDims dims(const StepContext& ctx) const;
  // Row ranges of the layer's tokens that RoPE sees as contiguous sequences: all of them, or under context
  // parallelism this rank's two chunks of every sequence, each at its own first position.
  struct Half {
    int64_t first, end;
    ops::MlaDims dims;
    int64_t pos_offset;
  };
  std::vector<Half> halves(const StepContext& ctx) const;
  ops::AttentionShape attention_shape(const StepContext& ctx) const;

  const ModelSpec& spec_;
  ParamStore& params_;
  int w_q_ = -1, w_qa_ = -1, w_qb_ = -1, q_norm_ = -1, w_kva_ = -1, kv_norm_ = -1, w_kvb_ = -1, w_o_ = -1;
  LoraAdapter lora_q_, lora_qa_, lora_qb_, lora_kva_, lora_kvb_, lora_o_;
  std::string prefix_;
};

}  // namespace primus
