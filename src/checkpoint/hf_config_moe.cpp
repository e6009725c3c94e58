// config.json <-> ModelConfig for the mixture-of-experts families (reference.md §1.4, "Routing semantics to
// mirror"): mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3. Each family's routing is mapped onto our
// router (ops/moe_router.h) only where the two compute the same function; anything else is refused naming
// the key:
//   mixtral, qwen*_moe norm_topk_prob true : softmax, top-k, renormalise == top-k of the logits, softmax over
//                                            the k (pre_softmax false)
//   qwen*_moe norm_topk_prob false          : softmax over all, top-k, not renormalised (pre_softmax true)
//   deepseek_v2 greedy                      : as above, x routed_scaling_factor
//   deepseek_v2 group_limited_greedy        : groups ranked by their best expert (max); our router ranks by
//                                            the sum of the top topk/topk_group, equal only when
//                                            num_experts_per_tok == topk_group
//   deepseek_v3 noaux_tc                    : sigmoid + e_score_correction_bias for selection, groups ranked
//   by
//                                            the sum of their top 2 (ours: top topk/topk_group, so
//                                            num_experts_per_tok == 2 x topk_group), weights the unbiased
//                                            sigmoid, renormalised (norm_topk_prob), x routed_scaling_factor
// The balancing-loss coefficient (router_aux_loss_coef, aux_loss_alpha) is taken as Megatron's
// moe_aux_loss_coeff, as Megatron-Bridge does (HF's Switch loss is num_experts_per_tok times Megatron's for
// the same coefficient; the loss only matters for training).
#include <fmt/format.h>

#include <set>

#include "checkpoint/hf_config.h"
#include "core/error.h"

