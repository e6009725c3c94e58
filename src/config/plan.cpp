#include "config/plan.h"

#include <fmt/format.h>

#include <algorithm>

namespace primus::config {

ParamCounts count_parameters(const ModelConfig& m) {
  ParamCounts c;
  const int64_t h = m.hidden_size;
  const int64_t vocab = m.vocab_rows();
  const int64_t hd = m.kv_channels > 0 ? m.kv_channels : h / std::max<int64_t>(1, m.num_attention_heads);
  const int64_t q = m.num_attention_heads * hd;
  const int64_t kv = (m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads) * hd;
  int64_t layer = h * q + 2 * h * kv + q * h;  // q, k, v, o projections
  if (m.add_qkv_bias) layer += q + 2 * kv;
  if (m.qk_layernorm) layer += 2 * hd;  // per-head q and k norm weights
  if (m.mla.enabled) {
    // model/mla_attention.h: q (low-rank with its norm, or direct), kv_a [kv_lora + dr, h] with the latent
    // norm, kv_b [H (dn + dv), kv_lora], o [h, H dv].
    const MlaConfig& a = m.mla;
    const int64_t H = m.num_attention_heads, dq = a.qk_head_dim + a.qk_pos_emb_head_dim;
    layer = a.q_lora_rank > 0 ? h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * H * dq : h * H * dq;
    layer += h * (a.kv_lora_rank + a.qk_pos_emb_head_dim) + a.kv_lora_rank;
    layer += a.kv_lora_rank * H * (a.qk_head_dim + a.v_head_dim) + H * a.v_head_dim * h;
  }
  layer += 2 * h;  // the two norms
  const int64_t mlp_in = m.swiglu ? 2 * m.ffn_hidden_size : m.ffn_hidden_size;
  int64_t dense = layer + h * mlp_in + m.ffn_hidden_size * h;
  if (m.add_bias_linear) dense += h + mlp_in + h;  // o, fc1, fc2 biases
  c.embedding = vocab * h;
  c.lm_head = m.untie_embeddings_and_output_weights ? vocab * h : 0;
  c.final_norm = h;
  // Multi-token prediction (model/mtp.h): per depth eh_proj [h, 2h], three norms and one layer of the last
  // layer's kind.
  const int64_t D = m.mtp_num_layers;
  c.mtp_layers = D;
  const MoeConfig& e = m.moe;
  if (!e.enabled()) {
    c.per_layer = dense;
    c.per_mtp_depth = D > 0 ? 2 * h * h + 3 * h + dense : 0;
    c.total = c.embedding + c.lm_head + c.final_norm + m.num_layers * c.per_layer + D * c.per_mtp_depth;
    c.non_embedding = c.total - c.embedding;
    c.active_non_embedding = c.non_embedding;
    return c;
  }
  // MoE layer (model/moe_mlp.h): router [E, h] and its expert bias [E] (a buffer, counted because it is
  // stored with the weights), E experts of 3·h·F, an optional shared expert (3·h·Fs) and its gate [1, h].
  c.moe_expert = 3 * h * e.ffn_hidden_size;
  int64_t moe = layer + e.num_experts * h + e.num_experts * c.moe_expert;
  if (e.expert_bias) moe += e.num_experts;
  if (e.shared_ffn_hidden_size > 0) moe += 3 * h * e.shared_ffn_hidden_size;
  if (e.shared_expert_gate) moe += h;
  c.moe_layers = e.moe_layers();
  c.dense_layers = m.num_layers - c.moe_layers;
  c.per_layer = moe;
  c.per_dense_layer = dense;
  const bool mtp_moe = m.num_layers > 0 && e.is_moe_layer(m.num_layers - 1);
  c.per_mtp_depth = D > 0 ? 2 * h * h + 3 * h + (mtp_moe ? moe : dense) : 0;
  c.total = c.embedding + c.lm_head + c.final_norm + c.moe_layers * moe + c.dense_layers * dense +
            D * c.per_mtp_depth;
  c.non_embedding = c.total - c.embedding;
  const int64_t routed_moe_layers = c.moe_layers + (mtp_moe ? D : 0);
  c.active_non_embedding = c.non_embedding - routed_moe_layers * (e.num_experts - e.topk) * c.moe_expert;
  return c;
}

FlopsPerToken flops_per_token(const ModelConfig& m, int64_t seq_length) {
  double n = static_cast<double>(count_parameters(m).active_non_embedding);
  const int64_t hd =
      m.kv_channels > 0 ? m.kv_channels : m.hidden_size / std::max<int64_t>(1, m.num_attention_heads);
  // The attention width per layer: H (Dqk + Dv) / 2, which is H D when the q/k and v head dims agree. QK^T
  // costs Dqk and PV costs Dv multiply-adds per score, so MLA (Dqk = dn + dr, Dv = dv) counts both.
  const double width =
      m.mla.enabled
          ? static_cast<double>(m.num_attention_heads) *
                static_cast<double>(m.mla.qk_head_dim + m.mla.qk_pos_emb_head_dim + m.mla.v_head_dim) / 2.0
          : static_cast<double>(m.num_attention_heads * hd);
  // MTP depths run one more attention layer each, and the output projection once more per token (tied or
  // not: a tied head is outside N' but still a GEMM per depth).
  const double layers = static_cast<double>(m.num_layers + m.mtp_num_layers);
  const double attn = layers * static_cast<double>(seq_length) * width;
  const double vocab = static_cast<double>(m.vocab_rows());
  n += static_cast<double>(m.mtp_num_layers) * vocab * static_cast<double>(m.hidden_size);
  return {6.0 * n + 6.0 * attn, 6.0 * n + 12.0 * attn};
}

BatchLayout batch_layout(const TrainConfig& cfg, int64_t data_parallel) {
  BatchLayout b;
  b.data_parallel = std::max<int64_t>(1, data_parallel > 0 ? data_parallel : cfg.parallel.data_parallel_size);
  b.global_batch = cfg.global_batch_size;
  b.micro_batch = cfg.micro_batch_size;
  const int64_t per = cfg.micro_batch_size * b.data_parallel;
  b.fits = cfg.micro_batch_size >= 1 && per > 0 && cfg.global_batch_size % per == 0;
  b.micro_batches = per > 0 ? cfg.global_batch_size / per : 0;
  b.tokens_per_step = cfg.global_batch_size * cfg.data.seq_length;
  return b;
}

std::string BatchLayout::problem() const {
  if (fits) return "";
  return fmt::format(
      "global_batch_size {} is not divisible by micro_batch_size {} x data-parallel size {} = {} (rule: "
      "global_batch_size % (micro_batch_size * DP) == 0; DP = world / (TP x PP x CP))",
      global_batch, micro_batch, data_parallel, micro_batch * data_parallel);
}

}  // namespace primus::config
