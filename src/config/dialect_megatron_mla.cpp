// The Megatron dialect's multi-latent attention, YaRN and multi-token-prediction keys -> ModelConfig::mla and
// mtp_* (docs/mla.md). Every key is read whether or not the model uses it (config/key_use.h); the rules that
// need MLA apply only when multi_latent_attention is on.
#include <fmt/format.h>

#include "config/load_config.h"
#include "config/not_supported.h"
#include "core/error.h"

namespace primus::config {

namespace {

// The MLA sizes: without multi_latent_attention Megatron builds standard attention and ignores them.
constexpr const char* kMlaSizeKeys[] = {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
                                        "v_head_dim"};

bool in_model_preset(const Origin& o) {
  return o.is_file() && o.file.find("/models/") != std::string::npos;
}

}  // namespace

void map_megatron_mla(ResolvedConfig& rc) {
  const CheckedKeys& k = rc.keys;
  ModelConfig& m = rc.train.model;
  MlaConfig& a = m.mla;
  auto at = [&](const char* key) { return k.origin(key).str(); };

  a.enabled = k.b("multi_latent_attention");
  a.q_lora_rank = k.is_null("q_lora_rank") ? 0 : k.i("q_lora_rank");
  a.kv_lora_rank = k.is_null("kv_lora_rank") ? 0 : k.i("kv_lora_rank");
  a.qk_head_dim = k.is_null("qk_head_dim") ? 0 : k.i("qk_head_dim");
  a.qk_pos_emb_head_dim = k.is_null("qk_pos_emb_head_dim") ? 0 : k.i("qk_pos_emb_head_dim");
  a.v_head_dim = k.is_null("v_head_dim") ? 0 : k.i("v_head_dim");
  const std::string rope_type = k.s("rope_type");
  a.rotary_scaling_factor = k.is_null("rotary_scaling_factor") ? 1.0 : k.f("rotary_scaling_factor");
  a.beta_fast = k.f("beta_fast");
  a.beta_slow = k.f("beta_slow");
  a.mscale = k.is_null("mscale") ? 1.0 : k.f("mscale");
  a.mscale_all_dim = k.is_null("mscale_all_dim") ? 0.0 : k.f("mscale_all_dim");
  const bool orig_null = k.is_null("original_max_position_embeddings");
  // Megatron's MLATransformerConfig default when the argument is left null.
  a.original_max_position = orig_null ? 4096 : k.i("original_max_position_embeddings");
  m.mtp_num_layers = k.is_null("mtp_num_layers") ? 0 : k.i("mtp_num_layers");
  m.mtp_loss_scaling_factor = k.is_null("mtp_loss_scaling_factor") ? 0.0 : k.f("mtp_loss_scaling_factor");

  if (m.mtp_num_layers > 0) {
    if (m.mtp_loss_scaling_factor <= 0)
      throw ConfigError(fmt::format(
          "{}: mtp_loss_scaling_factor {} with mtp_num_layers {} ({}): the MTP layers would get no gradient "
          "(rule: > 0 when MTP is on)",
          at("mtp_loss_scaling_factor"), m.mtp_loss_scaling_factor, m.mtp_num_layers, at("mtp_num_layers")));
    rc.set_source("model.mtp_num_layers", "mtp_num_layers", k.origin("mtp_num_layers"));
  }

  if (!a.enabled) {
    if (rope_type == "yarn" && in_model_preset(k.origin("rope_type")))
      rc.warnings.push_back(
          fmt::format("rope_type=yarn ({}) has no effect: multi_latent_attention is false ({})",
                      at("rope_type"), at("multi_latent_attention")));
    else if (rope_type == "yarn")
      throw NotSupportedError(
          fmt::format("{}: not supported yet: rope_type yarn without multi_latent_attention (YaRN is "
                      "implemented for MLA's rotary slice)",
                      at("rope_type")),
          "set multi_latent_attention: true, or rope_type: rope");
    // A DeepSeek preset under an experiment that switches MLA off (Primus's own DeepSeek experiments do)
    // leaves its MLA sizes behind: inert, as in Megatron. Set anywhere else they are a mistake.
    for (const char* key : kMlaSizeKeys) {
      const KeyEntry* e = k.entry(key);
      if (e->is_default() || e->value == e->decl->default_value) continue;
      if (in_model_preset(e->value.origin())) {
        rc.warnings.push_back(fmt::format("{}={} ({}) has no effect: multi_latent_attention is false ({})",
                                          key, e->value.repr(), at(key), at("multi_latent_attention")));
        continue;
      }
      throw ConfigError(
          fmt::format("{}: {}={} is set but multi_latent_attention is false ({}) (rule: the MLA "
                      "sizes need multi_latent_attention: true)",
                      at(key), key, e->value.repr(), at("multi_latent_attention")),
          "set multi_latent_attention: true, or remove the key");
    }
    return;
  }

  // MLA. The sizes must make sense before any memory is touched.
  auto need_positive = [&](const char* key, int64_t v) {
    if (v <= 0)
      throw ConfigError(fmt::format("{}: {} is {} with multi_latent_attention on (rule: > 0)", at(key), key,
                                    k.is_null(key) ? "null" : std::to_string(v)));
  };
  need_positive("kv_lora_rank", a.kv_lora_rank);
  need_positive("qk_head_dim", a.qk_head_dim);
  need_positive("qk_pos_emb_head_dim", a.qk_pos_emb_head_dim);
  need_positive("v_head_dim", a.v_head_dim);
  if (a.qk_pos_emb_head_dim % 2 != 0)
    throw ConfigError(fmt::format("{}: qk_pos_emb_head_dim {} is odd (rule: RoPE rotates pairs of dims)",
                                  at("qk_pos_emb_head_dim"), a.qk_pos_emb_head_dim));
  if (!k.is_null("q_lora_rank") && a.q_lora_rank <= 0)
    throw ConfigError(fmt::format("{}: q_lora_rank {} (rule: > 0, or null for no low-rank query)",
                                  at("q_lora_rank"), a.q_lora_rank));
  // Megatron's MLA builds the latent norms (q_a / kv_a layernorm) when qk_layernorm is on, as every DeepSeek
  // preset sets it; MLA without them is not implemented.
  if (!m.qk_layernorm)
    throw NotSupportedError(
        fmt::format("{}: not supported yet: multi_latent_attention without the latent RMSNorms "
                    "(qk_layernorm: false)",
                    k.origin("qk_layernorm").str()),
        "DeepSeek's MLA normalises its q and kv latents: set qk_layernorm: true");
  if (m.add_qkv_bias)
    throw NotSupportedError(fmt::format("{}: not supported yet: add_qkv_bias with multi_latent_attention",
                                        k.origin("add_qkv_bias").str()));
  if (m.use_rope_scaling)
    throw ConfigError(
        fmt::format("{}: use_rope_scaling (Llama-3 RoPE scaling) with multi_latent_attention "
                    "(rule: MLA's rotary slice uses rope_type yarn or rope)",
                    k.origin("use_rope_scaling").str()));
  // Megatron's MLA default is YaRN; rope_type: rope rotates the slice with plain RoPE.
  a.yarn = rope_type != "rope";
  if (a.yarn && a.rotary_scaling_factor > 1.0 && orig_null)
    rc.derived.push_back(
        "mla.original_max_position = 4096 (original_max_position_embeddings is null: Megatron's MLA "
        "default)");
  if (a.rotary_scaling_factor <= 0 || a.beta_fast <= 0 || a.beta_slow <= 0 || a.mscale < 0 ||
      a.mscale_all_dim < 0)
    throw ConfigError(fmt::format(
        "YaRN: rotary_scaling_factor {} ({}), beta_fast {} / beta_slow {} must be > 0 and mscale {} / "
        "mscale_all_dim {} >= 0",
        a.rotary_scaling_factor, at("rotary_scaling_factor"), a.beta_fast, a.beta_slow, a.mscale,
        a.mscale_all_dim));
  // One key/value head per query head: the query groups of GQA do not apply.
  if (m.num_query_groups != m.num_attention_heads)
    rc.warnings.push_back(
        fmt::format("num_query_groups={} ({}) has no effect: multi-latent attention has one "
                    "key/value head per query head",
                    m.num_query_groups, at("num_query_groups")));
  m.num_query_groups = m.num_attention_heads;
  rc.set_source("model.mla", "multi_latent_attention", k.origin("multi_latent_attention"));
}

}  // namespace primus::config
