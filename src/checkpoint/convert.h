#pragma once
// `primus convert`: Hugging Face model directories <-> Primus checkpoints (Llama, Qwen 2, Qwen 3; Mixtral,
// Qwen2-MoE, Qwen3-MoE; DeepSeek-V2/V3 once the model has multi-latent attention).
//   hf-to-primus: config.json + safetensors (single or sharded) -> <out>/iter_0000000 + latest (a Primus
//                 checkpoint at iteration 0 without optimizer state, weights in the HF dtype; FP8 block-
//                 quantised weights dequantised to bf16) and
//                 <out>/primus_model.yaml (a Megatron-dialect model preset with the same dimensions).
//   primus-to-hf: a checkpoint (directory, or a save root's latest; verified first) -> config.json and
//                 model.safetensors, or shards with model.safetensors.index.json.
#include <cstdint>
#include <map>
#include <string>

#include "checkpoint/load.h"
#include "core/tensor.h"

namespace primus::ckpt {

struct ConvertReport {
  std::string output;      // checkpoint or HF directory written
  std::string preset;      // hf-to-primus: the model preset written
  std::string model_type;  // the HF family (hf_config.h)
  std::string dtype;
  int64_t tensors = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

ConvertReport convert_hf_to_primus(const std::string& hf_dir, const std::string& out_root);

struct PrimusToHfOptions {
  std::string model_type;  // "" = from the checkpoint (its source config.json, else the model flags)
  std::string dtype;       // "" = the source config.json's torch_dtype, else bfloat16
  uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default "5GB"
  // Experts as transformers 5's fused mlp.experts.gate_up_proj / down_proj instead of one tensor per expert
  // (the released checkpoints' layout, which every version of transformers loads).
  bool fused_experts = false;
};
ConvertReport convert_primus_to_hf(const std::string& checkpoint, const std::string& out_dir,
                                   const PrimusToHfOptions& o);

// The parameters of a verified checkpoint as f32 host tensors by ParamStore name (master weights when saved,
// else the model weights).
std::map<std::string, Tensor> read_checkpoint_params(const Verification& v);

}  // namespace primus::ckpt
