#pragma once
// Hugging Face tensor names <-> Primus parameter names: one table per model, used in both directions, so
// import and export cannot disagree. Every Primus parameter is the concatenation along dim 0 (of the
// flattened rows) of one or more HF tensors, which covers each fusion we do:
//   self_attn.qkv_proj.weight            = q_proj | k_proj | v_proj
//   mlp.gate_up_proj.weight              = gate_proj | up_proj
//   mlp.experts.gate_up_proj.weight      = [E, 2F, d] = gate_0 | up_0 | gate_1 | up_1 | ...   (per-expert
//   files)
//                                        = mlp.experts.gate_up_proj                          (transformers
//                                        5's
//                                          fused [E, 2F, d] layout, gate rows then up rows per expert)
//   mlp.experts.down_proj.weight         = [E, d, F] = down_0 | down_1 | ...  (or the fused down_proj)
// with one row permutation: DeepSeek stores the RoPE rows of q (the last dr rows of each head's dn + dr rows
// in q_proj / q_b_proj) and of k_pe (the last dr rows of kv_a_proj_with_mqa) interleaved (pairs 2i, 2i+1);
// our RoPE is rotate-half (pairs i, i + dr/2), so import de-interleaves (new row j < dr/2 <- old 2j, j >=
// dr/2
// <- old 2(j - dr/2) + 1) and export interleaves again (reference.md §1.5).
//
// Parameter names (model/param_store.cpp; MLA / MTP as the DeepSeek model will lay them out):
//   embed_tokens.weight, norm.weight, lm_head.weight
//   layers.{i}.input_layernorm.weight, post_attention_layernorm.weight
//   layers.{i}.self_attn.{qkv_proj.weight, qkv_proj.bias, o_proj.weight, q_norm.weight, k_norm.weight}
//   layers.{i}.self_attn.{q_proj | q_a_proj, q_a_layernorm, q_b_proj}.weight, kv_a_proj_with_mqa.weight,
//              kv_a_layernorm.weight, kv_b_proj.weight, o_proj.weight                       (MLA)
//   layers.{i}.mlp.{gate_up_proj, down_proj}.weight                                         (dense layers)
//   layers.{i}.mlp.router.weight [E, d], mlp.router.expert_bias [E], mlp.experts.gate_up_proj.weight
//              [E, 2F, d], mlp.experts.down_proj.weight [E, d, F], mlp.shared_expert.{gate_up_proj,
//              down_proj}.weight, mlp.shared_expert_gate.weight [1, d]                      (MoE layers)
//   mtp.{k}.{enorm, hnorm, eh_proj, final_layernorm}.weight, mtp.{k}.layer.<a decoder layer's names>
// DeepSeek-V3 stores MTP module k as model.layers.{num_hidden_layers + k} (enorm, hnorm, eh_proj,
// shared_head.norm, a decoder layer, and copies of the embedding and the head: embed_tokens,
// shared_head.head); its decoder layer is MoE when the last decoder layer is.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "core/tensor.h"

namespace primus::ckpt {

struct HfPart {
  std::string name;  // full HF name
  Shape shape;       // its shape in the HF files
  // DeepSeek RoPE rows: rows form blocks of rope_block rows whose last rope_rows rows are interleaved.
  int64_t rope_block = 0, rope_rows = 0;
  bool keep_f32 = false;  // always f32 in HF files (DeepSeek-V3's e_score_correction_bias)
};

enum class HfMapKind {
  kParam,  // `param` is the concatenation of `parts`
  kZero,   // parts the HF function has but ours lacks because they are zero (llama attention_bias o_proj
           // bias; q/k/v biases of a model without them exported as qwen2): checked zero when present,
           // written as zeros
  kAlias,  // parts that are copies of `param` (a tied lm_head.weight stored anyway; DeepSeek MTP's
           // embed_tokens / shared_head.head): checked equal when present, written as copies if `write`
};

struct HfMapEntry {
  HfMapKind kind = HfMapKind::kParam;
  std::string param;  // Primus name (kParam, kAlias)
  Shape param_shape;  // Primus shape; vocabulary rows are vocab_size (a checkpoint may pad them)
  std::vector<HfPart> parts;
  bool write = true;  // kAlias: written on export
};

enum class HfExpertLayout { kPerExpert, kFused };

struct HfMapOptions {
  HfExpertLayout experts = HfExpertLayout::kPerExpert;
  bool rope_interleaved = true;  // DeepSeek: HF stores the RoPE rows interleaved
  // q/k/v bias tensors in the HF files: qwen2 always; qwen2_moe unless its config says qkv_bias false;
  // llama / qwen3 / qwen3_moe when the model has biases. A model without biases exports zeros.
  bool qkv_bias_tensors = false;
};

class HfNameMap {
 public:
  // Throws when `model_type` cannot describe `m` (use hf_config_from_model's checks first for a message
  // naming the reason).
  HfNameMap(const ModelConfig& m, const std::string& model_type, const HfMapOptions& o);
  const std::string& model_type() const { return type_; }
  const std::vector<HfMapEntry>& entries() const { return entries_; }
  // The kParam entry of Primus parameter `param`, or nullptr.
  const HfMapEntry* find(const std::string& param) const;
  // Every Primus parameter of the table, in table order.
  std::vector<std::string> params() const;

 private:
  void add_layer(const std::string& hf, const std::string& ours, bool moe);
  void add_attention(const std::string& hf, const std::string& ours);
  void add_mlp(const std::string& hf, const std::string& ours, bool moe);
  HfMapEntry& param(const std::string& name, Shape shape);

  ModelConfig m_;  // a copy: the table outlives the caller's config
  std::string type_;
  HfMapOptions o_;
  std::vector<HfMapEntry> entries_;
  std::map<std::string, size_t> by_param_;
};

// Whether config.json's family has q/k/v bias tensors for `m` (see HfMapOptions::qkv_bias_tensors);
// `config` is the config.json being read or written.
bool hf_has_qkv_bias_tensors(const ModelConfig& m, const std::string& model_type,
                             const nlohmann::json& config);

// The row order of an HF part with RoPE rows: src_row[j] is the HF row that becomes our row j.
std::vector<int64_t> rope_deinterleave_rows(const HfPart& p);

}  // namespace primus::ckpt