namespace primus::ckpt::detail {

namespace {

std::vector<char> qwen_pattern(int64_t layers, int64_t step, const std::set<int64_t>& mlp_only) {
  std::vector<char> out(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) out[i] = !mlp_only.count(i) && (i + 1) % step == 0;
  return out;
}

std::vector<char> deepseek_pattern(int64_t layers, int64_t first_dense, int64_t freq) {
  std::vector<char> out(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) out[i] = i >= first_dense && i % freq == 0;
  return out;
}

std::set<int64_t> int_set(const nlohmann::json& c, const char* key, int64_t layers, const std::string& what) {
  std::set<int64_t> out;
  if (!c.contains(key) || c[key].is_null()) return out;
  if (!c[key].is_array()) bad_config(what, fmt::format("'{}' must be a list of layer indices", key));
  for (const auto& v : c[key]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= layers)
      bad_config(what, fmt::format("'{}' entry {} is not a layer index in [0, {})", key, v.dump(), layers));
    out.insert(v.get<int64_t>());
  }
  return out;
}

std::string str_or(const nlohmann::json& c, const char* key, const std::string& def) {
  return c.contains(key) && c[key].is_string() ? c[key].get<std::string>() : def;
}

// DeepSeek's routed experts and their routing (the model's MoE layers).
void read_deepseek_routing(const nlohmann::json& c, HfModelInfo& info, const std::string& what) {
  ModelConfig& m = info.model;
  MoeConfig& e = m.moe;
  const bool v3 = info.model_type == "deepseek_v3";
  e.num_experts = req_int(c, "n_routed_experts", what);
  e.topk = req_int(c, "num_experts_per_tok", what);
  e.ffn_hidden_size = req_int(c, "moe_intermediate_size", what);
  if (!c.contains("n_shared_experts"))
    bad_config(what,
               "n_shared_experts is missing (transformers' default differs between versions; give it, "
               "or null for none)");
  e.shared_ffn_hidden_size = opt_int(c, "n_shared_experts", 0, what) * e.ffn_hidden_size;
  const int64_t first_dense = opt_int(c, "first_k_dense_replace", 0, what);
  const int64_t freq = opt_int(c, "moe_layer_freq", 1, what);
  if (freq < 1) bad_config(what, "moe_layer_freq must be >= 1");
  e.layer_is_moe = deepseek_pattern(m.num_layers, first_dense, freq);

  const std::string method = str_or(c, "topk_method", v3 ? "noaux_tc" : "greedy");
  const std::string scoring = str_or(c, "scoring_func", v3 ? "sigmoid" : "softmax");
  const int64_t n_group = std::max<int64_t>(1, opt_int(c, "n_group", 1, what));
  const int64_t topk_group = std::max<int64_t>(1, opt_int(c, "topk_group", 1, what));
  const bool norm = opt_bool(c, "norm_topk_prob", false);
  e.topk_scaling_factor = opt_number(c, "routed_scaling_factor", 1.0, what);
  if (e.num_experts % n_group != 0)
    bad_config(what, fmt::format("n_group {} does not divide n_routed_experts {}", n_group, e.num_experts));
  if (topk_group > n_group)
    bad_config(what, fmt::format("topk_group {} is more than n_group {}", topk_group, n_group));
  // Groups restrict the choice only when some are dropped.
  const bool grouped = n_group > 1 && topk_group < n_group;
  if (!v3) {
    if (scoring != "softmax")
      bad_config(what, fmt::format("scoring_func '{}' is not supported for deepseek_v2 (softmax)", scoring));
    if (norm && e.topk > 1)
      bad_config(
          what, "norm_topk_prob: true is not supported for deepseek_v2",
          "DeepSeek's original code then renormalises without routed_scaling_factor, transformers ignores "
          "the flag; refusing to pick one");
    e.score_function = "softmax";
    e.pre_softmax = true;
    e.normalize_topk = false;
    if (method == "group_limited_greedy") {
      if (grouped && e.topk != topk_group)
        bad_config(
            what,
            fmt::format("topk_method group_limited_greedy with num_experts_per_tok {} and topk_group {} is "
                        "not supported",
                        e.topk, topk_group),
            "it ranks groups by their best expert; our router ranks them by the sum of their top "
            "num_experts_per_tok / topk_group experts, the same only when the two are equal");
    } else if (method != "greedy") {
      bad_config(what, fmt::format("topk_method '{}' is not supported for deepseek_v2 (greedy, "
                                   "group_limited_greedy)",
                                   method));
    }
    if (method == "group_limited_greedy" && grouped) {
      e.num_groups = n_group;
      e.group_topk = topk_group;
    }
  } else {
    if (method != "noaux_tc")
      bad_config(
          what, fmt::format("topk_method '{}' is not supported for deepseek_v3 (noaux_tc)", method),
          "transformers routes every deepseek_v3 model the noaux_tc way; other methods are DeepSeek-V2's");
    if (scoring != "sigmoid")
      bad_config(what, fmt::format("scoring_func '{}' is not supported for deepseek_v3 (sigmoid)", scoring));
    if (norm && e.topk == 1)
      bad_config(
          what, "norm_topk_prob: true with num_experts_per_tok 1 is not supported",
          "the renormalised weight is then 1; our router keeps the single sigmoid score (Megatron's rule)");
    e.score_function = "sigmoid";
    e.pre_softmax = false;
    e.normalize_topk = norm;
    e.expert_bias = true;  // e_score_correction_bias
    if (grouped) {
      if (e.topk != 2 * topk_group)
        bad_config(
            what,
            fmt::format("noaux_tc groups with num_experts_per_tok {} and topk_group {} are not supported",
                        e.topk, topk_group),
            "noaux_tc ranks groups by the sum of their top 2 experts; our router by the sum of the top "
            "num_experts_per_tok / topk_group, the same only when that is 2");
      e.num_groups = n_group;
      e.group_topk = topk_group;
    }
  }
  if (e.num_groups > 0 && e.topk > e.group_topk * (e.num_experts / e.num_groups))
    bad_config(what, fmt::format("num_experts_per_tok {} does not fit in {} groups of {} experts", e.topk,
                                 e.group_topk, e.num_experts / e.num_groups));
  e.aux_loss_coeff = opt_number(c, "aux_loss_alpha", 0.0, what);
  e.load_balancing = opt_bool(c, "seq_aux", true) ? "seq_aux_loss" : "aux_loss";
  if (e.aux_loss_coeff == 0.0) e.load_balancing = "none";
}

// Whether a DeepSeek config.json has no mixture-of-experts layer: n_routed_experts absent or null (the test
// of DeepSeek's own modelling code) or every layer among the first_k_dense_replace dense ones (our export's
// way).
bool deepseek_is_dense(const nlohmann::json& c, int64_t layers, const std::string& what) {
  return !c.contains("n_routed_experts") || c["n_routed_experts"].is_null() ||
         opt_int(c, "first_k_dense_replace", 0, what) >= layers;
}

void read_deepseek(const nlohmann::json& c, HfModelInfo& info, const std::string& what) {
  ModelConfig& m = info.model;
  const bool v3 = info.model_type == "deepseek_v3";
  // A dense DeepSeek model is MLA over dense MLPs of intermediate_size: no MoE keys are read.
  if (!deepseek_is_dense(c, m.num_layers, what)) read_deepseek_routing(c, info, what);

  m.mla.enabled = true;
  m.mla.q_lora_rank = opt_int(c, "q_lora_rank", 0, what);
  m.mla.kv_lora_rank = req_int(c, "kv_lora_rank", what);
  m.mla.qk_head_dim = req_int(c, "qk_nope_head_dim", what);
  m.mla.qk_pos_emb_head_dim = req_int(c, "qk_rope_head_dim", what);
  m.mla.v_head_dim = req_int(c, "v_head_dim", what);
  if (m.mla.qk_pos_emb_head_dim % 2 != 0)
    bad_config(what, fmt::format("qk_rope_head_dim {} must be even", m.mla.qk_pos_emb_head_dim));
  m.kv_channels = m.mla.v_head_dim;
  m.num_query_groups = m.num_attention_heads;
  m.mtp_num_layers = v3 ? opt_int(c, "num_nextn_predict_layers", 0, what) : 0;
  info.rope_interleaved = !v3 || opt_bool(c, "rope_interleave", true);
}

}  // namespace

