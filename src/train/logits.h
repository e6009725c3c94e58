#pragma once
// Inference helpers for checks against other implementations (`primus checkpoint logits`, the Hugging Face
// logits check in tools/device/): load a model from a Primus checkpoint or a Hugging Face directory, and run
// the forward pass to the full logits.
#include <memory>
#include <string>

#include "config/train_config.h"
#include "core/tensor.h"
#include "model/param_store.h"

namespace primus {

struct InferenceModel {
  ModelConfig config;
  Stream stream;
  std::unique_ptr<ParamStore> params;
  std::string source;      // what was loaded, for logs
  std::string model_type;  // the HF family (of config.json, else the one that describes `config`)
  // A LoRA adapter (attach_peft_adapter): the decoder projections add it; null without.
  std::unique_ptr<ParamStore> adapters;
};

// `path`: a checkpoint directory, a save root (its latest; verified) or a Hugging Face directory. `device`:
// auto | cpu | cuda. Compute is f32 on the CPU and bf16 on the GPU, as in training.
InferenceModel load_inference_model(const std::string& path, const std::string& device);

// Adds the PEFT LoRA adapter in `dir` (checkpoint/peft_adapter.h) to the model: logits are then the
// adapted model's, computed through our LoRA path (model/lora_adapter.h), not by merging the weights.
void attach_peft_adapter(InferenceModel& m, const std::string& dir);

// Logits f32 [B, T, vocab_size] on the host for tokens i32 [B, T] (host), padding columns dropped.
Tensor compute_logits(const InferenceModel& m, const Tensor& tokens);

}  // namespace primus
