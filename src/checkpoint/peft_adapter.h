#pragma once
// LoRA adapters in Hugging Face PEFT's format, and their merge into an HF model directory
// (docs/posttrain.md).
//
// A PEFT LoRA directory (what `PeftModel.save_pretrained` writes and `PeftModel.from_pretrained(base, dir)`
// loads) holds adapter_config.json and adapter_model.safetensors with, per adapted HF module M (e.g.
// model.layers.0.self_attn.q_proj), `base_model.model.M.lora_A.weight` [r, in] and `...lora_B.weight`
// [out, r]; the module computes y = x W^T + (lora_alpha / r) (x A^T) B^T.
//
// Our adapters are on fused projections (qkv_proj = q|k|v, gate_up_proj = gate|up). The rows of a fused
// weight are its HF parts' rows one after the other (HfNameMap), so a fused adapter is exactly one adapter
// per part: every part gets the same A and its own row block of B (delta W = scale B A, row by row).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "core/tensor.h"

namespace primus::ckpt {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";

// One trained adapter tensor under our parameter name, e.g. layers.3.self_attn.qkv_proj.lora_A.weight
// [r, hidden] or layers.3.self_attn.qkv_proj.lora_B.weight [q_dim + 2 kv_dim, r]; f32 on the host.
struct LoraTensor {
  std::string name;
  Tensor value;
};

struct PeftWriteReport {
  std::string dir;
  std::string model_type;  // the HF family whose module names were written
  std::vector<std::string> target_modules;
  int64_t modules = 0;  // HF modules adapted (a fused projection counts once per part)
  uint64_t bytes = 0;   // adapter_model.safetensors
};

// Writes `dir` (which must not exist, or be empty) as a PEFT LoRA directory, atomically: everything goes to
// a temporary sibling that is renamed into place. `hf_config_json`: the base's config.json text, which
// names the HF family; empty: the family is derived from `m` as `convert primus-to-hf` does. Tensors are
// saved in f32. Throws naming the adapter when a tensor's name, shape or pairing is wrong.
PeftWriteReport write_peft_adapter(const std::string& dir, const std::vector<LoraTensor>& adapters,
                                   const ModelConfig& m, const LoraConfig& lora,
                                   const std::string& hf_config_json,
                                   const std::string& base_model_name_or_path);

// Why write_peft_adapter cannot express this model's adapters in a Hugging Face family (the family's
// refusal), or "" when it can. The trainer asks before training, so that a run whose end-of-run export would
// fail says so while it can still save its adapters to checkpoints.
std::string peft_export_problem(const ModelConfig& m, const std::string& hf_config_json);

struct PeftModule {
  Tensor a;  // lora_A [r, in], f32
  Tensor b;  // lora_B [out, r], f32
};

struct PeftAdapter {
  std::string dir;
  int64_t r = 0;
  double alpha = 0;
  // adapter_config.json's target_modules: a list of module names (or name suffixes), or one regular
  // expression (a single element; `targets_regex`).
  std::vector<std::string> target_modules;
  bool targets_regex = false;
  std::map<std::string, PeftModule> modules;  // by HF module name, e.g. model.layers.0.self_attn.q_proj
  double scale() const { return alpha / static_cast<double>(r); }
};

// Reads and validates a PEFT LoRA directory (tensors f32, bf16 or f16, returned in f32). Every malformed
// input is a ConfigError naming the file and the key or tensor and what was expected: a missing file, bad
// JSON, missing or mistyped keys, peft_type other than LORA, variants whose weights mean something else
// (use_dora, use_rslora, fan_in_fan_out, rank_pattern / alpha_pattern, biases, modules_to_save), a lora_A
// without its lora_B (or the reverse), shapes inconsistent with r.
PeftAdapter read_peft_adapter(const std::string& dir);

struct MergeLoraReport {
  std::string output;
  std::string model_type;
  std::string dtype;  // torch name of the written weights
  int64_t tensors = 0;
  int64_t merged = 0;  // tensors that received an adapter
  uint64_t bytes = 0;
  double seconds = 0;
};

// Writes `out_dir` (which must not exist, or be empty; published atomically) as the full HF model
// base + adapter: every adapted weight becomes W + (alpha / r) B A, computed in f32 and rounded once to
// `dtype` (bfloat16 | float16 | float32; "" = the base config.json's dtype, else bfloat16); other tensors are
// the base's, cast to `dtype`. config.json (its dtype updated) and the tokenizer and other non-weight files
// are copied from the base. Every adapter module is checked against the base before anything is written: one
// the base does not have, or whose B A shape differs from the base weight's (an adapter of another model), is
// an error naming the module and both shapes.
MergeLoraReport merge_lora_into_hf(const std::string& base_hf_dir, const std::string& adapter_dir,
                                   const std::string& out_dir, const std::string& dtype,
                                   uint64_t max_shard_bytes = 5'000'000'000);

}  // namespace primus::ckpt

namespace primus {
class ParamStore;
struct Stream;
}  // namespace primus

namespace primus::ckpt {

// The LoRA settings of `a` as our fused projections take them (rank, alpha, and which of qkv_proj, o_proj,
// gate_up_proj, down_proj it adapts), for a model `m` of HF family `model_type`.
LoraConfig lora_config_of(const PeftAdapter& a, const ModelConfig& m, const std::string& model_type);

// Fills `adapters` (laid out from the model's spec with adapters = lora_config_of(a, ...), allocated) from
// `a`: A of a fused projection is its parts' common lora_A, B their lora_B rows one after the other. Parts
// with different A (an adapter trained on separate q/k/v modules) cannot be one fused adapter: refused.
void load_peft_into_adapters(const PeftAdapter& a, const ModelConfig& m, const std::string& model_type,
                             ParamStore& adapters, const Stream& s);

}  // namespace primus::ckpt
