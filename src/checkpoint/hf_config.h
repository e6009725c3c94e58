#pragma once
// Hugging Face config.json <-> ModelConfig (reference.md §1.4) for
//   dense:  llama, qwen2, qwen3                              (this file's .cpp)
//   MoE:    mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3   (hf_config_moe.cpp)
// RoPE theta is read from `rope_theta` or `rope_parameters.rope_theta` (newer transformers); a missing theta,
// or two different ones, is an error (silently defaulting theta is a known bug class). Features we do not
// implement (o_proj or MLP biases, sliding windows, other activations, other rope types, routing rules our
// router does not have) are errors naming config.json and the key, never ignored.
#include <nlohmann/json.hpp>
#include <string>

#include "config/train_config.h"

namespace primus::ckpt {

// quantization_config of a block-quantised FP8 checkpoint (DeepSeek-V3's release): F8_E4M3 weights, each with
// an f32 `<name>_scale_inv` per block (checkpoint/fp8_dequant.h).
struct HfQuantization {
  bool fp8 = false;
  int64_t block_rows = 128, block_cols = 128;
};

struct HfModelInfo {
  ModelConfig model;
  std::string model_type;   // one of the families above
  std::string torch_dtype;  // "bfloat16", "float32", "float16" or "" (not given)
  HfQuantization quant;
  // DeepSeek: the RoPE rows of q and k_pe are stored interleaved (pairs 2i, 2i+1; transformers'
  // rope_interleave, true for every released checkpoint) and are de-interleaved on import.
  bool rope_interleaved = true;
};

bool is_moe_model_type(const std::string& model_type);

// `what` names the file in errors.
HfModelInfo model_config_from_hf(const nlohmann::json& config, const std::string& what);

// config.json for `m`. `base` (may be null): an original config.json whose other keys (token ids, ...) are
// kept and whose spellings (rope_theta vs rope_parameters, torch_dtype vs dtype) are followed; its
// quantization_config is dropped (the export is never quantised). `dtype` is the torch dtype name of the
// weights ("bfloat16", "float32", "float16"). Throws when `m` cannot be expressed as `model_type`.
nlohmann::ordered_json hf_config_from_model(const ModelConfig& m, const std::string& model_type,
                                            const std::string& dtype, const nlohmann::json& base);

// The family that describes `m` (llama | qwen2 | qwen3 for dense models; the MoE families from the routing
// and expert flags). Throws when no family describes an MoE model.
std::string default_model_type(const ModelConfig& m);

// A Megatron-dialect model preset (YAML) describing `m`, as `convert hf-to-primus` writes it.
std::string model_preset_yaml(const ModelConfig& m, const std::string& source);

namespace detail {
// Shared by hf_config.cpp and hf_config_moe.cpp.
[[noreturn]] void bad_config(const std::string& what, const std::string& msg, const std::string& hint = {});
int64_t req_int(const nlohmann::json& c, const char* key, const std::string& what);
int64_t opt_int(const nlohmann::json& c, const char* key, int64_t def, const std::string& what);
double req_number(const nlohmann::json& c, const char* key, const std::string& what);
double opt_number(const nlohmann::json& c, const char* key, double def, const std::string& what);
bool opt_bool(const nlohmann::json& c, const char* key, bool def);
// MoE families: the MoE / MLA / YaRN / MTP keys of config.json into info.model (hf_config_moe.cpp).
void read_moe_config(const nlohmann::json& c, HfModelInfo& info, const std::string& what);
// ... and back: the family's MoE / MLA keys into j (refusing what the family cannot express).
void write_moe_config(const ModelConfig& m, const std::string& model_type, const nlohmann::json& base,
                      nlohmann::ordered_json& j);
std::string default_moe_model_type(const ModelConfig& m);
std::string moe_preset_yaml(const ModelConfig& m);
}  // namespace detail

}  // namespace primus::ckpt
