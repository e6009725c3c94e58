#include "config/torchtitan_flavors.h"

namespace primus::config {

int64_t llama3_ffn_dim(int64_t dim, double ffn_dim_multiplier, int64_t multiple_of) {
  int64_t hidden = 4 * dim;
  hidden = 2 * hidden / 3;
  if (ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(ffn_dim_multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

namespace {

ModelConfig llama3(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t ffn,
                   bool rope_scaling) {
  ModelConfig m;
  m.family = "llama";
  m.num_layers = layers;
  m.hidden_size = dim;
  m.num_attention_heads = heads;
  m.num_query_groups = kv_heads;
  m.kv_channels = dim / heads;
  m.ffn_hidden_size = ffn;
  m.norm_epsilon = 1e-5;
  m.rotary_base = 500000.0;
  m.use_rope_scaling =
      rope_scaling;  // TorchTitan's Llama-3.1 flavors scale RoPE (factor 8, low 1, high 4, 8192)
  m.rope_scaling_factor = 8.0;
  m.untie_embeddings_and_output_weights = true;
  m.init_method_std = 0.02;
  return m;
}

ModelConfig qwen3(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn,
                  bool tied) {
  ModelConfig m;
  m.family = "qwen3";
  m.num_layers = layers;
  m.hidden_size = dim;
  m.num_attention_heads = heads;
  m.num_query_groups = kv_heads;
  m.kv_channels = head_dim;
  m.ffn_hidden_size = ffn;
  m.qk_layernorm = true;
  m.norm_epsilon = 1e-6;
  m.rotary_base = 1000000.0;
  m.untie_embeddings_and_output_weights = !tied;
  m.init_method_std = 0.02;
  return m;
}

}  // namespace

const std::vector<Flavor>& torchtitan_flavors() {
  static const std::vector<Flavor> kFlavors = {
      // TorchTitan torchtitan/models/llama3/__init__.py.
      {"llama3", "debugmodel", llama3(256, 6, 16, 16, llama3_ffn_dim(256, 0, 256), false)},
      {"llama3", "8B", llama3(4096, 32, 32, 8, llama3_ffn_dim(4096, 1.3, 1024), true)},
      {"llama3", "70B", llama3(8192, 80, 64, 8, llama3_ffn_dim(8192, 1.3, 4096), true)},
      {"llama3", "405B", llama3(16384, 126, 128, 8, llama3_ffn_dim(16384, 1.2, 4096), true)},
      // Primus-C++ test flavors (byte vocabulary when model.hf_assets_path is null).
      {"llama3", "tiny", llama3(256, 8, 4, 2, 768, false)},
      {"llama3", "micro", llama3(64, 2, 4, 2, 192, false)},
      // TorchTitan torchtitan/models/qwen3 (HF Qwen3 config.json sizes).
      {"qwen3", "0.6B", qwen3(1024, 28, 16, 8, 128, 3072, true)},
      {"qwen3", "1.7B", qwen3(2048, 28, 16, 8, 128, 6144, true)},
      {"qwen3", "4B", qwen3(2560, 36, 32, 8, 128, 9728, true)},
      {"qwen3", "8B", qwen3(4096, 36, 32, 8, 128, 12288, false)},
      {"qwen3", "14B", qwen3(5120, 40, 40, 8, 128, 17408, false)},
      {"qwen3", "32B", qwen3(5120, 64, 64, 8, 128, 25600, false)},
  };
  return kFlavors;
}

const Flavor* find_flavor(const std::string& family, const std::string& flavor) {
  for (const Flavor& f : torchtitan_flavors())
    if (f.family == family && f.flavor == flavor) return &f;
  return nullptr;
}

}  // namespace primus::config
