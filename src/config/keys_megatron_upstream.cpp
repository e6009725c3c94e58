// Megatron-dialect keys that close the table: every argument of Megatron-LM's parser at the commit Primus
// pins (third_party/Megatron-LM d3528a2: megatron/training/arguments.py, including the TransformerConfig and
// training-config dataclasses it turns into arguments) and every key Primus's own megatron presets and
// examples set (hybrid / Mamba / linear-attention families, DeepSeek-V4, Kimi-K3, FLA switches, ...) that the
// other tables do not declare. Feature switches are "not supported yet" (they load at their default or off);
// the knobs of those features have no effect until the feature exists.
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_megatron_upstream_keys(KeyTable& t) {
  t.group("features not supported yet (Megatron-LM and Primus families)");
  t.add(unsup_unless_default("softmax_type", kA, "vanilla",
                             "attention softmax: vanilla | off-by-one | learnable (sinks)"));
  t.add(unsup_unless_default("layernorm_zero_centered_gamma", kB, "false",
                             "norm weights stored as (gamma - 1) (--apply-layernorm-1p)"));
  t.add(unsup_unless_default("glu_linear_offset", kF, "0.0", "offset added to the linear half of a GLU"));
  t.add(unsup_unless_default("activation_func_clamp_value", kF, "null", "clamp of the MLP activation"));
  t.add(unsup_unless_default("qk_clip", kB, "false", "QK-clip of attention logits (Kimi/MuonClip)"));
  t.add(unsup_unless_default("qk_clip_alpha", kF, "0.5", "Megatron --qk-clip-alpha"));
  t.add(unsup_unless_default("qk_clip_threshold", kF, "100", "Megatron --qk-clip-threshold"));
  t.add(unsup_unless_default("attention_output_gate", kB, "false", "gated attention output"));
  t.add(unsup_unless_default("experimental_attention_variant", kA, "null",
                             "experimental attention (gated delta net, DSA sparse attention, KDA)"));
  t.add(unsup_unless_default("embedding_init_method_std", kF, "null", "separate init std for the embedding"));
  t.add(unsup_unless_default("use_mup", kB, "false", "maximal-update parametrisation (muP)"));
  t.add(unsup_unless_default("mup_width_mult", kF, "1.0", "Megatron --mup-width-mult"));
  t.add(unsup_unless_default("mup_base_hidden_size", kI, "null", "Megatron --mup-base-hidden-size"));
  t.add(unsup_unless_default("mup_embedding_mult", kF, "1.0", "Megatron --mup-embedding-mult"));
  t.add(unsup_unless_default("mup_output_mult", kF, "1.0", "Megatron --mup-output-mult"));
  t.add(unsup_unless_default("mup_base_head_dim", kF, "null", "Megatron --mup-base-head-dim"));
  t.add(unsup_unless_default("mup_attn_scale_power", kF, "1.0", "Megatron --mup-attn-scale-power"));
  t.add(unsup_unless_default(
      "is_hybrid_model", kB, "false",
      "hybrid Mamba/attention model (Megatron hybrid models, Primus zebra_llama / mamba)"));
  t.add(unsup_unless_default("window_size", kA, "null", "sliding-window attention"));
  t.add(unsup_unless_default("window_attn_skip_freq", kA, "null", "layers without the attention window"));
  t.add(
      unsup_unless_default("apply_wd_to_qk_layernorm", kB, "false", "weight decay on the q/k norm weights"));
  t.add(unsup_unless_default("no_weight_decay_cond_type", kS, "null", "which parameters skip weight decay"));
  t.add(unsup_unless_default("fim_data", kB, "false", "fill-in-the-middle data transformation"));
  t.add(unsup_unless_default("fim_rate", kF, "0.5", "Megatron --fim-rate"));
  t.add(unsup_unless_default("fim_spm_rate", kF, "0.5", "Megatron --fim-spm-rate"));
  t.add(unsup_unless_default("fim_split_sample", kS, "null", "Megatron --fim-split-sample"));
  t.add(unsup_unless_default("fim_fragment_rate", kF, "null", "Megatron --fim-fragment-rate"));
  t.add(unsup_unless_default("fim_no_prefix", kS, "null", "Megatron --fim-no-prefix"));
  t.add(unsup_unless_default("fim_prefix_token", kS, "null", "Megatron --fim-prefix-token"));
  t.add(unsup_unless_default("fim_middle_token", kS, "null", "Megatron --fim-middle-token"));
  t.add(unsup_unless_default("fim_suffix_token", kS, "null", "Megatron --fim-suffix-token"));
  t.add(unsup_unless_default("fim_pad_token", kS, "null", "Megatron --fim-pad-token"));
  t.add(unsup_unless_default("fim_eod_token", kS, "null", "Megatron --fim-eod-token"));
  t.add(unsup_unless_default("linear_attention_freq", kA, "null", "every n-th layer uses linear attention"));
  t.add(unsup_unless_default("hybrid_layer_pattern", kS, "null", "layer pattern of a hybrid model"));
  t.add(
      unsup_unless_default("hybrid_override_pattern", kS, "null", "layer pattern of a hybrid model (M/*/-)"));
  t.add(
      unsup_unless_default("hc_mult", kI, "1", "hyper-connection streams (DeepSeek-V4; 1 = plain residual)"));
  t.add(unsup_unless_default("swiglu_limit", kF, "null", "clamp of SwiGLU inputs (DeepSeek-V4, gpt-oss)"));
  t.add(unsup_unless_default("v4_grouped_experts_support_clamped_swiglu", kB, "null",
                             "clamped SwiGLU in DeepSeek-V4 grouped experts"));
  t.add(unsup_unless_default("activation_situ_beta", kF, "null", "SiTU activation beta (Kimi-K3)"));
  t.add(unsup_unless_default("activation_situ_linear_beta", kF, "null", "SiTU linear beta (Kimi-K3)"));
  t.add(unsup_unless_default("activation_func", kA, "null",
                             "MLP activation function (Primus; swiglu, gelu, ...)"));
}

