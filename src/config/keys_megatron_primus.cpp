// Megatron-dialect keys that Primus adds: Primus-Turbo kernels, zero-bubble and custom pipeline schedules,
// ODC communication, torch.compile (primus_turbo.yaml, zero_bubble.yaml, primus_pipeline.yaml,
// torch_compile.yaml, trainer_base.yaml), and the SFT trainer's keys (sft_trainer.yaml).
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_megatron_primus_keys(KeyTable& t) {
  t.group("primus-turbo");
  t.add(unsup("enable_turbo_attention_float8", kB, "false", "FP8 attention (Primus-Turbo)"));
  t.add(unsup("use_sink_attention", kB, "false", "learned attention sinks (GPT-OSS)"));
  t.add(noeff("sink_sliding_window", kI, "0", "applies only with use_sink_attention, not supported yet",
              "sliding window of sink attention"));
  t.add(noeff("sink_window_even_layers_only", kB, "true",
              "applies only with use_sink_attention, not supported yet",
              "sliding window on even layers only"));
  add_all(t, kWhyTurbo,
          {{"enable_primus_turbo", kB, "false", "Primus-Turbo master switch"},
           {"use_turbo_autotune", kB, "false", "Turbo auto-tuning"},
           {"turbo_gemm_backend", kS, "default", "Turbo GEMM backend per precision"},
           {"turbo_grouped_gemm_backend", kS, "default", "Turbo grouped-GEMM backend"},
           {"use_turbo_attention", kB, "false", "Turbo attention kernel"},
           {"use_turbo_gemm", kB, "false", "Turbo GEMM"},
           {"use_turbo_grouped_gemm", kB, "false", "Turbo grouped GEMM"},
           {"turbo_grouped_gemm_without_padding", kB, "false", "grouped GEMM on unpadded token counts"},
           {"use_turbo_fused_act_with_probs", kB, "false", "fused activation with router probabilities"},
           {"use_turbo_rms_norm", kB, "false", "Turbo RMSNorm"},
           {"use_turbo_norm_te_linear", kB, "false", "Turbo RMSNorm inside TE's norm+linear"}});
  add_all(t, kWhyMoE,
          {{"use_turbo_deepep", kB, "false", "Turbo DeepEP dispatcher"},
           {"turbo_deepep_num_cu", kI, "32", "compute units for DeepEP"},
           {"turbo_deepep_use_comm_stream", kB, "false", "DeepEP on its own stream"},
           {"turbo_sync_free_moe_stage", kI, "0", "sync-free MoE stage 0-3"},
           {"use_turbo_mega_moe", kB, "false", "fused MegaMoE layer"},
           {"turbo_mega_moe_precision", kS, "bf16", "MegaMoE expert precision"}});

  t.group("primus pipeline");
  // The keys that pick the schedule (parallel/pipeline_projection.cpp, choose_schedule).
  t.add(impl("patch_zero_bubble", kB, "false", "zero-bubble pipeline patches"));
  t.add(impl("enable_zero_bubble", kB, "true", "zero-bubble schedule (zb-h1)"));
  t.add(impl("zero_bubble_v_schedule", kB, "false", "zero-bubble V schedule (zb-v)"));
  t.add(impl("zero_bubble_v_schedule_mem_setup", kS, "half",
             "V schedule memory: half | min | zb (zb-v runs as zb)"));
  t.add(impl("zero_bubble_max_pending_backward", kA, "auto", "pending backward passes (zb-h1 holds pp)"));
  t.add(impl("enable_1f1b_v", kB, "false", "1F1B V schedule (not generated: refused)"));
  t.add(impl("num_seq_splits", kI, "1", "sequence splits of the pipeline (> 1 not generated: refused)"));
  t.add(impl("patch_primus_pipeline", kB, "false", "Primus pipeline patches"));
  t.add(impl("pp_algorithm", kS, "1f1b-interleaved",
             "1f1b | 1f1b-interleaved | zero-bubble | zero-bubble-heuristic | zbv-formatted"));
  add_all(t, kWhyZeroBubble,
          {{"debug_scheduler_table", kB, "false", "print the schedule table"},
           {"enable_zb_runtime", kB, "true", "unified zero-bubble runtime"},
           {"pre_communication_optimization", kB, "false", "tiny pre-communication"},
           {"zero_bubble_pipeline_timers_start_iter", kI, "100", "auto-schedule timers start"},
           {"zero_bubble_pipeline_timers_end_iter", kI, "110", "auto-schedule timers end"},
           {"zero_bubble_adaptive_memory_limit_percentile", kI, "85", "adaptive memory limit"},
           {"enable_optimizer_post_validation", kB, "false", "post-validated optimizer step"},
           {"enable_exactly_numeric_match", kB, "true", "post-validation matches exactly"},
           {"allow_padding_num_layers", kB, "true", "pad layers to the stage count"},
           {"interleave_group_size", kI, "0", "interleave group size"},
           {"communication_method", kS, "async_p2p", "async_p2p | batch_p2p"},
           {"pp_max_mem", kA, "null", "heuristic: activation memory per stage"},
           {"pp_cost_f", kA, "null", "heuristic: forward cost"},
           {"pp_cost_b", kA, "null", "heuristic: backward cost"},
           {"pp_cost_w", kA, "null", "heuristic: weight-gradient cost"}});

  t.group("ROCm");
  add_all(t, kWhyRocm,
          {{"enable_odc", kB, "false", "ODC on-demand communication (rocSHMEM/XGMI)"},
           {"odc_phase", kI, "2", "ODC wiring depth"},
           {"odc_grad_spike_threshold", kF, "1000.0", "ODC gradient-spike guard"},
           {"odc_p2p_backend", kS, "mori", "ODC backend: mori | rocshmem"},
           {"odc_mori_init", kS, "pg", "MORI init: pg | uid"},
           {"odc_max_buffer_size", kI, "67108864", "ODC buffer bytes"},
           {"odc_rocshmem_gda", kB, "false", "rocSHMEM GPU-direct"},
           {"odc_rocshmem_lib", kS, "null", "rocSHMEM library override"},
           {"odc_gda_rs_blocks", kI, "64", "GDA reduce-scatter blocks"},
           {"odc_gda_pipe", kI, "1", "GDA pipeline depth"},
           {"odc_gda_defer_reduce", kA, "auto", "defer cross-node reduce: auto | 1 | 0"},
           {"odc_gda_warmup_mode", kS, "strided", "GDA warm-up mode"},
           {"odc_gda_stride_bytes", kI, "65536", "GDA warm-up stride"}});

  t.group("torch.compile");
  t.add(section("torch_compile", "Primus torch.compile settings"));
  add_all(t, kWhyTorch,
          {{"torch_compile.enable", kB, "false", "compile the model"},
           {"torch_compile.backend", kS, "inductor", "compile backend"},
           {"torch_compile.mode", kS, "default", "compile mode"},
           {"torch_compile.fullgraph", kB, "false", "require one graph"},
           {"disable_compile_dependencies", kB, "true", "Primus: skip compile dependencies"}});
}

