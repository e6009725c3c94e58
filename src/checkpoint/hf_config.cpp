#include "checkpoint/hf_config.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace primus::ckpt {

namespace {

[[noreturn]] void bad(const std::string& what, const std::string& msg, const std::string& hint = {}) {
  throw Error(ErrorKind::kConfig, fmt::format("{}: {}", what, msg), {}, hint);
}

int64_t req_int(const nlohmann::json& c, const char* key, const std::string& what) {
  if (!c.contains(key) || !c[key].is_number_integer()) bad(what, fmt::format("'{}' must be an integer", key));
  const int64_t v = c[key].get<int64_t>();
  if (v <= 0) bad(what, fmt::format("'{}' must be positive, got {}", key, v));
  return v;
}

double req_number(const nlohmann::json& c, const char* key, const std::string& what) {
  if (!c.contains(key) || !c[key].is_number()) bad(what, fmt::format("'{}' must be a number", key));
  return c[key].get<double>();
}

bool opt_bool(const nlohmann::json& c, const char* key, bool def) {
  return c.contains(key) && c[key].is_boolean() ? c[key].get<bool>() : def;
}

// rope_scaling (older) or rope_parameters (newer): the scaling type and its numbers.
void read_rope_scaling(const nlohmann::json& s, ModelConfig& m, const std::string& what) {
  if (s.is_null()) return;
  if (!s.is_object()) bad(what, "rope scaling must be an object or null");
  std::string type = s.value("rope_type", s.value("type", std::string("default")));
  if (type == "default") return;
  if (type != "llama3")
    bad(what, fmt::format("rope type '{}' is not supported (only default and llama3)", type));
  m.use_rope_scaling = true;
  m.rope_scaling_factor = req_number(s, "factor", what + " rope scaling");
  m.rope_low_freq_factor = req_number(s, "low_freq_factor", what + " rope scaling");
  m.rope_high_freq_factor = req_number(s, "high_freq_factor", what + " rope scaling");
  m.rope_original_max_position = req_int(s, "original_max_position_embeddings", what + " rope scaling");
}

std::string dtype_of(const nlohmann::json& c) {
  for (const char* k : {"torch_dtype", "dtype"})
    if (c.contains(k) && c[k].is_string()) return c[k].get<std::string>();
  return "";
}

}  // namespace

std::string default_model_type(const ModelConfig& m) {
  if (m.qk_layernorm) return "qwen3";
  if (m.add_qkv_bias) return "qwen2";
  return "llama";
}

HfModelInfo model_config_from_hf(const nlohmann::json& c, const std::string& what) {
  if (!c.is_object()) bad(what, "config.json is not a JSON object");
  HfModelInfo info;
  info.model_type = c.value("model_type", std::string());
  if (info.model_type != "llama" && info.model_type != "qwen2" && info.model_type != "qwen3")
    bad(what, fmt::format("model_type '{}' is not supported", info.model_type),
        "supported: llama, qwen2, qwen3 (dense decoder-only)");
  ModelConfig& m = info.model;
  m.family = info.model_type;
  m.hidden_size = req_int(c, "hidden_size", what);
  m.ffn_hidden_size = req_int(c, "intermediate_size", what);
  m.num_layers = req_int(c, "num_hidden_layers", what);
  m.num_attention_heads = req_int(c, "num_attention_heads", what);
  m.num_query_groups = c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()
                           ? req_int(c, "num_key_value_heads", what)
                           : m.num_attention_heads;
  m.kv_channels = c.contains("head_dim") && !c["head_dim"].is_null() ? req_int(c, "head_dim", what)
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
  if (act != "silu") bad(what, fmt::format("hidden_act '{}' is not supported (only silu: SwiGLU)", act));
  if (m.num_attention_heads % m.num_query_groups != 0)
    bad(what, fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}",
                          m.num_attention_heads, m.num_query_groups));
  if (opt_bool(c, "mlp_bias", false)) bad(what, "mlp_bias: true is not supported");

  // Biases: qwen2 always has q/k/v biases; llama and qwen3 have q/k/v/o biases when attention_bias is set
  // (the o_proj bias must then be zero, which the weight loader checks).
  const bool attention_bias = opt_bool(c, "attention_bias", false);
  m.add_qkv_bias = info.model_type == "qwen2" || attention_bias;
  m.qk_layernorm = info.model_type == "qwen3";
  if (opt_bool(c, "use_sliding_window", false))
    bad(what, "use_sliding_window: true is not supported (full causal attention only)");

  // RoPE theta: exactly one value, from rope_theta and/or rope_parameters.rope_theta.
  std::optional<double> top, nested;
  if (c.contains("rope_theta") && !c["rope_theta"].is_null()) top = req_number(c, "rope_theta", what);
  const nlohmann::json params = c.contains("rope_parameters") ? c["rope_parameters"] : nlohmann::json();
  if (params.is_object() && params.contains("rope_theta"))
    nested = req_number(params, "rope_theta", what + " rope_parameters");
  if (!top && !nested)
    bad(what, "no RoPE theta: neither rope_theta nor rope_parameters.rope_theta is set",
        "refusing to guess a default (a wrong theta trains and evaluates silently wrong); add rope_theta");
  if (top && nested && *top != *nested)
    bad(what,
        fmt::format("ambiguous RoPE theta: rope_theta {} but rope_parameters.rope_theta {}", *top, *nested));
  m.rotary_base = top ? *top : *nested;
  if (!(m.rotary_base > 0) || !std::isfinite(m.rotary_base))
    bad(what, fmt::format("RoPE theta {} must be a positive number", m.rotary_base));
  if (params.is_object()) read_rope_scaling(params, m, what);
  if (c.contains("rope_scaling")) {
    if (m.use_rope_scaling && !c["rope_scaling"].is_null())
      bad(what, "both rope_scaling and rope_parameters describe a RoPE scaling; keep one");
    read_rope_scaling(c["rope_scaling"], m, what);
  }
  info.torch_dtype = dtype_of(c);
  return info;
}

