#pragma once
// One Llama/Qwen decoder layer with explicit forward and backward:
//   h1 = rmsnorm(x); qkv = h1 Wqkv^T (+b); [qk-norm]; rope(q, k); a = attn(qkv); x_mid = x + a Wo^T
//   h2 = rmsnorm(x_mid); gu = h2 Wgu^T; s = swiglu(gu); x_out = x_mid + s Wdown^T
// or, in an MoE layer, x_out = x_mid + moe(h2) (model/moe_mlp.h).
// With multi_latent_attention the attention is MlaAttention (model/mla_attention.h) instead of the packed-QKV
// one. The residual adds ride on the GEMMs' C input (y = x W^T + residual), so they cost no extra pass.
#include <memory>
#include <string>
#include <vector>

#include "model/fp8_linear.h"
#include "model/lora_adapter.h"
#include "model/mla_attention.h"
#include "model/model_spec.h"
#include "model/moe_mlp.h"
#include "model/param_store.h"
#include "model/step_context.h"
#include "parallel/tensor_parallel.h"

namespace primus {

// The activation slot of one layer for one micro-batch: what forward saved for backward.
struct LayerActivations {
  // Under sequence parallelism x_in, x_mid and the rstd hold this rank's tokens, h1 / h2 every token's.
  Tensor x_in;                      // always kept (the recompute checkpoint)
  Tensor h1, rstd1;                 // input norm
  Tensor qkv_raw, q_rstd, k_rstd;   // pre-qk-norm projections (qk-norm models only)
  Tensor qkv;                       // after qk-norm and rope: what attention consumed
  Tensor attn, lse;                 // attention output and its log-sum-exp
  Tensor x_mid;                     // residual stream after attention
  Tensor h2, rstd2;                 // post-attention norm
  Tensor gu;                        // gate|up projections
  Tensor act;                       // swiglu output
  MoeActivations moe;               // MoE layers: everything of the MoE MLP
  MlaActivations mla;               // MLA layers: everything of the attention (qkv, attn, lse above unused)
  Tensor t_qkv, t_o, t_gu, t_down;  // LoRA: each adapted projection's s x A^T (model/lora_adapter.h)
  RecomputeMode mode = RecomputeMode::kNone;
  void clear() { *this = LayerActivations{}; }
};

class DecoderLayer {
 public:
  DecoderLayer(const ModelSpec& spec, ParamStore& params, int layer_index);
  // A layer whose parameters are named `prefix` + "self_attn..." (e.g. "mtp.0.layer."); moe_layer picks the
  // MLP.
  DecoderLayer(const ModelSpec& spec, ParamStore& params, const std::string& prefix, bool moe_layer,
               int stats_layer);

  // Returns x_out. With a slot, saves what backward needs according to `mode`; without one (evaluation) keeps
  // nothing.
  // record_stats: a training forward whose routing statistics count (MoE layers).
  Tensor forward(const StepContext& ctx, const Tensor& x_in, LayerActivations* slot, RecomputeMode mode,
                 bool record_stats = false);
  // grad_out = dL/dx_out (consumed: its buffer is reused); returns dL/dx_in. Parameter gradients accumulate.
  Tensor backward(const StepContext& ctx, Tensor grad_out, LayerActivations& slot);
  // Parameter entries whose gradient each backward writes whole with one GEMM (the four projections).
  std::vector<int> gemm_weight_entries() const;
  MoeMlp* moe() { return moe_.get(); }  // nullptr in a dense layer
  // LoRA: the adapters `store` holds for this layer's projections (model/lora_adapter.h); the layer's own
  // store is then frozen. Before the first forward.
  void set_adapters(ParamStore& store);
  // The trainable entries whose gradients are complete once the MLP's backward ran (ParamHooks::grads_final):
  // the MLP's matrices, or with adapters the MLP's adapters.
  std::vector<int> mlp_grad_entries() const;
  // FP8 training: registers this layer's projections that the recipe covers with `state`
  // (model/fp8_linear.h); `layer` is the decoder-layer index the recipe's BF16 first/last layers count.
  void enable_fp8(Fp8State& state, int64_t layer);

 private:
  // Runs the forward and fills every field of the slot (mode kNone semantics).
  Tensor forward_full(const StepContext& ctx, const Tensor& x_in, LayerActivations& a, bool record_stats);
  void recompute_dropped(const StepContext& ctx, LayerActivations& a);
  // RoPE over the q and k heads of qkv [tokens, qkv width] in place, at the tokens' positions (context
  // parallelism: each chunk at its own place in the sequence); inverse for the gradient.
  void rope(const StepContext& ctx, const Tensor& qkv, bool inverse) const;
  // rmsnorm of this rank's rows of x (statistics into rstd), then every token's rows (sequence parallelism).
  // consume (async TP): the projection that reads them, run on row ranges under the all-gather.
  Tensor norm_gathered(const StepContext& ctx, const Tensor& x, int norm, Tensor& rstd, const char* label,
                       const parallel::TensorParallel::RowsFn* consume = nullptr) const;
  // The packed-QKV attention's backward from dx = dL/dx_mid (this rank's rows: the layer's residual-stream
  // gradient buffer): returns dL/dh1 summed over tp, this rank's rows.
  Tensor attention_backward(const StepContext& ctx, const Tensor& dx, LayerActivations& a);
  // The dense MLP's backward from dx (this rank's rows): returns dL/dh2 summed over tp, this rank's rows.
  Tensor mlp_backward(const StepContext& ctx, const Tensor& dx, LayerActivations& a);

  const ModelSpec& spec_;
  ParamStore& params_;
  int w_qkv_ = -1, b_qkv_ = -1, w_o_ = -1, w_gu_ = -1, w_down_ = -1, norm1_, norm2_, q_norm_ = -1,
      k_norm_ = -1;
  std::string prefix_;  // "layers.3."
  // FP8 slots of the four projections (-1: BF16).
  int fp8_qkv_ = -1, fp8_o_ = -1, fp8_gu_ = -1, fp8_down_ = -1;
  std::unique_ptr<MoeMlp> moe_;
  std::unique_ptr<MlaAttention> mla_;
  bool adapted_ = false;  // set_adapters ran: the trainable store is the adapters'
  LoraAdapter lora_qkv_, lora_o_, lora_gu_, lora_down_;
};

}  // namespace primus