void add_megatron_sft_keys(KeyTable& t) {
  t.group("post-training");
  t.add(impl("stage", kS, "null", "training stage: pretrain (or null) | sft (`train posttrain`)"));
  t.add(impl("sft_dataset_name", kS, "null",
             "SFT data: a JSONL file, a directory of *.jsonl, or a comma list"));
  t.add(impl("sft_conversation_format", kS, "null",
             "SFT record format: alpaca | messages (openai, chatml) | prompt_response | squad (Primus's "
             "\"Context: c Question: q Answer: a\", no chat template) | null (per record)"));
  t.add(impl("sft_dataset_split", kS, "train", "a dataset directory's <split>.jsonl"));
  t.add(impl("enable_packed_sequences", kB, "false", "pack short samples into rows (first-fit-decreasing)"));
  t.add(impl("use_packed_attention", kB, "false",
             "packed samples do not attend to each other and restart their positions"));
  add_all(t, kWhySft,
          {{"enable_odc_lb_mini", kB, "false", "ODC sequence-length load balancing"},
           {"lb_mini_max_token_len", kI, "0", "LB-Mini token cap"},
           {"lb_mini_cost_model", kS, "linear", "LB-Mini cost model"},
           {"sft_bridge_compat_inline_bos", kB, "false", "Megatron-Bridge packing parity"},
           {"sft_sanitize_nan_grads", kB, "false", "zero NaN gradients"}});
  t.add(noeff("enable_fused_linear_ce", kB, "false", kWhyFusion, "chunked linear cross-entropy"));
  t.add(section("lora", "LoRA adapters (post-training)"));
  t.add(impl("lora.enabled", kB, "false", "train LoRA adapters on a frozen base (docs/posttrain.md)"));
  t.add(impl("lora.dim", kI, "32", "LoRA rank r").check(positive()));
  t.add(
      impl("lora.alpha", kF, "32", "LoRA scale numerator: the update is (alpha / r) B A").check(positive()));
  t.add(impl("lora.dropout", kF, "0.0", "dropout on the adapters' input (training forwards)")
            .check(in_range(0.0, 0.95)));
  t.add(unsup("lora.dropout_position", kS, "pre", "where LoRA dropout applies: pre (the adapter's input)",
              strings({"pre"}), "pre"));
  t.add(impl("lora.lora_A_init_method", kS, "xavier", "A init: xavier | kaiming")
            .check(one_of({"xavier", "kaiming"})));
  t.add(unsup("lora.lora_B_init_method", kS, "zero", "B init", strings({"zero"}), "zero"));
  t.add(impl("lora.target_modules", kL, "[]",
             "projections with adapters: linear_qkv, linear_proj, linear_fc1, linear_fc2 (or the HF names "
             "q_proj+k_proj+v_proj, o_proj, gate_proj+up_proj, down_proj); [] = all four"));
}

}  // namespace primus::config::keys
