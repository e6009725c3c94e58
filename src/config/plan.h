#pragma once
// Napkin arithmetic of a training run as plain functions of TrainConfig, shared by `--dry-run` and the
// trainer (MFU): parameter counts, FLOPs per token, batch layout. Memory per rank is
// projection/memory_model.h's.
#include <cstdint>
#include <string>

#include "config/train_config.h"

namespace primus::config {

struct ParamCounts {
  int64_t embedding = 0;  // input embedding, padded_vocab x hidden
  int64_t lm_head = 0;    // output layer (0 when tied to the embedding)
  int64_t per_layer = 0;  // one decoder layer (attention, MLP, norms, biases); MoE models: an MoE layer
  int64_t dense_layers = 0, moe_layers = 0;   // MoE models: how many of each
  int64_t per_dense_layer = 0;                // MoE models: a dense layer
  int64_t moe_expert = 0;                     // one routed expert (gate, up, down)
  int64_t mtp_layers = 0, per_mtp_depth = 0;  // multi-token prediction: depths, and one depth's parameters
  int64_t final_norm = 0;
  int64_t total = 0;
  int64_t non_embedding = 0;  // total - embedding: N' (includes the lm-head unless tied)
  // What one token passes through: non_embedding less the routed experts it is not sent to (MoE models:
  // (num_experts - topk) experts per MoE layer); = non_embedding for dense models. The FLOP formula uses it.
  int64_t active_non_embedding = 0;
};
ParamCounts count_parameters(const ModelConfig& m);

// Training FLOPs per token (forward + backward = 3 x forward), with N' = the active non-embedding parameters
// (all of them for dense models; MoE: the routed experts a token is not sent to do not count; MTP: its
// depths' parameters plus one more pass of the output projection, V h, per depth):
//   causal = 6 N' + 6 L' S d_attn   (attention over the causal half; what the trainer's log line uses)
//   full   = 6 N' + 12 L' S d_attn  (PaLM / TorchTitan convention, used for MFU against published numbers)
// where d_attn = num_attention_heads x (Dqk + Dv) / 2 (= heads x kv_channels = hidden_size for Llama; MLA:
// Dqk = qk_head_dim + qk_pos_emb_head_dim, Dv = v_head_dim), L' = num_layers + mtp_num_layers and S =
// seq_length.
struct FlopsPerToken {
  double causal = 0;
  double full = 0;
};
FlopsPerToken flops_per_token(const ModelConfig& m, int64_t seq_length);

// The split of the global batch: global_batch_size = micro_batch_size x micro_batches x data-parallel ranks.
// The one place the rule is written (the config validation, the layout's validation and report, the
// pipeline projection and the trainer all ask here).
struct BatchLayout {
  int64_t data_parallel = 1;
  int64_t micro_batches = 1;    // per optimizer step, per data-parallel rank
  int64_t tokens_per_step = 0;  // global_batch_size x seq_length
  bool fits = true;             // micro_batch_size >= 1 and global_batch_size % (micro_batch_size x DP) == 0
  // "global_batch_size G is not divisible by micro_batch_size M x data-parallel size D = P (rule: ...)";
  // empty when it fits.
  std::string problem() const;
  int64_t global_batch = 0, micro_batch = 0;
};
// With cfg.parallel.data_parallel_size ranks, or `data_parallel` when given (a layout being checked).
BatchLayout batch_layout(const TrainConfig& cfg, int64_t data_parallel = -1);

}  // namespace primus::config