nlohmann::ordered_json hf_config_from_model(const ModelConfig& m, const std::string& model_type,
                                            const std::string& dtype, const nlohmann::json& base) {
  if (model_type != "llama" && model_type != "qwen2" && model_type != "qwen3")
    throw ConfigError(fmt::format("model type '{}' is not supported (llama, qwen2, qwen3)", model_type));
  if (m.qk_layernorm && model_type != "qwen3")
    throw ConfigError(fmt::format(
        "the model has q/k norms (qk_layernorm), which {} does not; export as qwen3", model_type));
  if (!m.qk_layernorm && model_type == "qwen3")
    throw ConfigError(
        "qwen3 has q/k norms but the model has none (qk_layernorm false); export as llama or qwen2");
  nlohmann::ordered_json j;
  static const std::map<std::string, const char*> kArch = {
      {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
  j["architectures"] = {kArch.at(model_type)};
  j["model_type"] = model_type;
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = m.ffn_hidden_size;
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_key_value_heads"] = m.num_query_groups;
  j["head_dim"] = m.kv_channels;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["rms_norm_eps"] = m.norm_epsilon;
  j["initializer_range"] = m.init_method_std;
  j["vocab_size"] = m.vocab_size;
  j["tie_word_embeddings"] = !m.untie_embeddings_and_output_weights;
  if (model_type != "qwen2") j["attention_bias"] = m.add_qkv_bias;  // with a zero o_proj bias
  if (model_type == "llama") j["mlp_bias"] = false;
  if (model_type == "qwen2") {
    j["use_sliding_window"] = false;
    j["max_window_layers"] = m.num_layers;
  }
  j["attention_dropout"] = 0.0;
  nlohmann::json scaling = nullptr;
  if (m.use_rope_scaling)
    scaling = {{"rope_type", "llama3"},
               {"factor", m.rope_scaling_factor},
               {"low_freq_factor", m.rope_low_freq_factor},
               {"high_freq_factor", m.rope_high_freq_factor},
               {"original_max_position_embeddings", m.rope_original_max_position}};
  const bool nested = base.is_object() && base.contains("rope_parameters") && !base.contains("rope_theta");
  if (nested) {
    nlohmann::json p = scaling.is_null() ? nlohmann::json{{"rope_type", "default"}} : scaling;
    p["rope_theta"] = m.rotary_base;
    j["rope_parameters"] = p;
  } else {
    j["rope_theta"] = m.rotary_base;
    j["rope_scaling"] = scaling;
  }
  // Newer transformers spell the weights' dtype `dtype`, older ones `torch_dtype`: follow the original.
  const bool new_dtype_key = base.is_object() && base.contains("dtype") && !base.contains("torch_dtype");
  j[new_dtype_key ? "dtype" : "torch_dtype"] = dtype;
  j["use_cache"] = true;
  // Keep the original's other keys (token ids, transformers_version, ...) unless we set them above.
  static const char* kOwned[] = {"rope_theta", "rope_scaling", "rope_parameters", "dtype", "torch_dtype"};
  if (base.is_object()) {
    for (auto it = base.begin(); it != base.end(); ++it) {
      bool owned = j.contains(it.key());
      for (const char* k : kOwned) owned = owned || it.key() == k;
      if (!owned) j[it.key()] = it.value();
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
  return y;
}

}  // namespace primus::ckpt