void read_moe_config(const nlohmann::json& c, HfModelInfo& info, const std::string& what) {
  ModelConfig& m = info.model;
  MoeConfig& e = m.moe;
  const std::string& type = info.model_type;
  if (type == "deepseek_v2" || type == "deepseek_v3") {
    read_deepseek(c, info, what);
    if (!e.enabled()) return;  // dense: MLA over dense MLPs
  } else if (type == "mixtral") {
    e.num_experts = req_int(c, "num_local_experts", what);
    e.topk = req_int(c, "num_experts_per_tok", what);
    e.ffn_hidden_size = m.ffn_hidden_size;  // intermediate_size is the experts' width; no dense layers
    e.layer_is_moe.assign(static_cast<size_t>(m.num_layers), 1);
    e.pre_softmax = false;
    if (opt_number(c, "router_jitter_noise", 0.0, what) != 0.0)
      bad_config(what, "router_jitter_noise is not supported (0 is)");
    e.aux_loss_coeff = opt_number(c, "router_aux_loss_coef", 0.0, what);
  } else {  // qwen2_moe, qwen3_moe
    // Qwen's key is num_experts; transformers 5 can save Qwen3-MoE's as num_local_experts (its attribute map;
    // seen on the device with transformers 5.17): accept either, and both only when they agree.
    const bool has_local = c.contains("num_local_experts") && !c["num_local_experts"].is_null();
    const bool has_qwen = c.contains("num_experts") && !c["num_experts"].is_null();
    e.num_experts = req_int(c, has_qwen || !has_local ? "num_experts" : "num_local_experts", what);
    if (has_qwen && has_local && req_int(c, "num_local_experts", what) != e.num_experts)
      bad_config(what, fmt::format("num_experts {} and num_local_experts {} disagree", e.num_experts,
                                   req_int(c, "num_local_experts", what)));
    e.topk = req_int(c, "num_experts_per_tok", what);
    e.ffn_hidden_size = req_int(c, "moe_intermediate_size", what);
    const int64_t step = opt_int(c, "decoder_sparse_step", 1, what);
    if (step < 1) bad_config(what, "decoder_sparse_step must be >= 1");
    e.layer_is_moe = qwen_pattern(m.num_layers, step, int_set(c, "mlp_only_layers", m.num_layers, what));
    // norm_topk_prob: softmax, top-k, renormalise == top-k of the logits then softmax over the k.
    e.pre_softmax = !opt_bool(c, "norm_topk_prob", false);
    e.aux_loss_coeff = opt_number(c, "router_aux_loss_coef", 0.0, what);
    if (type == "qwen2_moe") {
      e.shared_ffn_hidden_size = req_int(c, "shared_expert_intermediate_size", what);
      e.shared_expert_gate = true;  // Qwen2-MoE always gates its shared expert
    }
  }
  if (e.topk > e.num_experts)
    bad_config(what,
               fmt::format("num_experts_per_tok {} is more than the {} experts", e.topk, e.num_experts));
  bool any = false;
  for (char x : e.layer_is_moe) any = any || x;
  if (!any) bad_config(what, "the MoE layer keys make no layer a mixture of experts");
  if (type != "deepseek_v2" && type != "deepseek_v3")
    e.load_balancing = e.aux_loss_coeff > 0 ? "aux_loss" : "none";
}

