#include "checkpoint/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"

namespace primus::ckpt {

namespace detail {

void bad_config(const std::string& what, const std::string& msg, const std::string& hint) {
  throw Error(ErrorKind::kConfig, fmt::format("{}: {}", what, msg), {}, hint);
}

int64_t req_int(const nlohmann::json& c, const char* key, const std::string& what) {
  if (!c.contains(key) || !c[key].is_number_integer())
    bad_config(what, fmt::format("'{}' must be an integer", key));
  const int64_t v = c[key].get<int64_t>();
  if (v <= 0) bad_config(what, fmt::format("'{}' must be positive, got {}", key, v));
  return v;
}

int64_t opt_int(const nlohmann::json& c, const char* key, int64_t def, const std::string& what) {
  if (!c.contains(key) || c[key].is_null()) return def;
  if (!c[key].is_number_integer() || c[key].get<int64_t>() < 0)
    bad_config(what, fmt::format("'{}' must be a non-negative integer or null, got {}", key, c[key].dump()));
  return c[key].get<int64_t>();
}

double req_number(const nlohmann::json& c, const char* key, const std::string& what) {
  if (!c.contains(key) || !c[key].is_number()) bad_config(what, fmt::format("'{}' must be a number", key));
  return c[key].get<double>();
}

double opt_number(const nlohmann::json& c, const char* key, double def, const std::string& what) {
  if (!c.contains(key) || c[key].is_null()) return def;
  return req_number(c, key, what);
}

bool opt_bool(const nlohmann::json& c, const char* key, bool def) {
  return c.contains(key) && c[key].is_boolean() ? c[key].get<bool>() : def;
}

}  // namespace detail

using detail::bad_config;
using detail::opt_bool;
using detail::opt_number;
using detail::req_int;
using detail::req_number;

namespace {

const std::map<std::string, const char*>& architectures() {
  static const std::map<std::string, const char*> k = {{"llama", "LlamaForCausalLM"},
                                                       {"qwen2", "Qwen2ForCausalLM"},
                                                       {"qwen3", "Qwen3ForCausalLM"},
                                                       {"mixtral", "MixtralForCausalLM"},
                                                       {"qwen2_moe", "Qwen2MoeForCausalLM"},
                                                       {"qwen3_moe", "Qwen3MoeForCausalLM"},
                                                       {"deepseek_v2", "DeepseekV2ForCausalLM"},
                                                       {"deepseek_v3", "DeepseekV3ForCausalLM"}};
  return k;
}

bool is_mla_type(const std::string& t) {
  return t == "deepseek_v2" || t == "deepseek_v3";
}

// rope_scaling (older) or rope_parameters (newer): the scaling type and its numbers. YaRN only for the
// DeepSeek families (the model implements it with multi-latent attention).
void read_rope_scaling(const nlohmann::json& s, ModelConfig& m, bool allow_yarn, const std::string& what) {
  if (s.is_null()) return;
  if (!s.is_object()) bad_config(what, "rope scaling must be an object or null");
  const std::string type = s.value("rope_type", s.value("type", std::string("default")));
  const std::string w = what + " rope scaling";
  if (type == "default") return;
  if (type == "llama3") {
    m.use_rope_scaling = true;
    m.rope_scaling_factor = req_number(s, "factor", w);
    m.rope_low_freq_factor = req_number(s, "low_freq_factor", w);
    m.rope_high_freq_factor = req_number(s, "high_freq_factor", w);
    m.rope_original_max_position = req_int(s, "original_max_position_embeddings", w);
    return;
  }
  if (type == "yarn" && allow_yarn) {
    // Only the parameters DeepSeek's YaRN uses (reference.md §1.5); anything that changes it otherwise
    // (an explicit attention_factor, truncate: false) is refused rather than ignored.
    static const std::set<std::string> known = {
        "type",     "rope_type",       "rope_theta",
        "factor",   "beta_fast",       "beta_slow",
        "mscale",   "mscale_all_dim",  "original_max_position_embeddings",
        "truncate", "attention_factor"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!known.count(it.key())) bad_config(w, fmt::format("yarn key '{}' is not supported", it.key()));
    if (s.contains("attention_factor") && !s["attention_factor"].is_null())
      bad_config(w, "yarn attention_factor is not supported (DeepSeek's mscale / mscale_all_dim are)");
    if (s.contains("truncate") && !opt_bool(s, "truncate", true))
      bad_config(w, "yarn truncate: false is not supported (the ramp bounds are floored / ceiled)");
    m.mla.yarn = true;
    m.mla.rotary_scaling_factor = req_number(s, "factor", w);
    m.mla.original_max_position = req_int(s, "original_max_position_embeddings", w);
    m.mla.beta_fast = opt_number(s, "beta_fast", 32.0, w);
    m.mla.beta_slow = opt_number(s, "beta_slow", 1.0, w);
    m.mla.mscale = opt_number(s, "mscale", 1.0, w);
    m.mla.mscale_all_dim = opt_number(s, "mscale_all_dim", 0.0, w);
    return;
  }
  bad_config(what, fmt::format("rope type '{}' is not supported (default and llama3{})", type,
                               allow_yarn ? ", yarn" : "; yarn only for deepseek_v2/v3"));
}

std::string dtype_of(const nlohmann::json& c) {
  for (const char* k : {"torch_dtype", "dtype"})
    if (c.contains(k) && c[k].is_string()) return c[k].get<std::string>();
  return "";
}

HfQuantization read_quantization(const nlohmann::json& c, const std::string& what) {
  HfQuantization q;
  if (!c.contains("quantization_config") || c["quantization_config"].is_null()) return q;
  const nlohmann::json& j = c["quantization_config"];
  const std::string w = what + " quantization_config";
  if (!j.is_object()) bad_config(w, "must be an object");
  const std::string method = j.value("quant_method", std::string());
  const std::string fmt_name = j.value("fmt", std::string("e4m3"));
  if (method != "fp8" || fmt_name != "e4m3")
    bad_config(w, fmt::format("quant_method '{}' fmt '{}' is not supported", method, fmt_name),
               "block-quantised FP8 (quant_method fp8, fmt e4m3, DeepSeek-V3's release) is; dequantise other "
               "formats to bf16 first");
  if (!j.contains("weight_block_size") || !j["weight_block_size"].is_array() ||
      j["weight_block_size"].size() != 2 || !j["weight_block_size"][0].is_number_integer() ||
      !j["weight_block_size"][1].is_number_integer() || j["weight_block_size"][0].get<int64_t>() <= 0 ||
      j["weight_block_size"][1].get<int64_t>() <= 0)
    bad_config(w, "weight_block_size must be [rows, columns] (per-tensor FP8 scales are not supported)");
  q.fp8 = true;
  q.block_rows = j["weight_block_size"][0].get<int64_t>();
  q.block_cols = j["weight_block_size"][1].get<int64_t>();
  return q;
}

}  // namespace

bool is_moe_model_type(const std::string& t) {
  return t == "mixtral" || t == "qwen2_moe" || t == "qwen3_moe" || is_mla_type(t);
}

std::string default_model_type(const ModelConfig& m) {
  if (m.moe.enabled() || m.mla.enabled) return detail::default_moe_model_type(m);
  if (m.qk_layernorm) return "qwen3";
  if (m.add_qkv_bias) return "qwen2";
  return "llama";
}

HfModelInfo model_config_from_hf(const nlohmann::json& c, const std::string& what) {
  if (!c.is_object()) bad_config(what, "config.json is not a JSON object");
  HfModelInfo info;
  info.model_type = c.value("model_type", std::string());
  const std::string& type = info.model_type;
  if (!architectures().count(type))
    bad_config(what, fmt::format("model_type '{}' is not supported", type),
               "supported: llama, qwen2, qwen3 (dense); mixtral, qwen2_moe, qwen3_moe, deepseek_v2, "
               "deepseek_v3 (MoE)");
  const bool mla = is_mla_type(type);
  ModelConfig& m = info.model;
  m.family = type;
  // MlaConfig defaults to YaRN (Megatron's MLA default); an HF DeepSeek config has it only with a yarn
  // rope_scaling, which read_rope_scaling below turns on.
  m.mla.yarn = false;
  m.hidden_size = req_int(c, "hidden_size", what);
  m.ffn_hidden_size = req_int(c, "intermediate_size", what);
  m.num_layers = req_int(c, "num_hidden_layers", what);
  m.num_attention_heads = req_int(c, "num_attention_heads", what);
  m.num_query_groups = c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()
                           ? req_int(c, "num_key_value_heads", what)
                           : m.num_attention_heads;
  // DeepSeek's head sizes come from the MLA keys (hf_config_moe.cpp); transformers' head_dim there is the
  // RoPE part, not a head size.
  m.kv_channels = !mla && c.contains("head_dim") && !c["head_dim"].is_null()
                      ? req_int(c, "head_dim", what)
                      : m.hidden_size / m.num_attention_heads;
  m.vocab_size = req_int(c, "vocab_size", what);
  m.padded_vocab_size = m.vocab_size;
  m.make_vocab_size_divisible_by = 1;
  m.max_position_embeddings =
      c.contains("max_position_embeddings") ? req_int(c, "max_position_embeddings", what) : 4096;
  m.norm_epsilon = req_number(c, "rms_norm_eps", what);
  m.init_method_std = c.contains("initializer_range") ? req_number(c, "initializer_range", what) : 0.02;
  m.untie_embeddings_and_output_weights = !opt_bool(c, "tie_word_embeddings", false);
  m.swiglu = true;
  m.normalization = "RMSNorm";
  const std::string act = c.value("hidden_act", std::string("silu"));
  if (act != "silu")
    bad_config(what, fmt::format("hidden_act '{}' is not supported (only silu: SwiGLU)", act));
  if (!mla && m.num_attention_heads % m.num_query_groups != 0)
    bad_config(what, fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}",
                                 m.num_attention_heads, m.num_query_groups));
  if (opt_bool(c, "mlp_bias", false)) bad_config(what, "mlp_bias: true is not supported");

  // Biases: qwen2 always has q/k/v biases, qwen2_moe unless qkv_bias is false (newer transformers' key);
  // llama, qwen3 and qwen3_moe have q/k/v/o biases when attention_bias is set (the o_proj bias must then be
  // zero, which the weight loader checks). Mixtral and DeepSeek (with attention_bias, the MLA down
  // projections would carry biases) have none we could load.
  const bool attention_bias = opt_bool(c, "attention_bias", false);
  if (attention_bias && (type == "mixtral" || mla))
    bad_config(what, fmt::format("attention_bias: true is not supported for {}", type));
  m.add_qkv_bias = type == "qwen2" || (type == "qwen2_moe" && opt_bool(c, "qkv_bias", true)) ||
                   ((type == "llama" || type == "qwen3" || type == "qwen3_moe") && attention_bias);
  // Qwen 3's q/k norms; for DeepSeek's MLA, Megatron's qk_layernorm means the q / kv latent norms, which
  // every DeepSeek model has (and Megatron configs of MLA require).
  m.qk_layernorm = type == "qwen3" || type == "qwen3_moe" || is_mla_type(type);
  if (opt_bool(c, "use_sliding_window", false))
    bad_config(what, "use_sliding_window: true is not supported (full causal attention only)");
  if (type == "mixtral" && c.contains("sliding_window") && !c["sliding_window"].is_null())
    bad_config(what, fmt::format("sliding_window {} is not supported (full causal attention only; null is)",
                                 c["sliding_window"].dump()));
  if (c.contains("layer_types") && c["layer_types"].is_array())
    for (const auto& lt : c["layer_types"])
      if (!lt.is_string() || lt.get<std::string>() != "full_attention")
        bad_config(what,
                   fmt::format("layer_types entry {} is not supported (only full_attention)", lt.dump()));

  // Partial rotary: none of these families' attention applies it (see hf_config_from_model).
  for (const nlohmann::json* o : {&c, c.contains("rope_parameters") ? &c["rope_parameters"] : nullptr})
    if (o && o->is_object() && o->contains("partial_rotary_factor") &&
        !(*o)["partial_rotary_factor"].is_null() &&
        !((*o)["partial_rotary_factor"].is_number() && (*o)["partial_rotary_factor"].get<double>() == 1.0))
      bad_config(what, fmt::format("partial_rotary_factor {} is not supported for {} (its attention rotates "
                                   "the whole head)",
                                   (*o)["partial_rotary_factor"].dump(), type));
  // RoPE theta: exactly one value, from rope_theta and/or rope_parameters.rope_theta.
  std::optional<double> top, nested;
  if (c.contains("rope_theta") && !c["rope_theta"].is_null()) top = req_number(c, "rope_theta", what);
  const nlohmann::json params = c.contains("rope_parameters") ? c["rope_parameters"] : nlohmann::json();
  if (params.is_object() && params.contains("rope_theta"))
    nested = req_number(params, "rope_theta", what + " rope_parameters");
  if (!top && !nested)
    bad_config(
        what, "no RoPE theta: neither rope_theta nor rope_parameters.rope_theta is set",
        "refusing to guess a default (a wrong theta trains and evaluates silently wrong); add rope_theta");
  if (top && nested && *top != *nested)
    bad_config(what, fmt::format("ambiguous RoPE theta: rope_theta {} but rope_parameters.rope_theta {}",
                                 *top, *nested));
  m.rotary_base = top ? *top : *nested;
  if (!(m.rotary_base > 0) || !std::isfinite(m.rotary_base))
    bad_config(what, fmt::format("RoPE theta {} must be a positive number", m.rotary_base));
  if (params.is_object()) read_rope_scaling(params, m, mla, what);
  if (c.contains("rope_scaling")) {
    if ((m.use_rope_scaling || m.mla.yarn) && !c["rope_scaling"].is_null())
      bad_config(what, "both rope_scaling and rope_parameters describe a RoPE scaling; keep one");
    read_rope_scaling(c["rope_scaling"], m, mla, what);
  }
  if (is_moe_model_type(type)) detail::read_moe_config(c, info, what);
  info.quant = read_quantization(c, what);
  info.torch_dtype = dtype_of(c);
  return info;
}

