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

// TorchTitan's deepseek_v3 model (MLA + MoE). TorchTitan applies YaRN only when training.seq_len exceeds the
// original 4096 positions (the dialect switches it off otherwise), with an unscaled cos/sin and the softmax
// temperature m(40, mscale)^2: mscale = mscale_all_dim here.
struct DeepSeekDims {
  int64_t dim, inter, moe_inter, layers, dense_layers, heads, experts, shared, topk;
  bool sigmoid, route_norm;
  double route_scale;
  int64_t groups, group_topk, q_lora;
  double mscale;
};

ModelConfig deepseek_v3(const DeepSeekDims& d) {
  ModelConfig m;
  m.family = "deepseek_v3";
  m.num_layers = d.layers;
  m.hidden_size = d.dim;
  m.num_attention_heads = d.heads;
  m.num_query_groups = d.heads;
  m.kv_channels = 128;  // unused by MLA (v_head_dim below)
  m.ffn_hidden_size = d.inter;
  m.qk_layernorm = true;  // MLA's latent norms
  m.norm_epsilon = 1e-5;  // DeepSeekV3ModelArgs.norm_eps
  m.rotary_base = 10000.0;
  m.untie_embeddings_and_output_weights = true;
  m.init_method_std = 0.02;
  MlaConfig& a = m.mla;
  a.enabled = true;
  a.q_lora_rank = d.q_lora;
  a.kv_lora_rank = 512;
  a.qk_head_dim = 128;
  a.qk_pos_emb_head_dim = 64;
  a.v_head_dim = 128;
  a.yarn = true;
  a.rotary_scaling_factor = 40.0;
  a.original_max_position = 4096;
  a.beta_fast = 32.0;
  a.beta_slow = 1.0;
  a.mscale = d.mscale;
  a.mscale_all_dim = d.mscale;
  MoeConfig& e = m.moe;
  e.num_experts = d.experts;
  e.topk = d.topk;
  e.ffn_hidden_size = d.moe_inter;
  e.shared_ffn_hidden_size = d.moe_inter * d.shared;
  e.layer_is_moe.assign(static_cast<size_t>(d.layers), 1);
  for (int64_t l = 0; l < d.dense_layers; ++l) e.layer_is_moe[l] = 0;
  // TorchTitan's router: scores over all experts, top-k, weights renormalised when route_norm, times
  // route_scale; load balanced by the expert bias (load_balance_coeff 1e-3), no auxiliary loss.
  e.score_function = d.sigmoid ? "sigmoid" : "softmax";
  e.pre_softmax = !d.sigmoid;  // a softmax over all experts before the top-k (sigmoid scores need none)
  e.normalize_topk = d.route_norm;
  e.topk_scaling_factor = d.route_scale;
  e.num_groups = d.groups;
  e.group_topk = d.group_topk;
  e.expert_bias = true;
  e.bias_update_rate = 1e-3;
  e.load_balancing = "none";
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
      // TorchTitan torchtitan/models/deepseek_v3: the sizes of DeepSeek-V2-Lite, -V2 and -V3
      // (reference.md §1.4 and Primus's deepseek_v2_lite / deepseek_v2 / deepseek_v3 presets).
      {"deepseek_v3", "16B",
       deepseek_v3({2048, 10944, 1408, 27, 1, 16, 64, 2, 6, false, false, 1.0, 0, 0, 0, 0.70})},
      {"deepseek_v3", "236B",
       deepseek_v3({5120, 12288, 1536, 60, 1, 128, 160, 2, 6, false, false, 16.0, 8, 3, 1536, 1.0})},
      {"deepseek_v3", "671B",
       deepseek_v3({7168, 18432, 2048, 61, 3, 128, 256, 1, 8, true, true, 2.5, 8, 4, 1536, 1.0})},
  };
  return kFlavors;
}

const Flavor* find_flavor(const std::string& family, const std::string& flavor) {
  for (const Flavor& f : torchtitan_flavors())
    if (f.family == family && f.flavor == flavor) return &f;
  return nullptr;
}

}  // namespace primus::config
