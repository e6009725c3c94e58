#include "checkpoint/hf_name_map.h"

#include <fmt/format.h>

#include "core/error.h"

namespace primus::ckpt {

namespace {
bool is_deepseek(const std::string& t) {
  return t == "deepseek_v2" || t == "deepseek_v3";
}
}  // namespace

bool hf_has_qkv_bias_tensors(const ModelConfig& m, const std::string& type, const nlohmann::json& config) {
  if (type == "qwen2") return true;
  if (type == "qwen2_moe")
    return !(config.is_object() && config.contains("qkv_bias") && config["qkv_bias"].is_boolean()) ||
           config["qkv_bias"].get<bool>();
  return m.add_qkv_bias;
}

std::vector<int64_t> rope_deinterleave_rows(const HfPart& p) {
  const int64_t rows = p.shape.at(0);
  std::vector<int64_t> src(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) src[r] = r;
  if (p.rope_rows == 0) return src;
  PRIMUS_CHECK(
      p.rope_block > 0 && rows % p.rope_block == 0 && p.rope_rows % 2 == 0 && p.rope_rows <= p.rope_block,
      "{}: RoPE blocks of {} rows (the last {} interleaved) do not tile {} rows", p.name, p.rope_block,
      p.rope_rows, rows);
  const int64_t half = p.rope_rows / 2;
  for (int64_t b = 0; b < rows; b += p.rope_block) {
    const int64_t r0 = b + p.rope_block - p.rope_rows;  // first RoPE row of the block
    for (int64_t j = 0; j < p.rope_rows; ++j) src[r0 + j] = r0 + (j < half ? 2 * j : 2 * (j - half) + 1);
  }
  return src;
}

HfMapEntry& HfNameMap::param(const std::string& name, Shape shape) {
  PRIMUS_CHECK(!by_param_.count(name), "HF name map: parameter {} twice", name);
  by_param_[name] = entries_.size();
  entries_.push_back(HfMapEntry{HfMapKind::kParam, name, std::move(shape), {}, true});
  return entries_.back();
}

const HfMapEntry* HfNameMap::find(const std::string& p) const {
  auto it = by_param_.find(p);
  return it == by_param_.end() ? nullptr : &entries_[it->second];
}

std::vector<std::string> HfNameMap::params() const {
  std::vector<std::string> out;
  for (const HfMapEntry& e : entries_)
    if (e.kind == HfMapKind::kParam) out.push_back(e.param);
  return out;
}

void HfNameMap::add_attention(const std::string& hf, const std::string& ours) {
  const int64_t d = m_.hidden_size, heads = m_.num_attention_heads;
  const std::string a = hf + "self_attn.", p = ours + "self_attn.";
  if (m_.mla.enabled) {
    const int64_t dn = m_.mla.qk_head_dim, dr = m_.mla.qk_pos_emb_head_dim, dv = m_.mla.v_head_dim;
    const int64_t kvl = m_.mla.kv_lora_rank, ql = m_.mla.q_lora_rank;
    const int64_t rr = o_.rope_interleaved ? dr : 0;  // RoPE rows to de-interleave
    if (ql > 0) {
      param(p + "q_a_proj.weight", {ql, d}).parts = {{a + "q_a_proj.weight", {ql, d}}};
      param(p + "q_a_layernorm.weight", {ql}).parts = {{a + "q_a_layernorm.weight", {ql}}};
      param(p + "q_b_proj.weight", {heads * (dn + dr), ql}).parts = {
          {a + "q_b_proj.weight", {heads * (dn + dr), ql}, dn + dr, rr}};
    } else {
      param(p + "q_proj.weight", {heads * (dn + dr), d}).parts = {
          {a + "q_proj.weight", {heads * (dn + dr), d}, dn + dr, rr}};
    }
    param(p + "kv_a_proj_with_mqa.weight", {kvl + dr, d}).parts = {
        {a + "kv_a_proj_with_mqa.weight", {kvl + dr, d}, kvl + dr, rr}};
    param(p + "kv_a_layernorm.weight", {kvl}).parts = {{a + "kv_a_layernorm.weight", {kvl}}};
    param(p + "kv_b_proj.weight", {heads * (dn + dv), kvl}).parts = {
        {a + "kv_b_proj.weight", {heads * (dn + dv), kvl}}};
    param(p + "o_proj.weight", {d, heads * dv}).parts = {{a + "o_proj.weight", {d, heads * dv}}};
    return;
  }
  const int64_t hd = m_.kv_channels, qd = heads * hd, kvd = m_.num_query_groups * hd;
  param(p + "qkv_proj.weight", {qd + 2 * kvd, d}).parts = {
      {a + "q_proj.weight", {qd, d}}, {a + "k_proj.weight", {kvd, d}}, {a + "v_proj.weight", {kvd, d}}};
  std::vector<HfPart> bias = {
      {a + "q_proj.bias", {qd}}, {a + "k_proj.bias", {kvd}}, {a + "v_proj.bias", {kvd}}};
  if (m_.add_qkv_bias) {
    param(p + "qkv_proj.bias", {qd + 2 * kvd}).parts = bias;
  } else if (o_.qkv_bias_tensors) {
    entries_.push_back(HfMapEntry{HfMapKind::kZero, "", {}, bias, true});
  }
  param(p + "o_proj.weight", {d, qd}).parts = {{a + "o_proj.weight", {d, qd}}};
  // llama / qwen3(_moe) attention_bias also biases o_proj, which must be zero (our layer has none).
  if (m_.add_qkv_bias && (type_ == "llama" || type_ == "qwen3" || type_ == "qwen3_moe"))
    entries_.push_back(HfMapEntry{HfMapKind::kZero, "", {}, {{a + "o_proj.bias", {d}}}, true});
  if (m_.qk_layernorm) {
    param(p + "q_norm.weight", {hd}).parts = {{a + "q_norm.weight", {hd}}};
    param(p + "k_norm.weight", {hd}).parts = {{a + "k_norm.weight", {hd}}};
  }
}

void HfNameMap::add_mlp(const std::string& hf, const std::string& ours, bool moe) {
  const int64_t d = m_.hidden_size;
  const std::string p = ours + "mlp.";
  if (!moe) {
    const int64_t f = m_.ffn_hidden_size;
    const std::string h = hf + "mlp.";
    param(p + "gate_up_proj.weight", {2 * f, d}).parts = {{h + "gate_proj.weight", {f, d}},
                                                          {h + "up_proj.weight", {f, d}}};
    param(p + "down_proj.weight", {d, f}).parts = {{h + "down_proj.weight", {d, f}}};
    return;
  }
  const MoeConfig& e = m_.moe;
  const int64_t E = e.num_experts, F = e.ffn_hidden_size;
  const bool mixtral_legacy = type_ == "mixtral" && o_.experts == HfExpertLayout::kPerExpert;
  // transformers 5 renamed Mixtral's block_sparse_moe to mlp (its fused layout uses the new name).
  const std::string h = hf + (mixtral_legacy ? "block_sparse_moe." : "mlp.");
  param(p + "router.weight", {E, d}).parts = {{h + "gate.weight", {E, d}}};
  if (type_ == "deepseek_v3") {
    HfPart bias{h + "gate.e_score_correction_bias", {E}, 0, 0, /*keep_f32=*/true};
    if (e.expert_bias)
      param(p + "router.expert_bias", {E}).parts = {bias};
    else
      entries_.push_back(HfMapEntry{HfMapKind::kZero, "", {}, {bias}, true});
  }
  std::vector<HfPart> gu_parts, down_parts;
  if (o_.experts == HfExpertLayout::kFused) {
    gu_parts = {{h + "experts.gate_up_proj", {E, 2 * F, d}}};
    down_parts = {{h + "experts.down_proj", {E, d, F}}};
  } else {
    for (int64_t x = 0; x < E; ++x) {
      const std::string ex = h + "experts." + std::to_string(x) + ".";
      const bool w = type_ == "mixtral";
      gu_parts.push_back({ex + (w ? "w1.weight" : "gate_proj.weight"), {F, d}});
      gu_parts.push_back({ex + (w ? "w3.weight" : "up_proj.weight"), {F, d}});
      down_parts.push_back({ex + (w ? "w2.weight" : "down_proj.weight"), {d, F}});
    }
  }
  param(p + "experts.gate_up_proj.weight", {E, 2 * F, d}).parts = std::move(gu_parts);
  param(p + "experts.down_proj.weight", {E, d, F}).parts = std::move(down_parts);
  if (e.shared_ffn_hidden_size > 0) {
    const int64_t Fs = e.shared_ffn_hidden_size;
    const std::string s = h + (is_deepseek(type_) ? "shared_experts." : "shared_expert.");
    param(p + "shared_expert.gate_up_proj.weight", {2 * Fs, d}).parts = {{s + "gate_proj.weight", {Fs, d}},
                                                                         {s + "up_proj.weight", {Fs, d}}};
    param(p + "shared_expert.down_proj.weight", {d, Fs}).parts = {{s + "down_proj.weight", {d, Fs}}};
  }
  if (e.shared_expert_gate)
    param(p + "shared_expert_gate.weight", {1, d}).parts = {{h + "shared_expert_gate.weight", {1, d}}};
}

void HfNameMap::add_layer(const std::string& hf, const std::string& ours, bool moe) {
  const int64_t d = m_.hidden_size;
  param(ours + "input_layernorm.weight", {d}).parts = {{hf + "input_layernorm.weight", {d}}};
  add_attention(hf, ours);
  param(ours + "post_attention_layernorm.weight", {d}).parts = {
      {hf + "post_attention_layernorm.weight", {d}}};
  add_mlp(hf, ours, moe);
}

HfNameMap::HfNameMap(const ModelConfig& m, const std::string& model_type, const HfMapOptions& o)
    : m_(m), type_(model_type), o_(o) {
  const int64_t d = m.hidden_size, v = m.vocab_size, L = m.num_layers;
  PRIMUS_CHECK(!m.moe.enabled() || static_cast<int64_t>(m.moe.layer_is_moe.size()) == L,
               "HF name map: {} MoE layer flags for {} layers", m.moe.layer_is_moe.size(), L);
  PRIMUS_CHECK(m.mtp_num_layers == 0 || model_type == "deepseek_v3",
               "HF name map: multi-token prediction layers exist only in deepseek_v3, not {}", model_type);
  param("embed_tokens.weight", {v, d}).parts = {{"model.embed_tokens.weight", {v, d}}};
  for (int64_t l = 0; l < L; ++l)
    add_layer(fmt::format("model.layers.{}.", l), fmt::format("layers.{}.", l), m.moe.is_moe_layer(l));
  param("norm.weight", {d}).parts = {{"model.norm.weight", {d}}};
  const bool tied = !m.untie_embeddings_and_output_weights;
  if (!tied) {
    param("lm_head.weight", {v, d}).parts = {{"lm_head.weight", {v, d}}};
  } else {
    // Some tied checkpoints store the head anyway; it must then equal the embedding. Not written back.
    entries_.push_back(
        HfMapEntry{HfMapKind::kAlias, "embed_tokens.weight", {v, d}, {{"lm_head.weight", {v, d}}}, false});
  }
  for (int64_t k = 0; k < m.mtp_num_layers; ++k) {
    const std::string hf = fmt::format("model.layers.{}.", L + k), ours = fmt::format("mtp.{}.", k);
    param(ours + "enorm.weight", {d}).parts = {{hf + "enorm.weight", {d}}};
    param(ours + "hnorm.weight", {d}).parts = {{hf + "hnorm.weight", {d}}};
    param(ours + "eh_proj.weight", {d, 2 * d}).parts = {{hf + "eh_proj.weight", {d, 2 * d}}};
    entries_.push_back(HfMapEntry{
        HfMapKind::kAlias, "embed_tokens.weight", {v, d}, {{hf + "embed_tokens.weight", {v, d}}}, true});
    add_layer(hf, ours + "layer.", m.moe.is_moe_layer(L - 1));
    param(ours + "final_layernorm.weight", {d}).parts = {{hf + "shared_head.norm.weight", {d}}};
    entries_.push_back(HfMapEntry{HfMapKind::kAlias,
                                  tied ? "embed_tokens.weight" : "lm_head.weight",
                                  {v, d},
                                  {{hf + "shared_head.head.weight", {v, d}}},
                                  true});
  }
}

}  // namespace primus::ckpt
