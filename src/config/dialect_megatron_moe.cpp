// The Megatron dialect's MoE keys -> ModelConfig::moe (docs/moe.md). Every key is read whether or not the
// model has experts (config/key_use.h); the rules that need experts apply only when num_experts is set.
#include <fmt/format.h>

#include "config/load_config.h"
#include "config/moe_layer_pattern.h"
#include "core/error.h"

namespace primus::config {
namespace {

double number_or_single(const CheckedKeys& k, const char* key) {
  const Value& v = k.value(key);
  if (v.is_null()) return 0.0;
  if (v.is_number()) return v.as_float();
  if (v.is_list() && v.items().size() == 1 && v.items()[0].is_number()) return v.items()[0].as_float();
  throw ConfigError(fmt::format("{}: {}: expected a number (or a one-element list), got {} {}",
                                k.origin(key).str(), key, v.type_name(), v.repr()));
}

}  // namespace

void map_megatron_moe(ResolvedConfig& rc) {
  const CheckedKeys& k = rc.keys;
  ModelConfig& m = rc.train.model;
  MoeConfig& e = m.moe;
  auto at = [&](const char* key) { return k.origin(key).str(); };

  e.num_experts = k.is_null("num_experts") ? 0 : k.i("num_experts");
  e.topk = k.i("moe_router_topk");
  e.ffn_hidden_size = k.is_null("moe_ffn_hidden_size") ? m.ffn_hidden_size : k.i("moe_ffn_hidden_size");
  e.shared_ffn_hidden_size =
      k.is_null("moe_shared_expert_intermediate_size") ? 0 : k.i("moe_shared_expert_intermediate_size");
  e.shared_expert_gate = k.b("moe_shared_expert_gate");
  e.layer_is_moe = moe_layer_pattern(k.value("moe_layer_freq"), m.num_layers, at("moe_layer_freq"));
  e.score_function = k.s("moe_router_score_function");
  e.pre_softmax = k.b("moe_router_pre_softmax");
  // Megatron (moe_utils.topk_routing_with_score_function) renormalises sigmoid scores over the k chosen when
  // k > 1, and never softmax probabilities (non-pre-softmax ones sum to 1 by construction).
  e.normalize_topk = e.score_function == "sigmoid" && e.topk > 1;
  e.num_groups = k.is_null("moe_router_num_groups") ? 0 : k.i("moe_router_num_groups");
  e.group_topk = k.is_null("moe_router_group_topk") ? 0 : k.i("moe_router_group_topk");
  e.topk_scaling_factor =
      k.is_null("moe_router_topk_scaling_factor") ? 1.0 : k.f("moe_router_topk_scaling_factor");
  e.expert_bias = k.b("moe_router_enable_expert_bias");
  e.bias_update_rate = k.f("moe_router_bias_update_rate");
  e.load_balancing = k.s("moe_router_load_balancing_type");
  e.aux_loss_coeff = number_or_single(k, "moe_aux_loss_coeff");
  e.z_loss_coeff = k.is_null("moe_z_loss_coeff") ? 0.0 : k.f("moe_z_loss_coeff");
  e.router_softcap = k.is_null("router_logit_softcapping") ? 0.0 : k.f("router_logit_softcapping");
  e.capacity_factor = k.is_null("moe_expert_capacity_factor") ? 0.0 : k.f("moe_expert_capacity_factor");
  e.pad_to_capacity = k.b("moe_pad_expert_input_to_capacity");
  e.drop_policy = k.s("moe_token_drop_policy");
  e.per_layer_logging = k.b("moe_per_layer_logging");
  // Read whatever the flag: a type is checked (even | uniform) even while forced balancing is off.
  const std::string force_type = k.s("moe_router_force_load_balancing_type");
  e.force_balance = k.b("moe_router_force_load_balancing") ? force_type : "none";
  if (!e.enabled()) return;

  // Rules (each names its key), before any memory is touched.
  const int64_t E = e.num_experts;
  if (e.topk > E)
    throw ConfigError(fmt::format("{}: moe_router_topk {} is more than num_experts {} ({})",
                                  at("moe_router_topk"), e.topk, E, at("num_experts")));
  if ((e.num_groups > 0) != (e.group_topk > 0))
    throw ConfigError(
        fmt::format("{}: moe_router_num_groups and moe_router_group_topk ({}) must be set "
                    "together for group-limited routing",
                    at("moe_router_num_groups"), at("moe_router_group_topk")));
  if (e.num_groups > 0) {
    if (E % e.num_groups != 0)
      throw ConfigError(fmt::format("{}: moe_router_num_groups {} does not divide num_experts {}",
                                    at("moe_router_num_groups"), e.num_groups, E));
    if (e.group_topk > e.num_groups)
      throw ConfigError(fmt::format("{}: moe_router_group_topk {} is more than moe_router_num_groups {}",
                                    at("moe_router_group_topk"), e.group_topk, e.num_groups));
    if (e.topk % e.group_topk != 0 || e.topk > e.group_topk * (E / e.num_groups))
      throw ConfigError(fmt::format(
          "{}: moe_router_topk {} must be a multiple of moe_router_group_topk {} and fit in the kept groups "
          "({} experts)",
          at("moe_router_topk"), e.topk, e.group_topk, e.group_topk * (E / e.num_groups)));
  }
  if (e.shared_expert_gate && e.shared_ffn_hidden_size == 0)
    throw ConfigError(
        fmt::format("{}: moe_shared_expert_gate needs a shared expert "
                    "(moe_shared_expert_intermediate_size, {})",
                    at("moe_shared_expert_gate"), at("moe_shared_expert_intermediate_size")));
  if (!k.is_null("moe_expert_capacity_factor") && e.capacity_factor <= 0)
    throw ConfigError(fmt::format("{}: moe_expert_capacity_factor {} must be > 0 (null: dropless)",
                                  at("moe_expert_capacity_factor"), e.capacity_factor));
  if (e.pad_to_capacity && e.capacity_factor <= 0)
    throw ConfigError(fmt::format("{}: moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor",
                                  at("moe_pad_expert_input_to_capacity")));
  if (e.aux_loss_coeff < 0)
    throw ConfigError(
        fmt::format("{}: moe_aux_loss_coeff {} must be >= 0", at("moe_aux_loss_coeff"), e.aux_loss_coeff));
  if (e.moe_layers() == 0)
    throw ConfigError(fmt::format("{}: num_experts is {} but moe_layer_freq ({}) makes no layer MoE",
                                  at("num_experts"), E, at("moe_layer_freq")));
  rc.set_source("moe.num_experts", "num_experts", k.origin("num_experts"));
}

}  // namespace primus::config