namespace {

[[noreturn]] void cannot(const std::string& type, const std::string& why) {
  throw ConfigError(fmt::format("the model cannot be exported as {}: {}", type, why));
}

std::vector<int64_t> dense_layers(const MoeConfig& e) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < e.layer_is_moe.size(); ++i)
    if (!e.layer_is_moe[i]) out.push_back(static_cast<int64_t>(i));
  return out;
}

// Softmax routing our way == one of HF's: returns norm_topk_prob.
bool softmax_norm_topk(const MoeConfig& e, const std::string& type) {
  if (e.score_function != "softmax") cannot(type, "its router uses sigmoid scores (softmax needed)");
  if (e.num_groups > 0) cannot(type, "it uses group-limited routing");
  if (e.topk_scaling_factor != 1.0)
    cannot(type, fmt::format("its routed weights are scaled by {}", e.topk_scaling_factor));
  if (e.expert_bias) cannot(type, "it has an expert bias (aux-loss-free balancing)");
  return !e.pre_softmax || e.normalize_topk;
}

void write_deepseek_routing(const ModelConfig& m, const std::string& type, const nlohmann::json& base,
                            nlohmann::ordered_json& j) {
  const MoeConfig& e = m.moe;
  const bool v3 = type == "deepseek_v3";
  if (e.shared_expert_gate) cannot(type, "its shared expert is gated (Qwen2-MoE's)");
  if (e.shared_ffn_hidden_size % e.ffn_hidden_size != 0)
    cannot(type, fmt::format("the shared expert width {} is not a multiple of the expert width {}",
                             e.shared_ffn_hidden_size, e.ffn_hidden_size));
  // Layers: [dense] * first_k_dense_replace, then MoE every moe_layer_freq-th (the original's freq if it
  // reproduces the pattern, else 1).
  int64_t first = 0;
  while (first < m.num_layers && !e.layer_is_moe[first]) ++first;
  int64_t freq = 1;
  if (base.is_object() && base.contains("moe_layer_freq") && base["moe_layer_freq"].is_number_integer())
    freq = std::max<int64_t>(1, base["moe_layer_freq"].get<int64_t>());
  if (deepseek_pattern(m.num_layers, first, freq) != e.layer_is_moe) freq = 1;
  if (deepseek_pattern(m.num_layers, first, freq) != e.layer_is_moe)
    cannot(type, "its MoE layers are not the first_k_dense_replace / moe_layer_freq pattern");
  j["n_routed_experts"] = e.num_experts;
  j["num_experts_per_tok"] = e.topk;
  j["moe_intermediate_size"] = e.ffn_hidden_size;
  j["n_shared_experts"] = e.shared_ffn_hidden_size > 0
                              ? nlohmann::json(e.shared_ffn_hidden_size / e.ffn_hidden_size)
                              : nlohmann::json(nullptr);
  j["first_k_dense_replace"] = first;
  j["moe_layer_freq"] = freq;
  j["routed_scaling_factor"] = e.topk_scaling_factor;
  // Unused group keys keep the original's values (V2-Lite writes n_group 1 with greedy routing).
  auto base_or = [&](const char* key, int64_t def) {
    return base.is_object() && base.contains(key) && base[key].is_number_integer() ? base[key].get<int64_t>()
                                                                                   : def;
  };
  if (!v3) {
    if (e.score_function != "softmax" || !e.pre_softmax || e.normalize_topk || e.expert_bias)
      cannot(type, "its router is not softmax over all experts, top-k, unnormalised, without expert bias");
    if (e.num_groups > 0 && e.topk != e.group_topk)
      cannot(type,
             "group_limited_greedy ranks groups by their best expert, which our routing equals only when "
             "moe_router_topk == moe_router_group_topk");
    j["topk_method"] = e.num_groups > 0 ? "group_limited_greedy" : "greedy";
    j["n_group"] = e.num_groups > 0 ? e.num_groups : base_or("n_group", 1);
    j["topk_group"] = e.num_groups > 0 ? e.group_topk : base_or("topk_group", 1);
    j["norm_topk_prob"] = false;
    j["scoring_func"] = "softmax";
    if (m.mtp_num_layers > 0) cannot(type, "it has multi-token-prediction layers (deepseek_v3 has them)");
  } else {
    if (e.score_function != "sigmoid" || e.pre_softmax)
      cannot(type, "its router does not use sigmoid scores");
    if (e.num_groups > 0 && e.topk != 2 * e.group_topk)
      cannot(type,
             "noaux_tc ranks groups by the sum of their top 2 experts, which our routing equals only when "
             "moe_router_topk == 2 x moe_router_group_topk");
    j["topk_method"] = "noaux_tc";
    j["n_group"] = e.num_groups > 0 ? e.num_groups : 1;
    j["topk_group"] = e.num_groups > 0 ? e.group_topk : 1;
    j["norm_topk_prob"] = e.normalize_topk && e.topk > 1;
    j["scoring_func"] = "sigmoid";
    j["num_nextn_predict_layers"] = m.mtp_num_layers;
    j["rope_interleave"] = true;  // the export interleaves the RoPE rows again
  }
  j["aux_loss_alpha"] = e.load_balancing == "none" ? 0.0 : e.aux_loss_coeff;
  j["seq_aux"] = e.load_balancing == "seq_aux_loss";
}

