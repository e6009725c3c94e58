// TorchTitan-dialect keys (`framework: torchtitan`): TorchTitan's sections as Primus's
// modules/torchtitan/pre_trainer.yaml and quantize.yaml lay them out, named "section.key".
#include "config/keys_torchtitan.h"
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_torchtitan_keys(KeyTable& t) {
  add_common_keys(t);

  t.group("job");
  t.add(section("job", "job description"));
  t.add(noeff("job.dump_folder", kS, "./outputs",
              "the run directory is {workspace}/{work_group}/{user_name}/{exp_name}", "output folder"));
  t.add(noeff("job.description", kS, "null", kWhyInfo, "job description"));

  t.group("model");
  t.add(section("model", "model family and size"));
  // TorchTitan's model registry (torchtitan/models/__init__.py) plus Primus's; llama3, qwen3 (dense) and
  // deepseek_v3 (MLA + MoE) are here. The others fail in map_torchtitan with "not supported yet: model NAME".
  t.add(impl("model.name", kS, "llama3", "model family (llama3, qwen3 and deepseek_v3 are implemented)")
            .check(one_of({"llama3", "qwen3", "deepseek_v3", "llama4", "gpt_oss", "flux", "llama3_ft"})));
  t.add(impl("model.flavor", kS, "debugmodel", "size within the family (see docs/configuration.md)"));
  t.add(impl("model.hf_assets_path", kS, "null",
             "HuggingFace model name or folder; gives the vocabulary size "
             "(null: byte tokens)"));
  t.add(impl("model.converters", kL, "[]",
             "model converters: primus_turbo (no effect) | float8 / quantize.linear.float8 (FP8 linears)")
            .supports(
                [](const Value& v, const KeyLookup&) {
                  if (v.is_null()) return true;
                  for (const Value& item : v.items()) {
                    if (!item.is_string()) return false;
                    const std::string& c = item.as_string();
                    if (c != "primus_turbo" && c != "float8" && c != "quantize.linear.float8") return false;
                  }
                  return true;
                },
                "primus_turbo (a kernel switch with no effect here) and float8 / quantize.linear.float8; the "
                "mx converters need Blackwell's MX tensor cores (Hopper has none) and the grouped-GEMM "
                "converters FP8 MoE experts"));

  t.group("training");
  t.add(section("training", "training loop"));
  t.add(impl("training.local_batch_size", kI, "8", "sequences per micro-batch per rank")
            .non_null()
            .check(positive()));
  t.add(impl("training.global_batch_size", kI, "-1", "sequences per step (-1: local_batch_size x DP)")
            .non_null()
            .check([](const Value& v) -> std::string {
              return v.is_int() && v.as_int() != -1 && v.as_int() <= 0 ? "must be -1 or > 0" : "";
            }));
  t.add(impl("training.seq_len", kI, "2048", "tokens per sequence").non_null().check(positive()));
  t.add(impl("training.steps", kI, "10000", "optimizer steps").non_null().check(positive()));
  t.add(impl("training.max_norm", kF, "1.0", "clip the global gradient norm to this (0: off)")
            .check(non_negative()));
  t.add(impl("training.mock_data", kB, "false", "Primus: synthetic random tokens"));
  t.add(impl("training.dataset", kS, "c4", "dataset name; read from training.dataset_path (text) here"));
  t.add(impl("training.dataset_path", kS, "null", "local text file or directory (as text_data_path)"));
  t.add(impl("training.mixed_precision_param", kS, "bfloat16", "parameter compute dtype: bfloat16 | float32")
            .check(one_of({"bfloat16", "float32"})));
  t.add(noeff("training.mixed_precision_reduce", kS, "float32", kWhyWorld1, "gradient reduction dtype"));
  t.add(noeff("training.enable_cpu_offload", kB, "false", kWhyOffload, "FSDP CPU offload"));
  t.add(noeff("training.gc_freq", kI, "50", kWhyTorch, "Python GC period"));
  t.add(noeff("training.gc_debug", kB, "false", kWhyTorch, "Python GC debugging"));

  t.group("optimizer");
  t.add(section("optimizer", "optimizer"));
  t.add(impl("optimizer.name", kS, "AdamW", "optimizer: AdamW | Adam")
            .supports(strings({"AdamW"}), "only AdamW is implemented"));
  t.add(impl("optimizer.lr", kF, "8.0e-4", "peak learning rate").non_null().check(non_negative()));
  t.add(impl("optimizer.eps", kF, "1.0e-8", "Adam epsilon").non_null().check(positive()));
  t.add(impl("optimizer.beta1", kF, "0.9", "Adam beta1").non_null().check(in_range(0, 1)));
  t.add(impl("optimizer.beta2", kF, "0.95", "Adam beta2").non_null().check(in_range(0, 1)));
  t.add(impl("optimizer.weight_decay", kF, "0.1", "decoupled weight decay").non_null().check(non_negative()));
  t.add(noeff("optimizer.implementation", kS, "fused", kWhyTorch, "for-loop | foreach | fused"));
  t.add(unsup("optimizer.early_step_in_backward", kB, "false", "optimizer step inside backward"));

  t.group("lr schedule");
  t.add(section("lr_scheduler", "learning-rate schedule"));
  t.add(
      impl("lr_scheduler.warmup_steps", kI, "200", "linear warm-up steps").non_null().check(non_negative()));
  t.add(impl("lr_scheduler.decay_type", kS, "linear", "decay after warm-up: linear | sqrt | cosine")
            .check(one_of({"linear", "sqrt", "cosine"})));
  t.add(impl("lr_scheduler.min_lr_factor", kF, "0.0", "final lr as a fraction of optimizer.lr")
            .check(in_range(0, 1)));
  t.add(impl("lr_scheduler.decay_ratio", kF, "null",
             "WSD: fraction of steps spent decaying (null: all after warm-up)")
            .check(in_range(0, 1)));

  t.group("debug");
  t.add(section("debug", "debugging and reproducibility"));
  t.add(impl("debug.seed", kI, "null", "random seed (null: 1234)").check(non_negative()));
  t.add(impl("debug.deterministic", kB, "false",
             "bitwise reproducible GPU runs (cuDNN's deterministic attention backward; slower)"));
  t.add(noeff("debug.deterministic_warn_only", kB, "false", kWhyTorch, "warn instead of failing"));
  t.add(impl(
      "debug.moe_force_load_balance", kB, "false",
      "benchmarking aid: round-robin experts weighed by the router's probabilities of them (docs/moe.md)"));

  t.group("parallelism");
  t.add(section("parallelism", "parallel degrees"));
  t.add(impl("parallelism.tensor_parallel_degree", kI, "1",
             "tensor-parallel degree (always with sequence parallelism, as TorchTitan)")
            .non_null()
            .check(positive()));
  t.add(impl("parallelism.context_parallel_degree", kI, "1",
             "context-parallel degree: each sequence split in 2·CP chunks over CP ranks")
            .non_null()
            .check(positive()));
  for (const char* k : {"parallelism.pipeline_parallel_degree"})
    t.add(impl(k, kI, "1", "parallel degree")
              .non_null()
              .check(positive())
              .supports(null_or_int(1), "only 1 for now: pipeline training reads Megatron-dialect configs"));
  t.add(impl("parallelism.expert_parallel_degree", kI, "1",
             "expert-parallel degree: each MoE layer's experts split over this many ranks")
            .non_null()
            .check(positive()));
  t.add(impl("parallelism.data_parallel_replicate_degree", kI, "1", "HSDP replica groups (with FSDP)")
            .non_null()
            .check(positive()));
  t.add(
      impl("parallelism.data_parallel_shard_degree", kI, "-1", "FSDP degree (-1: what the world size leaves)")
          .non_null()
          .check([](const Value& v) -> std::string {
            return v.is_int() && v.as_int() != -1 && v.as_int() <= 0 ? "must be -1 or > 0" : "";
          }));
  t.add(noeff("parallelism.expert_tensor_parallel_degree", kI, "1", kWhyMoE, "TP degree inside experts"));
  add_all(t, kWhyTP, {{"parallelism.disable_loss_parallel", kB, "false", "loss without vocab parallelism"}});
  t.add(impl("parallelism.enable_async_tensor_parallel", kB, "false",
             "async TP: the all-gathers / reduce-scatters in slices under the projections' GEMMs"));
  t.add(impl("parallelism.context_parallel_rotate_method", kS, "allgather",
             "allgather | alltoall (both run as allgather: the same math)"));
  t.add(
      noeff("parallelism.fsdp_reshard_after_forward", kS, "default", kWhyWorld1, "default | always | never"));
  add_all(
      t, kWhyTitanPP,
      {{"parallelism.module_fqns_per_model_part", kL, "null", "modules per pipeline stage"},
       {"parallelism.pipeline_parallel_first_stage_less_layers", kI, "1", "fewer layers on the first stage"},
       {"parallelism.pipeline_parallel_last_stage_less_layers", kI, "1", "fewer layers on the last stage"},
       {"parallelism.pipeline_parallel_layers_per_stage", kI, "null", "layers per stage"},
       {"parallelism.pipeline_parallel_microbatch_size", kI, "1", "pipeline micro-batch size"},
       {"parallelism.pipeline_parallel_schedule", kS, "1F1B", "pipeline schedule"},
       {"parallelism.pipeline_parallel_schedule_csv", kS, "", "schedule from a CSV file"}});

  t.group("checkpoint");
  t.add(section("checkpoint", "checkpointing"));
  t.add(impl("checkpoint.enable", kB, "false",
             "save checkpoints under {run dir}/{checkpoint.folder} and resume"));
  t.add(impl("checkpoint.folder", kS, "checkpoint", "checkpoint folder inside the run directory"));
  t.add(impl("checkpoint.interval", kI, "500", "save every this many steps").check(positive()));
  t.add(impl("checkpoint.initial_load_path", kS, "null", "checkpoint to start from"));
  t.add(
      impl("checkpoint.initial_load_model_only", kB, "true", "load only the weights from initial_load_path"));
  t.add(impl("checkpoint.async_mode", kS, "disabled", "disabled | async | async_with_pinned_mem")
            .check(one_of({"disabled", "async", "async_with_pinned_mem"})));
  t.add(impl("checkpoint.keep_latest_k", kI, "10", "checkpoints kept (0: all)").check(non_negative()));
  t.add(unsup("checkpoint.initial_load_in_hf", kB, "false", "initial checkpoint in HuggingFace format"));
  t.add(unsup("checkpoint.last_save_in_hf", kB, "false", "final checkpoint in HuggingFace format"));
  t.add(unsup("checkpoint.load_step", kI, "-1", "load this step instead of the latest", null_or_int(-1),
              "-1 (latest)"));
  t.add(unsup("checkpoint.exclude_from_loading", kL, "[]", "state left out when loading"));
  t.add(unsup("checkpoint.create_seed_checkpoint", kB, "false", "write an initial checkpoint and exit"));
  add_all(t, kWhyCkptImpl,
          {{"checkpoint.last_save_model_only", kB, "true", "final checkpoint holds only the weights"},
           {"checkpoint.export_dtype", kS, "float32", "dtype of a weights-only export"},
           {"checkpoint.enable_first_step_checkpoint", kB, "false", "save after the first step"}});

  t.group("recompute");
  t.add(section("activation_checkpoint", "activation recomputation"));
  t.add(impl("activation_checkpoint.mode", kS, "selective", "none | selective | full")
            .check(one_of({"none", "selective", "full"})));
  add_all(t,
          "recomputation never changes results; selective recomputation here is Megatron's (attention core)",
          {{"activation_checkpoint.selective_ac_option", kA, "2", "'op' or every-N-layers"}});
  add_all(
      t, kWhyTorch,
      {{"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", kL, "[]", "forced recompute"},
       {"activation_checkpoint.early_stop", kB, "false", "stop recomputation early"}});

  add_torchtitan_aux_keys(t);
  add_torchtitan_upstream_keys(t);
}

}  // namespace primus::config::keys
