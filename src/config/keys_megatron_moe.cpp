// Megatron-dialect keys of mixture-of-experts models and multi-token prediction. MoE is not supported yet:
// `num_experts` (and `mtp_num_layers`) fail when set; every MoE knob has no effect until then.
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_megatron_moe_keys(KeyTable& t) {
  t.group("mixture of experts");
  t.add(unsup("num_experts", kI, "null", "experts per MoE layer (MoE models)"));
  t.add(unsup("mtp_num_layers", kI, "null", "multi-token-prediction depth (DeepSeek-V3 MTP)"));
  t.add(noeff("mtp_loss_scaling_factor", kF, "0.1", "applies only with mtp_num_layers, not supported yet",
              "weight of the MTP loss"));
  static const Knob kKnobs[] = {
      {"moe_layer_freq", kA, "1", "which layers are MoE (int period or a Python list expression)"},
      {"moe_ffn_hidden_size", kI, "null", "expert MLP width"},
      {"moe_shared_expert_overlap", kB, "false", "overlap the shared expert with dispatch"},
      {"moe_shared_expert_intermediate_size", kI, "null", "shared-expert MLP width"},
      {"moe_grouped_gemm", kB, "false", "grouped GEMM for the experts"},
      {"moe_router_load_balancing_type", kS, "aux_loss", "aux_loss | seq_aux_loss | sinkhorn | none"},
      {"moe_router_dtype", kS, "null", "router compute dtype: fp32 | fp64"},
      {"moe_router_score_function", kS, "softmax", "router scores: softmax | sigmoid"},
      {"moe_router_topk", kI, "2", "experts per token"},
      {"moe_router_pre_softmax", kB, "false", "softmax before top-k"},
      {"moe_router_num_groups", kI, "null", "expert groups for group-limited routing"},
      {"moe_router_group_topk", kI, "null", "groups kept per token"},
      {"moe_router_topk_scaling_factor", kF, "null", "scale of the routed weights"},
      {"moe_router_enable_expert_bias", kB, "false", "aux-loss-free expert bias (noaux_tc)"},
      {"moe_router_bias_update_rate", kF, "1.0e-3", "update rate of the expert bias"},
      {"moe_use_legacy_grouped_gemm", kB, "false", "legacy grouped-GEMM implementation"},
      {"moe_aux_loss_coeff", kF, "0.0", "load-balancing loss weight"},
      {"moe_z_loss_coeff", kF, "null", "router z-loss weight"},
      {"moe_input_jitter_eps", kF, "null", "router input jitter"},
      {"moe_token_dispatcher_type", kS, "allgather", "allgather | alltoall | flex | alltoall_seq"},
      {"moe_enable_deepep", kB, "false", "DeepEP dispatcher"},
      {"moe_per_layer_logging", kB, "false", "per-layer MoE statistics"},
      {"moe_expert_capacity_factor", kF, "null", "expert capacity factor (token dropping)"},
      {"moe_pad_expert_input_to_capacity", kB, "false", "pad expert inputs to capacity"},
      {"moe_token_drop_policy", kS, "probs", "which tokens to drop: probs | position"},
      {"moe_layer_recompute", kB, "false", "recompute MoE layers"},
      {"moe_extended_tp", kB, "false", "extended tensor parallelism for experts"},
      {"moe_use_upcycling", kB, "false", "upcycle a dense checkpoint into MoE"},
      {"moe_permute_fusion", kB, "false", "fused token permutation"},
      {"moe_router_force_load_balancing", kB, "false", "route tokens uniformly (benchmarking)"},
      {"moe_router_force_load_balancing_type", kS, "even", "forced balancing: even | uniform"},
      {"moe_use_fused_router_with_aux_score", kB, "false", "Primus-Turbo fused router"},
      {"disable_primus_topk_router", kB, "false", "use Megatron's router instead of Primus's"},
      {"use_deprecated_20241209_moe_layer", kB, "false", "Primus's older MoE layer"},
      {"router_logit_softcapping", kF, "null", "tanh soft-capping of router logits"},
      {"delay_wgrad_compute", kB, "false", "delay expert weight-gradient compute for A2A overlap"},
      {"overlap_moe_expert_parallel_comm", kB, "false", "overlap expert-parallel all-to-all"},
      {"patch_moe_overlap", kB, "false", "Primus MoE communication/compute overlap"},
      {"expert_tensor_parallel_size", kI, "null", "tensor-parallel degree inside experts"},
  };
  for (const Knob& k : kKnobs) t.add(noeff(k.name, k.type, k.def, kWhyMoE, k.doc));
}

}  // namespace primus::config::keys