void write_deepseek(const ModelConfig& m, const std::string& type, const nlohmann::json& base,
                    nlohmann::ordered_json& j) {
  const bool v3 = type == "deepseek_v3";
  if (m.moe.enabled()) {
    write_deepseek_routing(m, type, base, j);
  } else {
    // MLA over dense MLPs: every layer below first_k_dense_replace, which DeepSeek's code and transformers
    // build as a dense MLP of intermediate_size. The expert keys are left out: transformers 5 types them as
    // integers (null is refused: device check 2026-12-07, transformers 5.17) and its defaults are inert here.
    j["first_k_dense_replace"] = m.num_layers;
    j["moe_layer_freq"] = 1;
    if (v3) {
      j["num_nextn_predict_layers"] = m.mtp_num_layers;
      j["rope_interleave"] = true;
    } else if (m.mtp_num_layers > 0) {
      cannot(type, "it has multi-token-prediction layers (deepseek_v3 has them)");
    }
  }
  j["q_lora_rank"] = m.mla.q_lora_rank > 0 ? nlohmann::json(m.mla.q_lora_rank) : nlohmann::json(nullptr);
  j["kv_lora_rank"] = m.mla.kv_lora_rank;
  j["qk_nope_head_dim"] = m.mla.qk_head_dim;
  j["qk_rope_head_dim"] = m.mla.qk_pos_emb_head_dim;
  j["v_head_dim"] = m.mla.v_head_dim;
}

}  // namespace

