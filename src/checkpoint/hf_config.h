#pragma once
// Hugging Face config.json <-> ModelConfig for the dense Llama-family models: llama, qwen2, qwen3
// (reference.md §1.4). RoPE theta is read from `rope_theta` or `rope_parameters.rope_theta` (newer
// transformers); a missing theta, or two different ones, is an error (silently defaulting theta is a known
// bug class). Only the llama3 frequency scaling (or none) is accepted; features we do not implement (o_proj
// or MLP biases, sliding windows, other activations, other rope types) are errors, never ignored.
#include <nlohmann/json.hpp>
#include <string>

#include "config/train_config.h"

namespace primus::ckpt {

struct HfModelInfo {
  ModelConfig model;
  std::string model_type;   // llama | qwen2 | qwen3
  std::string torch_dtype;  // "bfloat16", "float32", "float16" or "" (not given)
};

// `what` names the file in errors.
HfModelInfo model_config_from_hf(const nlohmann::json& config, const std::string& what);

// config.json for `m`. `base` (may be null): an original config.json whose other keys (token ids, ...) are
// kept and whose RoPE spelling (rope_theta vs rope_parameters) is followed. `dtype` is the torch dtype name
// of the weights ("bfloat16", "float32", "float16").
nlohmann::ordered_json hf_config_from_model(const ModelConfig& m, const std::string& model_type,
                                            const std::string& dtype, const nlohmann::json& base);

// llama | qwen2 | qwen3 from the model's flags (qk_layernorm -> qwen3, add_qkv_bias -> qwen2).
std::string default_model_type(const ModelConfig& m);

// A Megatron-dialect model preset (YAML) describing `m`, as `convert hf-to-primus` writes it.
std::string model_preset_yaml(const ModelConfig& m, const std::string& source);

}  // namespace primus::ckpt