void add_megatron_upstream_knobs(KeyTable& t) {
  t.group("other Megatron-LM and Primus settings");
  add_all(t, kWhyCP,
          {
              {"max_seqlen_per_dp_cp_rank", kI, "null", "Megatron --max-seqlen-per-dp-cp-rank"},
              {"hybrid_context_parallel", kB, "false", "Megatron --hybrid-context-parallel"},
          });
  add_all(t, kWhyPP,
          {
              {"ep_overlap_early_attn_memory_release", kB, "false",
               "Megatron --ep-overlap-early-attn-memory-release"},
              {"overlap_p2p_comm_warmup_flush", kB, "null", "Megatron --overlap-p2p-comm-warmup-flush"},
          });
  // Multi-token prediction itself is implemented (keys_megatron_moe.cpp); these are its variants.
  add_all(t, kWhyPP, {{"mtp_standalone", kB, "false", "Megatron --mtp-standalone (MTP on its own stage)"}});
  t.add(unsup("mtp_use_repeated_layer", kB, "false",
              "Megatron --mtp-use-repeated-layer: one layer shared by "
              "all MTP depths"));
  t.add(unsup("mtp_hybrid_override_pattern", kS, "null", "Megatron --mtp-hybrid-override-pattern"));
  t.add(unsup("mtp_use_separate_hc_head", kB, "null", "Primus mtp_use_separate_hc_head (DeepSeek-V4)"));
  t.add(unsup("num_nextn_predict_layers", kA, "null",
              "Primus num_nextn_predict_layers (Kimi's spelling of mtp_num_layers)"));
  t.add(unsup("mtp_layer_type", kA, "null", "Primus mtp_layer_type (Kimi K3: which layer kind MTP mirrors)"));
  add_all(t, kWhyOffload,
          {
              {"cpu_offloading_num_layers", kI, "0", "Megatron --cpu-offloading-num-layers"},
              {"fine_grained_activation_offloading", kB, "false",
               "Megatron --fine-grained-activation-offloading"},
              {"offload_modules", kA, "null", "Megatron --offload-modules"},
              {"min_offloaded_tensor_size", kI, "null", "Megatron --min-offloaded-tensor-size"},
          });
  add_all(t, kWhyAttnVariant,
          {
              {"dsa_indexer_n_heads", kI, "null", "Megatron --dsa-indexer-n-heads"},
              {"dsa_indexer_head_dim", kI, "null", "Megatron --dsa-indexer-head-dim"},
              {"dsa_indexer_topk", kI, "null", "Megatron --dsa-indexer-topk"},
              {"dsa_indexer_loss_coeff", kF, "null", "Megatron --dsa-indexer-loss-coeff"},
              {"dsa_indexer_use_sparse_loss", kB, "false", "Megatron --dsa-indexer-use-sparse-loss"},
              {"hc_sinkhorn_iters", kI, "null", "Primus hc_sinkhorn_iters"},
              {"hc_eps", kF, "null", "Primus hc_eps"},
              {"hc_use_sinkhorn", kB, "null", "Primus hc_use_sinkhorn"},
              {"hybrid_attention_enabled", kB, "null", "Primus hybrid_attention_enabled"},
              {"compress_ratios", kA, "null", "Primus compress_ratios"},
              {"compress_rope_theta", kF, "null", "Primus compress_rope_theta"},
              {"index_topk", kI, "null", "Primus index_topk"},
              {"index_head_dim", kI, "null", "Primus index_head_dim"},
              {"index_n_heads", kI, "null", "Primus index_n_heads"},
              {"attn_sliding_window", kI, "null", "Primus attn_sliding_window"},
              {"attn_sink", kB, "null", "Primus attn_sink"},
              {"use_v4_attention_backend", kA, "null", "Primus use_v4_attention_backend"},
              {"use_v4_csa_attention_backend", kA, "null", "Primus use_v4_csa_attention_backend"},
              {"use_v4_fp8_indexer", kB, "null", "Primus use_v4_fp8_indexer"},
              {"v4_indexer_distill_loss_coeff", kF, "null", "Primus v4_indexer_distill_loss_coeff"},
              {"use_v4_compiled_sinkhorn", kB, "null", "Primus use_v4_compiled_sinkhorn"},
              {"o_groups", kI, "null", "Primus o_groups"},
              {"o_lora_rank", kI, "null", "Primus o_lora_rank"},
              {"num_hash_layers", kI, "null", "Primus num_hash_layers"},
              {"attn_res_block_size", kI, "null", "Primus attn_res_block_size"},
          });
  add_all(t, kWhyHybrid,
          {
              {"linear_conv_kernel_dim", kI, "4", "Megatron --linear-conv-kernel-dim"},
              {"linear_key_head_dim", kI, "128", "Megatron --linear-key-head-dim"},
              {"linear_value_head_dim", kI, "128", "Megatron --linear-value-head-dim"},
              {"linear_num_key_heads", kI, "16", "Megatron --linear-num-key-heads"},
              {"linear_num_value_heads", kI, "32", "Megatron --linear-num-value-heads"},
              {"mrope_section", kA, "null", "Megatron --mrope-section"},
              {"mamba_state_dim", kI, "128", "Megatron --mamba-state-dim"},
              {"mamba_head_dim", kI, "64", "Megatron --mamba-head-dim"},
              {"mamba_num_groups", kI, "8", "Megatron --mamba-num-groups"},
              {"mamba_num_heads", kI, "null", "Megatron --mamba-num-heads"},
              {"use_mamba_mem_eff_path", kB, "null", "Megatron --use-mamba-mem-eff-path"},
              {"mamba_expand", kI, "null", "Primus mamba_expand"},
              {"mamba_d_conv", kI, "null", "Primus mamba_d_conv"},
              {"disable_mamba_mem_eff_path", kB, "null", "Primus disable_mamba_mem_eff_path"},
              {"hybrid_attention_ratio", kF, "null", "Primus hybrid_attention_ratio"},
              {"hybrid_mlp_ratio", kF, "null", "Primus hybrid_mlp_ratio"},
              {"kda_gate_lower_bound", kF, "null", "Primus kda_gate_lower_bound"},
              {"kda_use_full_rank_gate", kB, "null", "Primus kda_use_full_rank_gate"},
              {"kda_chunk_size", kI, "null", "Primus kda_chunk_size"},
              {"kda_backend", kA, "null", "Primus kda_backend"},
              {"use_fla_fused_swiglu", kA, "null", "Primus use_fla_fused_swiglu"},
              {"use_fla_fused_rmsnorm", kA, "null", "Primus use_fla_fused_rmsnorm"},
              {"use_fla_fused_gated_norm", kA, "null", "Primus use_fla_fused_gated_norm"},
              {"use_fla_short_conv", kA, "null", "Primus use_fla_short_conv"},
              {"use_fla_data", kA, "null", "Primus use_fla_data"},
              {"fla_cache_dir", kA, "null", "Primus fla_cache_dir"},
              {"fused_ce_mode", kA, "null", "Primus fused_ce_mode"},
              {"fused_ce_chunks", kA, "null", "Primus fused_ce_chunks"},
              {"use_short_conv", kB, "null", "Primus use_short_conv"},
              {"use_fla_triton_kda", kB, "null", "Primus use_fla_triton_kda"},
              {"use_fla_kda_in_kernel_gate", kB, "null", "Primus use_fla_kda_in_kernel_gate"},
              {"use_fla_fused_norm_gated", kB, "null", "Primus use_fla_fused_norm_gated"},
              {"use_kimi_k3_attention_backend", kA, "null", "Primus use_kimi_k3_attention_backend"},
          });
  add_all(t, kWhyTE,
          {
              {"disable_bf16_reduced_precision_matmul", kB, "false",
               "Megatron --disable-bf16-reduced-precision-matmul"},
              {"use_fused_weighted_squared_relu", kB, "false", "Megatron --use-fused-weighted-squared-relu"},
              {"use_kitchen_attention", kB, "false", "Megatron --use-kitchen-attention"},
              {"cuda_graph_impl", kA, "none", "Megatron --cuda-graph-impl"},
              {"batch_invariant_mode", kB, "false", "Megatron --batch-invariant-mode"},
              {"disable_jit_fuser", kB, "false", "Megatron --disable-jit-fuser"},
          });
  add_all(t, kWhyRecomputeModules,
          {
              {"recompute_modules", kA, "null", "Megatron --recompute-modules"},
          });
  add_all(
      t, kWhyFp8,
      {
          {"fp8_quantizer_factory", kS, "null", "Megatron --fp8-quantizer-factory"},
          {"kitchen_attention_backend", kA, "sdpa", "Megatron --kitchen-attention-backend"},
          {"fp4_quantizer_factory", kS, "null", "Megatron --fp4-quantizer-factory"},
          {"te_precision_config_file", kA, "null", "Megatron --te-precision-config-file"},
          {"reuse_grad_buf_for_mxfp8_param_ag", kB, "false", "Megatron --reuse-grad-buf-for-mxfp8-param-ag"},
          {"keep_fp8_transpose_cache", kB, "false", "Megatron --keep-fp8-transpose-cache"},
          {"kitchen_config_file", kS, "null", "Megatron --kitchen-config-file"},
          {"kitchen_recipe_number", kI, "null", "Megatron --kitchen-recipe-number"},
          {"disable_delayed_scaling_patches", kB, "null", "Primus disable_delayed_scaling_patches"},
      });
  add_all(t, kWhyMoE,
          {
              {"moe_enable_routing_replay", kB, "false", "Megatron --moe-enable-routing-replay"},
              {"moe_router_padding_for_quantization", kA, "false",
               "Megatron --moe-router-padding-for-quantization"},
              {"moe_router_padding_for_fp8", kA, "false", "Megatron --moe-router-padding-for-fp8"},
              {"moe_flex_dispatcher_backend", kA, "deepep", "Megatron --moe-flex-dispatcher-backend"},
              {"moe_router_fusion", kB, "false", "Megatron --moe-router-fusion"},
              {"moe_apply_probs_on_input", kB, "false", "Megatron --moe-apply-probs-on-input"},
              {"moe_latent_size", kI, "null", "Megatron --moe-latent-size"},
              {"moe_deepep_num_sms", kI, "20", "Megatron --moe-deepep-num-sms"},
              {"moe_hybridep_num_sms", kI, "16", "Megatron --moe-hybridep-num-sms"},
              {"moe_upcycling_granularity", kI, "1", "Megatron --moe-upcycling-granularity"},
              {"routed_expert_hidden_size", kI, "null", "Primus routed_expert_hidden_size"},
              {"latent_moe_use_norm", kB, "null", "Primus latent_moe_use_norm"},
              {"moe_router_bias_update_rule", kA, "null", "Primus moe_router_bias_update_rule"},
              {"quantile_balancing_num_bins", kI, "null", "Primus quantile_balancing_num_bins"},
              {"quantile_balancing_margin_min", kF, "null", "Primus quantile_balancing_margin_min"},
              {"quantile_balancing_margin_max", kF, "null", "Primus quantile_balancing_margin_max"},
              {"quantile_balancing_center_bias", kB, "null", "Primus quantile_balancing_center_bias"},
              {"quantile_balancing_update_interval", kI, "null", "Primus quantile_balancing_update_interval"},
              {"quantile_balancing_ema_decay", kA, "null", "Primus quantile_balancing_ema_decay"},
              {"use_turbo_grouped_mlp", kB, "null", "Primus use_turbo_grouped_mlp"},
              {"moe_router_topk_limited_devices", kA, "null", "Primus moe_router_topk_limited_devices"},
              {"moe_token_dropping", kB, "null", "Primus moe_token_dropping"},
              {"use_turbo_permute_padding", kB, "null", "Primus use_turbo_permute_padding"},
          });
  add_all(
      t, kWhyInference,
      {
          {"moe_pad_experts_for_cuda_graph_inference", kB, "false",
           "Megatron --moe-pad-experts-for-cuda-graph-inference"},
          {"symmetric_ar_type", kA, "null", "Megatron --symmetric-ar-type"},
          {"nccl_all_reduce_for_prefill", kB, "false", "Megatron --nccl-all-reduce-for-prefill"},
          {"inference_fuse_tp_communication", kB, "false", "Megatron --inference-fuse-tp-communication"},
          {"inference_disable_triton_nvls_kernels", kB, "false",
           "Megatron --inference-disable-triton-nvls-kernels"},
          {"inference_disable_torch_grouped_mm", kB, "false",
           "Megatron --inference-disable-torch-grouped-mm"},
          {"mlp_chunks_for_prefill", kI, "1", "Megatron --mlp-chunks-for-prefill"},
          {"use_legacy_static_engine", kB, "false", "Megatron --use-legacy-static-engine"},
          {"inference_dynamic_batching_paused_buffer_size_gb", kF, "null",
           "Megatron --inference-dynamic-batching-paused-buffer-size-gb"},
          {"inference_dynamic_batching_mamba_memory_ratio", kF, "null",
           "Megatron --inference-dynamic-batching-mamba-memory-ratio"},
          {"inference_dynamic_batching_block_size", kI, "256",
           "Megatron --inference-dynamic-batching-block-size"},
          {"inference_dynamic_batching_max_requests", kI, "null",
           "Megatron --inference-dynamic-batching-max-requests"},
          {"inference_dynamic_batching_max_tokens", kI, "null",
           "Megatron --inference-dynamic-batching-max-tokens"},
          {"inference_dynamic_batching_num_cuda_graphs", kI, "16",
           "Megatron --inference-dynamic-batching-num-cuda-graphs"},
          {"inference_dynamic_batching_track_paused_request_events", kB, "false",
           "Megatron --inference-dynamic-batching-track-paused-request-events"},
          {"inference_dynamic_batching_track_generated_token_events", kB, "false",
           "Megatron --inference-dynamic-batching-track-generated-token-events"},
          {"decode_only_cuda_graphs", kB, "false", "Megatron --decode-only-cuda-graphs"},
          {"inference_dynamic_batching_unified_memory_level", kI, "0",
           "Megatron --inference-dynamic-batching-unified-memory-level"},
          {"enable_chunked_prefill", kB, "false", "Megatron --enable-chunked-prefill"},
          {"inference_dynamic_batching_enable_prefix_caching", kA, "false",
           "Megatron --inference-dynamic-batching-enable-prefix-caching"},
          {"inference_dynamic_batching_prefix_caching_eviction_policy", kS, "ref_zero",
           "Megatron --inference-dynamic-batching-prefix-caching-eviction-policy"},
          {"inference_dynamic_batching_prefix_caching_coordinator_policy", kS, "first_prefix_block",
           "Megatron --inference-dynamic-batching-prefix-caching-coordinator-policy"},
          {"inference_dynamic_batching_cuda_graph_max_tokens", kI, "16384",
           "Megatron --inference-dynamic-batching-cuda-graph-max-tokens"},
          {"inference_dynamic_batching_cuda_graph_mixed_prefill_count", kI, "16",
           "Megatron --inference-dynamic-batching-cuda-graph-mixed-prefill-count"},
          {"inference_logging_step_interval", kI, "0", "Megatron --inference-logging-step-interval"},
          {"inference_text_gen_server_logging", kA, "false", "Megatron --inference-text-gen-server-logging"},
          {"inference_wandb_logging", kA, "false", "Megatron --inference-wandb-logging"},
          {"inference_coordinator_port", kI, "null", "Megatron --inference-coordinator-port"},
          {"mamba_inference_conv_states_dtype", kS, "bf16", "Megatron --mamba-inference-conv-states-dtype"},
          {"mamba_inference_ssm_states_dtype", kS, "bf16", "Megatron --mamba-inference-ssm-states-dtype"},
      });
  add_all(t, kWhyLogExtra,
          {
              {"log_memory_interval", kI, "null", "Megatron --log-memory-interval"},
              {"log_device_memory_used", kB, "false", "Megatron --log-device-memory-used"},
              {"log_max_attention_logit", kB, "false", "Megatron --log-max-attention-logit"},
              {"log_energy", kB, "false", "Megatron --log-energy"},
              {"save_wgrads_interval", kI, "null", "Megatron --save-wgrads-interval"},
              {"save_dgrads_interval", kI, "null", "Megatron --save-dgrads-interval"},
              {"dump_param_to_param_group_map", kS, "null", "Megatron --dump-param-to-param-group-map"},
              {"empty_cache_interval", kI, "null", "Primus empty_cache_interval"},
          });
  add_all(t, kWhyProfile,
          {
              {"use_nsys_profiler", kB, "null", "Megatron --use-nsys-profiler"},
              {"pytorch_profiler_collect_shapes", kB, "false", "Megatron --pytorch-profiler-collect-shapes"},
              {"pytorch_profiler_collect_callstack", kB, "false",
               "Megatron --pytorch-profiler-collect-callstack"},
              {"pytorch_profiler_collect_chakra", kB, "false", "Megatron --pytorch-profiler-collect-chakra"},
              {"record_shapes", kB, "null", "Primus record_shapes"},
              {"nvtx_ranges", kB, "null", "Primus nvtx_ranges"},
          });
  add_all(
      t, kWhyResilience,
      {
          {"exit_signal", kA, "null", "Megatron --exit-signal"},
          {"exit_signal_handler_for_dataloader", kB, "false",
           "Megatron --exit-signal-handler-for-dataloader"},
          {"inprocess_max_iterations", kI, "null", "Megatron --inprocess-max-iterations"},
          {"inprocess_monitor_thread_interval", kF, "1.0", "Megatron --inprocess-monitor-thread-interval"},
          {"inprocess_monitor_process_interval", kF, "1.0", "Megatron --inprocess-monitor-process-interval"},
          {"inprocess_progress_watchdog_interval", kF, "1.0",
           "Megatron --inprocess-progress-watchdog-interval"},
          {"inprocess_heartbeat_interval", kF, "30", "Megatron --inprocess-heartbeat-interval"},
          {"inprocess_soft_timeout", kF, "60", "Megatron --inprocess-soft-timeout"},
          {"inprocess_hard_timeout", kF, "90", "Megatron --inprocess-hard-timeout"},
          {"inprocess_heartbeat_timeout", kF, "60", "Megatron --inprocess-heartbeat-timeout"},
          {"inprocess_barrier_timeout", kF, "120", "Megatron --inprocess-barrier-timeout"},
          {"inprocess_completion_timeout", kF, "120", "Megatron --inprocess-completion-timeout"},
          {"inprocess_last_call_wait", kF, "1", "Megatron --inprocess-last-call-wait"},
          {"inprocess_termination_grace_time", kF, "1", "Megatron --inprocess-termination-grace-time"},
          {"inprocess_granularity", kS, "node", "Megatron --inprocess-granularity"},
          {"inprocess_active_world_size", kI, "null", "Megatron --inprocess-active-world-size"},
          {"inprocess_empty_cuda_cache", kB, "false", "Megatron --inprocess-empty-cuda-cache"},
          {"ft_num_warmup_iters", kI, "5", "Megatron --ft-num-warmup-iters"},
          {"fake_process_group", kB, "false", "Megatron --fake-process-group"},
      });
  add_all(t, kWhyCkptImpl,
          {
              {"ckpt_fully_parallel_load_exchange_algo", kA, "broadcast",
               "Megatron --ckpt-fully-parallel-load-exchange-algo"},
              {"ckpt_fully_parallel_save_process_group", kA, "dp",
               "Megatron --ckpt-fully-parallel-save-process-group"},
              {"ckpt_fully_parallel_load_process_group", kA, "dp",
               "Megatron --ckpt-fully-parallel-load-process-group"},
              {"strict_fsdp_dtensor_load", kB, "true", "Megatron --strict-fsdp-dtensor-load"},
              {"distrib_optim_fully_reshardable_mem_efficient", kB, "false",
               "Megatron --distrib-optim-fully-reshardable-mem-efficient"},
              {"dist_ckpt_workers", kI, "1", "Megatron --dist-ckpt-workers"},
              {"enable_msc", kB, "true", "Megatron --enable-msc"},
          });
  add_all(
      t, kWhyWorld1,
      {
          {"distributed_timeout_seconds_after_init", kI, "null",
           "Megatron --distributed-timeout-seconds-after-init"},
          {"ddp_reduce_scatter_with_fp32_accumulation", kB, "false",
           "Megatron --ddp-reduce-scatter-with-fp32-accumulation"},
          {"nccl_ub", kB, "false", "Megatron --nccl-ub"},
          {"disable_symmetric_registration", kB, "false", "Megatron --disable-symmetric-registration"},
          {"fsdp_manual_registration", kB, "false", "Megatron --fsdp-manual-registration"},
          {"create_all_gather_group", kB, "false", "Megatron --create-all-gather-group"},
          {"outer_dp_sharding_strategy", kS, "no_shard", "Megatron --outer-dp-sharding-strategy"},
          {"fsdp_double_buffer", kB, "false", "Megatron --fsdp-double-buffer"},
          {"enable_full_sharding_in_hsdp", kB, "false", "Megatron --enable-full-sharding-in-hsdp"},
          {"torch_fsdp2_reshard_after_forward", kB, "true", "Megatron --torch-fsdp2-reshard-after-forward"},
          {"megatron_fsdp_main_params_dtype", kA, "fp32", "Megatron --megatron-fsdp-main-params-dtype"},
          {"megatron_fsdp_main_grads_dtype", kA, "fp32", "Megatron --megatron-fsdp-main-grads-dtype"},
          {"megatron_fsdp_grad_comm_dtype", kA, "fp32", "Megatron --megatron-fsdp-grad-comm-dtype"},
      });
  add_all(t, kWhyOtherModel,
          {
              {"relative_attention_num_buckets", kI, "32", "Megatron --relative-attention-num-buckets"},
              {"relative_attention_max_distance", kI, "128", "Megatron --relative-attention-max-distance"},
              {"no_rope_freq", kA, "null", "Megatron --no-rope-freq"},
          });
  add_all(t, kWhyRL,
          {
              {"rl_default_temperature", kF, "1.0", "Megatron --rl-default-temperature"},
              {"rl_default_top_p", kF, "0", "Megatron --rl-default-top-p"},
              {"rl_default_top_k", kI, "-1", "Megatron --rl-default-top-k"},
              {"rl_kv_cache_management_mode", kS, "persist", "Megatron --rl-kv-cache-management-mode"},
              {"rl_persist_cuda_graphs", kB, "false", "Megatron --rl-persist-cuda-graphs"},
              {"rl_use_sequence_packing", kB, "false", "Megatron --rl-use-sequence-packing"},
              {"rl_sequence_packing_max_sequences_per_bin", kI, "50",
               "Megatron --rl-sequence-packing-max-sequences-per-bin"},
              {"rl_sequence_packing_algo", kS, "fifo", "Megatron --rl-sequence-packing-algo"},
              {"rl_training_cuda_graphs", kB, "false", "Megatron --rl-training-cuda-graphs"},
              {"rl_inference_tensor_model_parallel_size", kI, "null",
               "Megatron --rl-inference-tensor-model-parallel-size"},
              {"rl_inference_pipeline_model_parallel_size", kI, "null",
               "Megatron --rl-inference-pipeline-model-parallel-size"},
              {"rl_inference_expert_model_parallel_size", kI, "null",
               "Megatron --rl-inference-expert-model-parallel-size"},
              {"rl_inference_expert_tensor_model_parallel_size", kI, "null",
               "Megatron --rl-inference-expert-tensor-model-parallel-size"},
              {"rl_inference_model_unified_memory_level", kI, "0",
               "Megatron --rl-inference-model-unified-memory-level"},
              {"rl_offload_inference_model_weights_when_idle", kA, "false",
               "Megatron --rl-offload-inference-model-weights-when-idle"},
              {"refit_method", kS, "gloo", "Megatron --refit-method"},
              {"rl_verify_model_weights_swap", kA, "false", "Megatron --rl-verify-model-weights-swap"},
              {"rl_parallel_generation_tasks", kI, "512", "Megatron --rl-parallel-generation-tasks"},
              {"rl_skip_bos_token", kB, "false", "Megatron --rl-skip-bos-token"},
          });
  add_all(t, kWhyTokenizerOther,
          {
              {"tokenizer_metadata", kS, "null", "Megatron --tokenizer-metadata"},
              {"tokenizer_special_tokens", kA, "null", "Megatron --tokenizer-special-tokens"},
              {"tokenizer_sentencepiece_legacy", kB, "false", "Megatron --tokenizer-sentencepiece-legacy"},
              {"tokenizer_hf_use_fast", kB, "true", "Megatron --tokenizer-hf-use-fast"},
              {"tokenizer_hf_include_special_tokens", kB, "true",
               "Megatron --tokenizer-hf-include-special-tokens"},
              {"tokenizer_hf_no_use_fast", kB, "false", "Megatron --tokenizer-hf-no-use-fast"},
              {"tokenizer_hf_no_include_special_tokens", kB, "false",
               "Megatron --tokenizer-hf-no-include-special-tokens"},
              {"allow_ambiguous_pad_tokens", kB, "false", "Megatron --allow-ambiguous-pad-tokens"},
          });
  add_all(t, kWhyData,
          {
              {"phase_transition_iterations", kS, "null", "Megatron --phase-transition-iterations"},
              {"per_dataset_sequences_path", kA, "null", "Megatron --per-dataset-sequences-path"},
              {"dataloader_fast_cache_load", kB, "false", "Megatron --dataloader-fast-cache-load"},
              {"dataloader_defer_npy_index_mmap", kB, "false", "Megatron --dataloader-defer-npy-index-mmap"},
              {"object_storage_cache_path", kS, "null", "Megatron --object-storage-cache-path"},
              {"mid_level_dataset_surplus", kF, "0.005", "Megatron --mid-level-dataset-surplus"},
          });
  // Multi-latent attention itself is implemented (keys_megatron_model.cpp); these are its variants.
  add_all(t, kWhyInference, {{"cache_mla_latents", kB, "false", "Megatron --cache-mla-latents"}});
  add_all(t, kWhyFusion, {{"fused_padded_mla_attention", kB, "null", "Primus fused_padded_mla_attention"}});
  t.add(unsup("mla_use_nope", kB, "null", "Primus mla_use_nope (Kimi K3: MLA without RoPE)"));
  t.add(unsup("mla_use_output_gate", kB, "null", "Primus mla_use_output_gate (Kimi K3: gated MLA output)"));
  t.add(unsup("fla_mla_attn", kA, "null", "Primus fla_mla_attn (flash-linear-attention MLA kernels)"));
  add_all(
      t, kWhySft,
      {
          {"sft", kB, "false", "Megatron --sft"},
          {"sft_tokenizer_prompt_format", kS, "nemotron-h-aligned", "Megatron --sft-tokenizer-prompt-format"},
      });
  add_all(t, kWhyInfo,
          {
              {"hf_path", kA, "null", "Primus hf_path"},
          });
  add_all(t, kWhyEnvAsKey,
          {
              {"HSA_NO_SCRATCH_RECLAIM", kI, "null", "Primus HSA_NO_SCRATCH_RECLAIM"},
              {"NVTE_CK_USES_BWD_V3", kI, "null", "Primus NVTE_CK_USES_BWD_V3"},
              {"GPU_MAX_HW_QUEUES", kI, "null", "Primus GPU_MAX_HW_QUEUES"},
              {"CLEAN_DOCKER_CONTAINER", kI, "null", "Primus CLEAN_DOCKER_CONTAINER"},
              {"TURBO_DEEPEEP", kB, "null", "Primus TURBO_DEEPEEP"},
              {"TURBO_GROUPED_MLP", kB, "null", "Primus TURBO_GROUPED_MLP"},
              {"LEGACY_GG", kB, "null", "Primus LEGACY_GG"},
              {"PRIMUS_DETERMINISTIC", kI, "null", "Primus PRIMUS_DETERMINISTIC"},
              {"USING_AIC", kI, "null", "Primus USING_AIC"},
          });
  add_all(t, kWhyDuplicateNan,
          {
              {"check_for_nan_in_loss", kB, "null", "Primus check_for_nan_in_loss"},
          });
}

}  // namespace primus::config::keys
