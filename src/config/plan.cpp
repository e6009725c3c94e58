#include "config/plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/master_split.h"

namespace primus::config {

ParamCounts count_parameters(const ModelConfig& m) {
  ParamCounts c;
  const int64_t h = m.hidden_size;
  const int64_t vocab = m.padded_vocab_size > 0 ? m.padded_vocab_size : m.vocab_size;
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
  const double vocab = static_cast<double>(m.padded_vocab_size > 0 ? m.padded_vocab_size : m.vocab_size);
  n += static_cast<double>(m.mtp_num_layers) * vocab * static_cast<double>(m.hidden_size);
  return {6.0 * n + 6.0 * attn, 6.0 * n + 12.0 * attn};
}

MemoryEstimate estimate_memory(const TrainConfig& cfg, bool gpu) {
  const ModelConfig& m = cfg.model;
  MemoryEstimate e;
  const ParamCounts params = count_parameters(m);
  // bf16 on the GPU: 2 (bf16 weights) + 4 (f32 master) + 12 (f32 grads, Adam m, v); with the master in
  // remainders (core/master_split.h: one GPU and DDP, not ZeRO-1 / FSDP shards) the master costs 2.
  const auto& par = cfg.parallel;
  const bool sharded = par.data_parallel_size > 1 && (par.use_distributed_optimizer || par.use_torch_fsdp2 ||
                                                      par.data_parallel_sharding_strategy != "no_shard");
  e.master_in_remainders =
      use_master_remainders(gpu, cfg.bf16 ? DType::kBF16 : DType::kF32, DType::kF32, sharded);
  e.bytes_per_param = gpu && cfg.bf16 ? (e.master_in_remainders ? 16.0 : 18.0) : 16.0;
  e.param_state_bytes = e.bytes_per_param * static_cast<double>(params.total);

  const double act_bytes = gpu && cfg.bf16 ? 2.0 : 4.0;
  const double tokens = static_cast<double>(cfg.micro_batch_size) * static_cast<double>(cfg.data.seq_length);
  const double h = static_cast<double>(m.hidden_size);
  const int64_t hd =
      m.kv_channels > 0 ? m.kv_channels : m.hidden_size / std::max<int64_t>(1, m.num_attention_heads);
  const double q = static_cast<double>(m.num_attention_heads * hd);
  const double kv = static_cast<double>(m.num_query_groups * hd);
  const double ffn = static_cast<double>(m.ffn_hidden_size);
  // Saved per token per layer: layer input, 2 norm outputs, mid-layer residual (4h); q, k, v and the
  // attention output (2q + 2kv); MLP gate, up and activation output (3 ffn); plus per-head softmax statistics
  // (f32).
  double per_token_layer = (4 * h + 2 * q + 2 * kv + 3 * ffn) * act_bytes + 4.0 * m.num_attention_heads;
  if (m.qk_layernorm) per_token_layer += (q + kv) * act_bytes;
  if (m.mla.enabled) {
    // Packed q | k | v (H (2 Dqk + Dv)), the attention output (H Dv) and the raw and normed latents.
    const MlaConfig& a = m.mla;
    const double H = static_cast<double>(m.num_attention_heads), dq = a.qk_head_dim + a.qk_pos_emb_head_dim;
    per_token_layer =
        (4 * h + H * (2 * dq + 2 * a.v_head_dim) + 2.0 * (a.q_lora_rank + a.kv_lora_rank) + 3 * ffn) *
            act_bytes +
        4.0 * H;
  }
  const double layers = static_cast<double>(m.num_layers + m.mtp_num_layers);
  const std::string& g = cfg.recompute.granularity;
  if (g == "full") {
    // Only layer inputs are kept; one layer's activations exist again while it is recomputed.
    e.activation_bytes = tokens * (layers * h * act_bytes + per_token_layer);
  } else {
    e.activation_bytes = tokens * layers * per_token_layer;
  }
  const double vocab = static_cast<double>(m.padded_vocab_size > 0 ? m.padded_vocab_size : m.vocab_size);
  constexpr double kLogitsChunkBudget = 256.0 * 1024 * 1024;
  e.lm_head_bytes = std::min(tokens * vocab * 4.0, kLogitsChunkBudget) + tokens * h * act_bytes;
  e.total_bytes = e.param_state_bytes + e.activation_bytes + e.lm_head_bytes;
  e.assumptions = fmt::format(
      "parameters: {} B/param ({}); activations: {} per element, flash-style attention (no S x S matrix){}; "
      "logits: one chunk of at most 256 MiB at a time; no allocator fragmentation, workspaces or CUDA "
      "context",
      e.bytes_per_param,
      !(gpu && cfg.bf16) ? "fp32 weights 4 + fp32 grads 4 + fp32 Adam m, v 8"
      : e.master_in_remainders
          ? "bf16 weights 2 + fp32 master as their i16 remainder 2 + fp32 grads 4 + fp32 "
            "Adam m, v 8"
          : "bf16 weights 2 + fp32 master 4 + fp32 grads 4 + fp32 Adam m, v 8",
      act_bytes == 2.0 ? "bf16" : "fp32",
      g == "full" ? ", full recomputation keeps only each layer's input" : "");
  return e;
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
