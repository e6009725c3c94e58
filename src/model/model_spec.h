#pragma once
// Derived sizes of a decoder-only model, computed once from ModelConfig. Attention and MLP code is written
// against these *local* sizes so that tensor parallelism later divides heads / ffn / vocab here and nowhere
// else.
#include <cstdint>
#include <string>
#include <vector>

#include "config/train_config.h"

namespace primus {

struct ModelSpec {
  int64_t layers = 0;
  int64_t hidden = 0;    // d
  int64_t heads = 0;     // H (local)
  int64_t kv_heads = 0;  // KV (local)
  int64_t head_dim = 0;  // D
  int64_t ffn = 0;       // F (local)
  int64_t vocab = 0;     // padded vocabulary (local)
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  bool qkv_bias = false;
  bool qk_norm = false;
  bool tied_embeddings = false;
  float norm_eps = 1e-5f;
  double init_std = 0.02;
  MoeConfig moe;  // num_experts == 0: every MLP is dense (model/moe_mlp.h)
  bool is_moe_layer(int64_t layer) const { return moe.is_moe_layer(layer); }
  // mla.enabled: every layer's attention is multi-latent (model/mla_attention.h) and RoPE covers only the
  // qk_pos_emb_head_dim rotary slice; head_dim then is unused.
  MlaConfig mla;
  // The elements of each head RoPE rotates: MLA's rotary slice, else head_dim or, with partial rotary
  // (rotary_percent < 1), the leading rotary_dim of them (ops::rope_apply with a table that wide).
  int64_t rotary_dim = 0;  // 0: the whole head
  int64_t rope_dim() const {
    return mla.enabled ? mla.qk_pos_emb_head_dim : rotary_dim > 0 ? rotary_dim : head_dim;
  }
  float logit_softcap = 0.0f;  // final_logit_softcapping (0: off), model/lm_head.cpp
  float attn_scale = 1.0f;  // softmax scale: 1/sqrt(D), or MLA's m(factor, mscale_all_dim)^2 / sqrt(dn + dr)
  int64_t mtp_layers = 0;   // multi-token-prediction depths (model/mtp.h)
  double mtp_loss_scale = 0.1;

  // Expert parallelism: this rank holds experts [first_local_expert(), + local_experts()) of every MoE layer
  // (the router and everything else whole); under tensor parallelism too, its tp share of each of their
  // columns (expert TP = TP). The layout decides it (Trainer::local_spec); size 1 = all.
  struct ExpertShard {
    int size = 1, rank = 0;
  };
  ExpertShard ep;
  // Tensor parallelism (Megatron style): this rank holds heads / kv_heads / ffn / vocab above divided by
  // `size` (rank `rank`'s contiguous share of each); with sequence_parallel the residual stream, norms and
  // residual adds run on 1/size of the tokens. The layout decides it (Trainer::local_spec); size 1 = all.
  struct TensorShard {
    int size = 1, rank = 0;
    bool sequence_parallel = false;
    // Key/value heads fewer than ranks: each rank holds one kv head, shared by kv_replicas consecutive ranks
    // (its q heads' group); 1 when the kv heads split.
    int kv_replicas = 1;
  };
  TensorShard tp;
  int64_t whole_vocab() const { return vocab * tp.size; }
  int64_t vocab_begin() const { return vocab * tp.rank; }  // this rank's first vocabulary row
  // This spec split over `size` tensor-parallel ranks as rank `rank` holds it. Checks that heads, kv heads,
  // ffn and vocabulary divide, and refuses what tensor parallelism does not cover yet.
  ModelSpec with_tensor_shard(int size, int rank, bool sequence_parallel) const;
  int64_t local_experts() const { return moe.num_experts / ep.size; }
  int64_t first_local_expert() const { return local_experts() * ep.rank; }
  // This spec with the experts split over `size` ranks, as rank `rank` holds them (checks num_experts %
  // size).
  ModelSpec with_expert_shard(int size, int rank) const;

  // Pipeline parallelism: the modules this rank holds over all its model chunks (the layout decides,
  // Trainer::local_spec). Without a split every rank holds everything.
  struct PipelineShare {
    bool split = false;
    bool embedding = true, head = true;  // the input embedding; the final norm + output layer
    std::vector<char> layers;            // split: per decoder layer, whether this rank holds it
  };
  PipelineShare pp;
  bool holds_layer(int64_t l) const { return !pp.split || pp.layers[static_cast<size_t>(l)] != 0; }
  // This spec restricted to the embedding (or not), `layers` (one flag per decoder layer) and the head (or
  // not). The multi-token-prediction depths go with the head (Megatron builds them on the loss's stage).
  ModelSpec with_pipeline_share(bool embedding, std::vector<char> layers, bool head) const;
  // The head's stage reads the input embedding: as its output projection (tied embeddings) or to embed the
  // shifted tokens of the multi-token-prediction depths (model/mtp.h; tied or not).
  bool head_reads_embedding() const { return tied_embeddings || mtp_layers > 0; }
  // That embedding with the embedding and the output layer on different pipeline stages (Megatron's
  // "embedding group"): the head's stage holds a copy of embed_tokens.weight, and the two stages sum their
  // gradients of it after the backward, so that both copies take the same updates. ("Tied" across stages:
  // an untied MTP model's copy is tied to the embedding the same way, as in Megatron-LM, whose embedding
  // group sums the word embeddings' gradient for tied and MTP models alike.)
  bool tied_across_stages() const { return head_reads_embedding() && pp.split && pp.embedding != pp.head; }
  // This stage holds that copy (the head without the embedding): left out of the gradient norm and of
  // checkpoints, which count and store the weight once, as the input embedding.
  bool holds_tied_copy() const { return tied_across_stages() && pp.head; }
  // The MTP depths this rank builds: all of them on the head's stage, none elsewhere.
  int64_t local_mtp_layers() const { return pp.head ? mtp_layers : 0; }
  std::string pipeline_modules() const;  // "embedding + layers 0-1, 4-5 + head"

  // LoRA (model/lora_adapter.h): a ParamStore laid out from a spec with adapters.enabled holds only the
  // adapters of adapters.targets, layer by layer in the same regions as the model's (the trainable store);
  // the frozen base model's store is laid out from the same spec with adapters.enabled false.
  LoraConfig adapters;

  static ModelSpec from_config(const ModelConfig& m);
  std::string describe() const;
};

}  // namespace primus