nlohmann::ordered_json hf_config_from_model(const ModelConfig& m, const std::string& model_type,
                                            const std::string& dtype, const nlohmann::json& base) {
  if (!architectures().count(model_type))
    throw ConfigError(fmt::format("model type '{}' is not supported", model_type),
                      "llama, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3");
  const bool moe_type = is_moe_model_type(model_type), mla = is_mla_type(model_type);
  // DeepSeek's families also hold MLA over dense MLPs (no routed experts).
  if (m.moe.enabled() != moe_type && !(mla && m.mla.enabled && !m.moe.enabled()))
    throw ConfigError(
        fmt::format("the model {} experts but {} is a {} family", m.moe.enabled() ? "has" : "has no",
                    model_type, moe_type ? "mixture-of-experts" : "dense"),
        fmt::format("export as {}", default_model_type(m)));
  if (m.mla.enabled != mla)
    throw ConfigError(fmt::format("the model {} multi-latent attention but {} {}",
                                  m.mla.enabled ? "uses" : "does not use", model_type,
                                  mla ? "does" : "does not"));
  const bool qk_norm_type = model_type == "qwen3" || model_type == "qwen3_moe";
  // (With MLA, Megatron's qk_layernorm means the latent norms every DeepSeek model has, not q/k norms.)
  if (m.qk_layernorm && !qk_norm_type && !m.mla.enabled)
    throw ConfigError(fmt::format("the model has q/k norms (qk_layernorm), which {} does not; export as {}",
                                  model_type, moe_type ? "qwen3_moe" : "qwen3"));
  if (!m.qk_layernorm && qk_norm_type)
    throw ConfigError(
        fmt::format("{} has q/k norms but the model has none (qk_layernorm false)", model_type));
  if (m.add_qkv_bias && (model_type == "mixtral" || mla))
    throw ConfigError(fmt::format("the model has q/k/v biases, which {} does not", model_type));
  if (m.use_rope_scaling && mla)
    throw ConfigError(fmt::format("llama3 RoPE scaling cannot be expressed for {}", model_type));
  if (m.mtp_num_layers > 0 && model_type != "deepseek_v3")
    throw ConfigError(
        fmt::format("the model has {} multi-token-prediction layer(s), which only deepseek_v3 "
                    "expresses, not {}",
                    m.mtp_num_layers, model_type));
  // transformers' Llama / Qwen / Mixtral / DeepSeek classes rotate the whole head (their rotary helper
  // multiplies q by a cos of the rotary width: a narrower one does not broadcast).
  if (m.rotary_percent != 1.0)
    throw ConfigError(
        fmt::format("the model rotates {} of each head (rotary_percent), which {} does not "
                    "express (its attention rotates the whole head)",
                    m.rotary_percent, model_type));
  // Grok-2's soft-capping: none of the families we export has it (Gemma-2's final_logit_softcapping is
  // another family).
  if (m.final_logit_softcap > 0 || m.moe.router_softcap > 0)
    throw ConfigError(fmt::format("the model soft-caps its {} logits, which {} does not express",
                                  m.final_logit_softcap > 0 ? "output" : "router", model_type));
  // A base config.json of another family says nothing about this one: keep only its generic keys.
  const bool same_family = base.is_object() && base.value("model_type", std::string()) == model_type;

  nlohmann::ordered_json j;
  j["architectures"] = {architectures().at(model_type)};
  j["model_type"] = model_type;
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = m.ffn_hidden_size;
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_key_value_heads"] = mla ? m.num_attention_heads : m.num_query_groups;
  if (!mla) j["head_dim"] = m.kv_channels;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["rms_norm_eps"] = m.norm_epsilon;
  j["initializer_range"] = m.init_method_std;
  j["vocab_size"] = m.vocab_size;
  j["tie_word_embeddings"] = !m.untie_embeddings_and_output_weights;
  if (model_type == "llama" || model_type == "qwen3" || model_type == "qwen3_moe" || mla)
    j["attention_bias"] = m.add_qkv_bias;  // with a zero o_proj bias
  // qwen2_moe: transformers 4.x always builds q/k/v biases (a model without them exports zeros, the same
  // function); newer versions read qkv_bias, which an original config.json that has it keeps.
  if (model_type == "qwen2_moe")
    j["qkv_bias"] = m.add_qkv_bias || !(same_family && base.contains("qkv_bias"));
  if (model_type == "llama" || mla) j["mlp_bias"] = false;
  if (model_type == "qwen2" || model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    j["use_sliding_window"] = false;
    j["max_window_layers"] = m.num_layers;
  }
  if (model_type == "mixtral") j["sliding_window"] = nullptr;
  j["attention_dropout"] = 0.0;

  nlohmann::json scaling = nullptr;
  if (m.use_rope_scaling)
    scaling = {{"rope_type", "llama3"},
               {"factor", m.rope_scaling_factor},
               {"low_freq_factor", m.rope_low_freq_factor},
               {"high_freq_factor", m.rope_high_freq_factor},
               {"original_max_position_embeddings", m.rope_original_max_position}};
  if (m.mla.enabled && m.mla.yarn) {
    // DeepSeek's own configs spell the type "type"; follow the original when it did.
    const bool old_key = same_family && base.contains("rope_scaling") && base["rope_scaling"].is_object() &&
                         base["rope_scaling"].contains("type") && !base["rope_scaling"].contains("rope_type");
    scaling = {{old_key ? "type" : "rope_type", "yarn"},
               {"factor", m.mla.rotary_scaling_factor},
               {"original_max_position_embeddings", m.mla.original_max_position},
               {"beta_fast", m.mla.beta_fast},
               {"beta_slow", m.mla.beta_slow},
               {"mscale", m.mla.mscale},
               {"mscale_all_dim", m.mla.mscale_all_dim}};
  }
  const bool nested = base.is_object() && base.contains("rope_parameters") && !base.contains("rope_theta");
  if (nested) {
    nlohmann::json p = scaling.is_null() ? nlohmann::json{{"rope_type", "default"}} : scaling;
    if (p.contains("type")) {
      p["rope_type"] = p["type"];
      p.erase("type");
    }
    p["rope_theta"] = m.rotary_base;
    j["rope_parameters"] = p;
  } else {
    j["rope_theta"] = m.rotary_base;
    j["rope_scaling"] = scaling;
  }
  if (moe_type) detail::write_moe_config(m, model_type, same_family ? base : nlohmann::json(), j);
  // Newer transformers spell the weights' dtype `dtype`, older ones `torch_dtype`: follow the original.
  const bool new_dtype_key = base.is_object() && base.contains("dtype") && !base.contains("torch_dtype");
  j[new_dtype_key ? "dtype" : "torch_dtype"] = dtype;
  j["use_cache"] = true;
  // Keep the original's other keys (token ids, transformers_version, ...) unless we set them above; the
  // export is never quantised.
  static const std::set<std::string> kOwned = {"rope_theta", "rope_scaling", "rope_parameters",
                                               "dtype",      "torch_dtype",  "quantization_config"};
  static const std::set<std::string> kGeneric = {"bos_token_id", "eos_token_id", "pad_token_id",
                                                 "transformers_version"};
  if (base.is_object()) {
    for (auto it = base.begin(); it != base.end(); ++it) {
      if (j.contains(it.key()) || kOwned.count(it.key())) continue;
      if (same_family || kGeneric.count(it.key())) j[it.key()] = it.value();
    }
  }
  return j;
}

