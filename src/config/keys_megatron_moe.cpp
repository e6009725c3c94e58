// Megatron-dialect keys of mixture-of-experts models (docs/moe.md) and multi-token prediction. The MoE layer
// (router, dropless or capacity routing, grouped-GEMM experts, shared experts, aux/z losses, expert bias) is
// implemented on one rank; expert parallelism and the rest are refused or inert, each with its reason.
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_megatron_moe_keys(KeyTable& t) {
  t.group("mixture of experts");
  t.add(impl("num_experts", kI, "null", "experts per MoE layer (null: a dense model)").check(positive()));
  t.add(impl("moe_layer_freq", kA, "1",
             "which layers are MoE: every N-th (an int) or a per-layer 0/1 list, also as Megatron's list "
             "expression string such as \"([0]*3+[1]*58)\""));
  t.add(
      impl("moe_ffn_hidden_size", kI, "null", "expert MLP width (null: ffn_hidden_size)").check(positive()));
  t.add(impl("moe_shared_expert_intermediate_size", kI, "null",
             "shared-expert MLP width (null: no shared expert)")
            .check(positive()));
  t.add(impl("moe_shared_expert_gate", kB, "false",
             "sigmoid gate on the shared expert's output, one logit per token (Qwen2-MoE)"));
  t.add(impl("moe_router_topk", kI, "2", "experts per token").check(positive()));
  t.add(impl("moe_router_score_function", kS, "softmax",
             "router scores: softmax | sigmoid (| sqrtsoftplus, DeepSeek-V4)")
            .supports(strings({"softmax", "sigmoid"}), "softmax and sigmoid are implemented"));
  t.add(impl("moe_router_pre_softmax", kB, "false",
             "softmax over all experts before top-k (else top-k of the logits, then softmax over k)"));
  t.add(impl("moe_router_num_groups", kI, "null", "expert groups for group-limited routing (DeepSeek)")
            .check(positive()));
  t.add(impl("moe_router_group_topk", kI, "null", "groups kept per token in group-limited routing")
            .check(positive()));
  t.add(impl("moe_router_topk_scaling_factor", kF, "null", "scale of the routed weights (null: 1)")
            .check(positive()));
  t.add(impl("moe_router_enable_expert_bias", kB, "false",
             "aux-loss-free balancing: a per-expert bias on the selection scores, updated every step"));
  t.add(impl("moe_router_bias_update_rate", kF, "1.0e-3", "step of the expert-bias update")
            .check(non_negative()));
  t.add(impl("moe_router_load_balancing_type", kS, "aux_loss", "aux_loss | seq_aux_loss | none (| sinkhorn)")
            .check(one_of({"aux_loss", "seq_aux_loss", "none", "sinkhorn", "global_aux_loss"}))
            .supports(strings({"aux_loss", "seq_aux_loss", "none"}),
                      "aux_loss, seq_aux_loss and none are implemented"));
  t.add(impl("moe_aux_loss_coeff", kA, "0.0", "load-balancing loss weight (a number; 0: none)"));
  t.add(impl("moe_z_loss_coeff", kF, "null", "router z-loss weight (null: none)").check(non_negative()));
  t.add(impl("moe_expert_capacity_factor", kF, "null", "expert capacity factor (null: dropless)"));
  t.add(impl("moe_pad_expert_input_to_capacity", kB, "false", "pad every expert's input to its capacity"));
  t.add(
      impl("moe_token_drop_policy", kS, "probs", "which entries an over-full expert drops: probs | position")
          .check(one_of({"probs", "position"})));
  t.add(impl("moe_router_force_load_balancing", kB, "false",
             "benchmarking aid: balanced expert loads whatever the router learned "
             "(moe_router_force_load_balancing_type; docs/moe.md)"));
  // Primus's module default (primus_megatron_module.yaml) is even; its code falls back to uniform only when
  // the argument is missing altogether.
  t.add(impl("moe_router_force_load_balancing_type", kS, "even",
             "forced balancing: even (round-robin dispatch, the router's top-k weights carried; Primus) | "
             "uniform (routing by random logits; Megatron)")
            .check(one_of({"even", "uniform"})));
  t.add(impl("moe_per_layer_logging", kB, "false",
             "per-layer MoE statistics in the log line (metrics.jsonl always has them)"));

  t.add(impl("mtp_num_layers", kI, "null", "multi-token-prediction depths (DeepSeek-V3 MTP; null: none)")
            .check(non_negative()));
  t.add(impl("mtp_loss_scaling_factor", kF, "0.1",
             "weight of the mean MTP loss over depths, added to the LM loss (docs/mla.md)")
            .check(non_negative()));
  t.add(unsup("moe_input_jitter_eps", kF, "null", "router input jitter"));
  t.add(unsup("moe_use_upcycling", kB, "false", "upcycle a dense checkpoint into MoE"));
  t.add(impl("router_logit_softcapping", kF, "null",
             "soft-cap the router's logits to (-c, c): c tanh(z / c) before routing (Grok-2; null or 0: off, "
             "as Primus)")
            .check(non_negative()));
  t.add(unsup_unless_default("moe_router_dtype", kS, "null", "router compute dtype: fp32 (ours) | fp64")
            .supports(null_or({"fp32"}), "fp32 (the router always computes its scores in fp32)"));

  add_all(t, kWhyMoeAlways,
          {{"moe_grouped_gemm", kB, "false", "grouped GEMM for the experts"},
           {"moe_use_legacy_grouped_gemm", kB, "false", "legacy grouped-GEMM implementation"},
           {"moe_permute_fusion", kB, "false", "fused token permutation"},
           {"moe_use_fused_router_with_aux_score", kB, "false", "Primus-Turbo fused router"},
           {"disable_primus_topk_router", kB, "false", "use Megatron's router instead of Primus's"},
           {"use_deprecated_20241209_moe_layer", kB, "false", "Primus's older MoE layer"}});
  add_all(t, kWhyMoeEp1,
          {{"moe_token_dispatcher_type", kS, "allgather", "allgather | alltoall | flex | alltoall_seq"},
           {"moe_enable_deepep", kB, "false", "DeepEP dispatcher"},
           {"moe_shared_expert_overlap", kB, "false", "overlap the shared expert with dispatch"},
           {"delay_wgrad_compute", kB, "false", "delay expert weight-gradient compute for A2A overlap"},
           {"overlap_moe_expert_parallel_comm", kB, "false", "overlap expert-parallel all-to-all"},
           {"patch_moe_overlap", kB, "false", "Primus MoE communication/compute overlap"}});
  add_all(t, kWhyMoE,
          {{"moe_layer_recompute", kB, "false", "recompute MoE layers"},
           {"moe_extended_tp", kB, "false", "extended tensor parallelism for experts"}});
  // Experts split by tensor parallelism (Megatron's ETP): over the TP ranks (null: Megatron's default, = TP);
  // another degree (ETP 1 with TP > 1 folds the tp ranks into the expert grid) is a layout not built yet.
  t.add(unsup_unless_default("expert_tensor_parallel_size", kI, "null",
                             "tensor-parallel degree inside experts (ETP)")
            .supports(
                [](const Value& v, const KeyLookup& k) {
                  return v.is_null() ||
                         (v.is_int() && v.as_int() == k.int_or("tensor_model_parallel_size", 1));
                },
                "null or the tensor-parallel degree (experts split over every TP rank)"));
}

}  // namespace primus::config::keys