void write_moe_config(const ModelConfig& m, const std::string& type, const nlohmann::json& base,
                      nlohmann::ordered_json& j) {
  const MoeConfig& e = m.moe;
  const double aux = e.load_balancing == "none" ? 0.0 : e.aux_loss_coeff;
  if (type == "deepseek_v2" || type == "deepseek_v3") {
    write_deepseek(m, type, base, j);
    return;
  }
  if (e.load_balancing == "seq_aux_loss") cannot(type, "it uses the per-sequence balancing loss");
  if (m.mla.enabled || m.mtp_num_layers > 0) cannot(type, "it uses multi-latent attention or MTP");
  if (type == "mixtral") {
    if (!dense_layers(e).empty()) cannot(type, "it has dense layers (every Mixtral layer is MoE)");
    if (e.shared_ffn_hidden_size > 0) cannot(type, "it has a shared expert");
    if (!softmax_norm_topk(e, type))
      cannot(type, "its weights are not renormalised over the top k (Mixtral always renormalises)");
    j["intermediate_size"] = e.ffn_hidden_size;
    j["num_local_experts"] = e.num_experts;
    j["num_experts_per_tok"] = e.topk;
    j["router_aux_loss_coef"] = aux;
    j["router_jitter_noise"] = 0.0;
    return;
  }
  // qwen2_moe / qwen3_moe
  if (type == "qwen2_moe" && (e.shared_ffn_hidden_size == 0 || !e.shared_expert_gate))
    cannot(type,
           "Qwen2-MoE layers always have a shared expert behind a sigmoid gate (moe_shared_expert_gate)");
  if (type == "qwen3_moe" && e.shared_ffn_hidden_size > 0) cannot(type, "it has a shared expert");
  j["num_experts"] = e.num_experts;
  j["num_experts_per_tok"] = e.topk;
  j["moe_intermediate_size"] = e.ffn_hidden_size;
  if (type == "qwen2_moe") j["shared_expert_intermediate_size"] = e.shared_ffn_hidden_size;
  j["norm_topk_prob"] = softmax_norm_topk(e, type);
  // The original's decoder_sparse_step / mlp_only_layers when they give the same layers, else step 1 and
  // every dense layer listed.
  bool kept = false;
  if (base.is_object() && base.contains("decoder_sparse_step") &&
      base["decoder_sparse_step"].is_number_integer()) {
    const int64_t step = std::max<int64_t>(1, base["decoder_sparse_step"].get<int64_t>());
    std::set<int64_t> only;
    if (base.contains("mlp_only_layers") && base["mlp_only_layers"].is_array())
      for (const auto& v : base["mlp_only_layers"])
        if (v.is_number_integer()) only.insert(v.get<int64_t>());
    if (qwen_pattern(m.num_layers, step, only) == e.layer_is_moe) {
      j["decoder_sparse_step"] = step;
      j["mlp_only_layers"] =
          base.contains("mlp_only_layers") ? base["mlp_only_layers"] : nlohmann::json::array();
      kept = true;
    }
  }
  if (!kept) {
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = dense_layers(e);
  }
  j["router_aux_loss_coef"] = aux;
}