std::string model_preset_yaml(const ModelConfig& m, const std::string& source) {
  std::string y = fmt::format(
      "# Model preset written by `primus convert hf-to-primus` from {}.\n"
      "# Use it as `model:` of an experiment (or extend it); vocab_size and make_vocab_size_divisible_by: 1\n"
      "# keep the checkpoint's embedding rows.\n",
      source);
  y += "extends:\n  - llama_base.yaml\n";
  y += fmt::format("num_layers: {}\nhidden_size: {}\nffn_hidden_size: {}\nnum_attention_heads: {}\n",
                   m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads);
  y += fmt::format("group_query_attention: true\nnum_query_groups: {}\nkv_channels: {}\n", m.num_query_groups,
                   m.kv_channels);
  y += fmt::format("vocab_size: {}\nmake_vocab_size_divisible_by: 1\nmax_position_embeddings: {}\n",
                   m.vocab_size, m.max_position_embeddings);
  y += fmt::format("untie_embeddings_and_output_weights: {}\nadd_qkv_bias: {}\nqk_layernorm: {}\n",
                   m.untie_embeddings_and_output_weights, m.add_qkv_bias, m.qk_layernorm);
  y += fmt::format("norm_epsilon: {}\nrotary_base: {}\ninit_method_std: {}\n", m.norm_epsilon, m.rotary_base,
                   m.init_method_std);
  y += fmt::format("use_rope_scaling: {}\n", m.use_rope_scaling);
  if (m.use_rope_scaling) {
    y += fmt::format("rope_scaling_factor: {}\n", m.rope_scaling_factor);
    if (m.rope_low_freq_factor != 1.0 || m.rope_high_freq_factor != 4.0 ||
        m.rope_original_max_position != 8192)
      y += fmt::format(
          "# NOTE: the checkpoint's llama3 scaling uses low/high frequency factors {}/{} and original length "
          "{};\n"
          "# Megatron keys cannot express them (the checkpoint's state.json keeps them for `load`).\n",
          m.rope_low_freq_factor, m.rope_high_freq_factor, m.rope_original_max_position);
  }
  if (m.moe.enabled() || m.mla.enabled) y += detail::moe_preset_yaml(m);
  return y;
}

}  // namespace primus::ckpt