std::string default_moe_model_type(const ModelConfig& m) {
  const MoeConfig& e = m.moe;
  if (m.mla.enabled && !e.enabled()) return "deepseek_v3";  // MLA over dense MLPs (V3's MTP layers too)
  if (m.mla.enabled) return e.score_function == "sigmoid" ? "deepseek_v3" : "deepseek_v2";
  if (e.shared_expert_gate) return "qwen2_moe";
  if (m.qk_layernorm) return "qwen3_moe";
  if (e.shared_ffn_hidden_size > 0)
    throw ConfigError("no Hugging Face family has an ungated shared expert with standard attention",
                      "Qwen2-MoE gates it (moe_shared_expert_gate); DeepSeek's needs multi-latent attention");
  return "mixtral";
}

std::string moe_preset_yaml(const ModelConfig& m) {
  const MoeConfig& e = m.moe;
  std::string y;
  if (e.enabled()) {
    std::string pattern;
    for (char x : e.layer_is_moe) pattern += std::string(pattern.empty() ? "" : ", ") + (x ? "1" : "0");
    y += fmt::format("num_experts: {}\nmoe_router_topk: {}\nmoe_ffn_hidden_size: {}\nmoe_layer_freq: [{}]\n",
                     e.num_experts, e.topk, e.ffn_hidden_size, pattern);
    if (e.shared_ffn_hidden_size > 0)
      y += fmt::format("moe_shared_expert_intermediate_size: {}\nmoe_shared_expert_gate: {}\n",
                       e.shared_ffn_hidden_size, e.shared_expert_gate);
    y += fmt::format("moe_router_score_function: {}\nmoe_router_pre_softmax: {}\n", e.score_function,
                     e.pre_softmax);
    if (e.num_groups > 0)
      y += fmt::format("moe_router_num_groups: {}\nmoe_router_group_topk: {}\n", e.num_groups, e.group_topk);
    y += fmt::format("moe_router_topk_scaling_factor: {}\nmoe_router_enable_expert_bias: {}\n",
                     e.topk_scaling_factor, e.expert_bias);
    y += fmt::format("moe_router_load_balancing_type: {}\nmoe_aux_loss_coeff: {}\n", e.load_balancing,
                     e.aux_loss_coeff);
    // Megatron renormalises sigmoid scores when k > 1 and never softmax ones; the other cases have no key.
    const bool megatron_norm = e.score_function == "sigmoid" && e.topk > 1;
    const bool matters = e.score_function == "sigmoid" || e.pre_softmax;
    if (matters && e.normalize_topk != megatron_norm)
      y += fmt::format(
          "# NOTE: the checkpoint's router {} its top-k weights, which Megatron keys cannot express (the "
          "checkpoint's\n# state.json keeps it for `load`).\n",
          e.normalize_topk ? "renormalises" : "does not renormalise");
  }
  if (m.mla.enabled) {
    y += "multi_latent_attention: true\n";
    y += m.mla.q_lora_rank > 0 ? fmt::format("q_lora_rank: {}\n", m.mla.q_lora_rank) : "q_lora_rank: null\n";
    y += fmt::format("kv_lora_rank: {}\nqk_head_dim: {}\nqk_pos_emb_head_dim: {}\nv_head_dim: {}\n",
                     m.mla.kv_lora_rank, m.mla.qk_head_dim, m.mla.qk_pos_emb_head_dim, m.mla.v_head_dim);
  }
  if (m.mla.enabled && m.mla.yarn)
    y += fmt::format(
        "rope_type: yarn\nrotary_scaling_factor: {}\noriginal_max_position_embeddings: {}\nbeta_fast: {}\n"
        "beta_slow: {}\nmscale: {}\nmscale_all_dim: {}\n",
        m.mla.rotary_scaling_factor, m.mla.original_max_position, m.mla.beta_fast, m.mla.beta_slow,
        m.mla.mscale, m.mla.mscale_all_dim);
  else if (m.mla.enabled)
    y += "rope_type: rope\n";
  if (m.mtp_num_layers > 0) y += fmt::format("mtp_num_layers: {}\n", m.mtp_num_layers);
  return y;
}

}  // namespace primus::ckpt::detail
