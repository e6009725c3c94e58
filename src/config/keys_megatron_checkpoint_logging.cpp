// Megatron-dialect keys of checkpointing, logging, profiling and experiment tracking (Primus
// trainer_base.yaml, primus_megatron_module.yaml).
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_megatron_checkpoint_keys(KeyTable& t) {
  t.group("checkpoint");
  t.add(impl("save", kS, "null", "directory to save checkpoints in (null: no saving)"));
  t.add(impl("load", kS, "null", "checkpoint directory to resume or start from (null: none)"));
  t.add(impl("save_interval", kI, "null", "save every this many iterations (null: only at the end)")
            .check(positive()));
  t.add(impl("no_save_optim", kB, "null", "do not save the optimizer state"));
  t.add(impl("no_save_rng", kB, "null", "do not save the RNG state"));
  t.add(impl("no_load_optim", kB, "null", "do not load the optimizer state"));
  t.add(impl("no_load_rng", kB, "null", "do not load the RNG state"));
  t.add(impl("finetune", kB, "false", "load weights only and start at iteration 0"));
  t.add(impl("async_save", kB, "null", "write checkpoints in the background"));
  t.add(impl("auto_continue_train", kB, "false", "Primus: resume from the latest checkpoint in save"));
  t.add(impl("disable_last_saving", kB, "false", "Primus: no checkpoint at the end of training"));
  t.add(impl("exit_on_missing_checkpoint", kB, "true",
             "fail when load names no checkpoint (else start fresh)"));
  t.add(impl("exit_interval", kI, "null", "stop after an iteration divisible by this").check(positive()));
  t.add(impl("exit_duration_in_mins", kF, "null", "stop after this many minutes").check(positive()));
  t.add(impl("keep_latest_k", kI, "2",
             "checkpoints kept in save (0: all; 1 is refused: the newest may be partial)")
            .non_null()
            .check(non_negative())
            .ext());
  t.add(unsup("save_retain_interval", kI, "null", "keep checkpoints of these iterations forever"));
  t.add(
      unsup("load_main_params_from_ckpt", kB, "false", "load fp32 master weights instead of model weights"));
  t.add(unsup("use_checkpoint_args", kB, "false", "take model arguments from the checkpoint"));
  t.add(unsup("use_mp_args_from_checkpoint_args", kB, "false", "take parallel sizes from the checkpoint"));
  t.add(noeff("use_tokenizer_model_from_checkpoint_args", kB, "true",
              "the tokenizer always comes from this configuration",
              "take the tokenizer from the checkpoint"));
  t.add(unsup("pretrained_checkpoint", kS, "null", "checkpoint to fine-tune from"));
  t.add(unsup("ckpt_step", kI, "null", "load this iteration instead of the latest"));
  t.add(unsup("non_persistent_save_interval", kI, "null", "interval of non-persistent (local) checkpoints"));
  t.add(unsup("ckpt_convert_format", kS, "null", "convert the loaded checkpoint to this format and exit"));
  add_all(
      t, kWhyCkptImpl,
      {{"ckpt_format", kS, "torch_dist", "torch | torch_dist | zarr"},
       {"auto_detect_ckpt_format", kB, "false", "detect the format when loading"},
       {"ckpt_convert_save", kS, "null", "where a converted checkpoint goes"},
       {"ckpt_convert_update_legacy_dist_opt_format", kB, "false", "update old distributed-optimizer layout"},
       {"ckpt_fully_parallel_save", kB, "true", "every DP rank writes a part"},
       {"ckpt_fully_parallel_save_deprecated", kB, "false", "old switch"},
       {"ckpt_fully_parallel_load", kB, "false", "every DP rank reads a part"},
       {"fully_parallel_save", kB, "true", "SFT spelling of ckpt_fully_parallel_save"},
       {"ckpt_assume_constant_structure", kB, "false", "cache the checkpoint structure"},
       {"dist_ckpt_strictness", kS, "assume_ok_unexpected", "strictness of distributed-checkpoint loading"},
       {"dist_ckpt_save_pre_mcore_014", kB, "null", "old distributed-checkpoint layout"},
       {"dist_ckpt_optim_fully_reshardable", kB, "null", "reshardable optimizer state"},
       {"dist_ckpt_format_deprecated", kS, "null", "old format switch"},
       {"use_dist_ckpt_deprecated", kB, "false", "old switch"},
       {"use_persistent_ckpt_worker", kB, "false", "persistent background writer process"},
       {"non_persistent_ckpt_type", kS, "null", "global | local | in_memory"},
       {"non_persistent_global_ckpt_dir", kS, "null", "non-persistent global checkpoint directory"},
       {"non_persistent_local_ckpt_dir", kS, "null", "non-persistent local checkpoint directory"},
       {"non_persistent_local_ckpt_algo", kS, "fully_parallel", "fully_parallel | atomic"}});
}

void add_megatron_logging_keys(KeyTable& t) {
  t.group("logging");
  t.add(impl("log_interval", kI, "100", "print a log line every this many iterations")
            .non_null()
            .check(positive()));
  t.add(noeff("log_avg_skip_iterations", kI, "2", kWhyLogAverages,
              "Primus: iterations left out of the averaged timings")
            .non_null()
            .check(non_negative()));
  t.add(noeff("log_avg_reset_interval", kI, "10", kWhyLogAverages,
              "Primus: restart the timing average every this many lines")
            .non_null()
            .check(positive()));
  // TensorBoard (docs/metrics.md; src/config/dialect_tensorboard.cpp, src/train/tensorboard_sink.cpp).
  t.add(impl("disable_tensorboard", kB, "true",
             "Primus: no TensorBoard event files (false: {run directory}/tensorboard)"));
  t.add(
      impl("tensorboard_dir", kS, "null", "TensorBoard directory (set: event files go there, as Megatron)"));
  t.add(impl("tensorboard_log_interval", kI, "1", "TensorBoard step scalars every this many iterations")
            .non_null()
            .check(positive()));
  t.add(
      impl("tensorboard_queue_size", kI, "1000", "TensorBoard records held before a write (and every 120 s)")
          .non_null()
          .check(positive()));
  t.add(impl("log_timers_to_tensorboard", kB, "false", "iteration-time (and throughput) to TensorBoard"));
  t.add(impl("log_batch_size_to_tensorboard", kB, "false", "batch size to TensorBoard"));
  t.add(impl("log_learning_rate_to_tensorboard", kB, "true", "learning rate to TensorBoard"));
  t.add(impl("log_validation_ppl_to_tensorboard", kB, "false", "validation perplexity to TensorBoard"));
  t.add(impl("log_memory_to_tensorboard", kB, "false", "peak device memory to TensorBoard"));
  t.add(impl("log_world_size_to_tensorboard", kB, "false", "world size to TensorBoard"));
  t.add(impl("log_loss_scale_to_tensorboard", kB, "true", "loss scale to TensorBoard (BF16: 1)"));
  t.add(impl("log_throughput", kB, "false",
             "TFLOP/s, tokens/s and MFU to TensorBoard with log_timers_to_tensorboard (the log line always "
             "shows them)"));
  add_all(t, kWhyLogExtra,
          {{"log_params_norm", kB, "false", "log the parameter norm"},
           {"log_num_zeros_in_grad", kB, "false", "log zero gradients"},
           {"wall_clock_step_timer", kB, "false", "wall-clock step timer"},
           {"log_progress", kB, "false", "write progress.txt"},
           {"timing_log_level", kI, "0", "timer detail level"},
           {"timing_log_option", kS, "minmax", "timer reduction: max | minmax | all"},
           {"logging_level", kI, "null", "Python logging level"},
           {"config_logger_dir", kS, "", "where to dump layer configurations"},
           {"barrier_with_L1_time", kB, "true", "barrier before timers for exact L1 timings"}});
  add_all(t, kWhyTracking,
          {{"wandb_project", kS, "null", "W&B project"},
           {"wandb_exp_name", kS, "null", "W&B run name"},
           {"wandb_save_dir", kS, "null", "W&B directory"},
           {"wandb_entity", kS, "null", "W&B entity"},
           {"disable_wandb", kB, "true", "Primus: W&B off"},
           {"enable_one_logger", kB, "true", "NVIDIA one-logger"},
           {"one_logger_project", kS, "megatron-lm", "one-logger project"},
           {"one_logger_run_name", kS, "null", "one-logger run"},
           {"one_logger_async", kB, "false", "asynchronous one-logger"},
           {"app_tag_run_name", kS, "null", "application tag run name"},
           {"app_tag_run_version", kS, "0.0.0", "application tag version"},
           {"disable_mlflow", kB, "true", "Primus: MLflow off"},
           {"mlflow_run_name", kS, "null", "MLflow run"},
           {"mlflow_experiment_name", kS, "null", "MLflow experiment"},
           {"mlflow_upload_traces", kB, "false", "upload traces to MLflow"},
           {"mlflow_upload_logs", kB, "false", "upload logs to MLflow"},
           {"mlflow_upload_performance_metrics", kB, "false", "performance metrics to MLflow"},
           {"generate_tracelens_report", kB, "false", "TraceLens report"},
           {"mlflow_upload_tracelens_report", kB, "false", "upload the TraceLens report"},
           {"mlflow_tracelens_ranks", kL, "null", "ranks analysed by TraceLens"},
           {"mlflow_tracelens_output_format", kS, "xlsx", "TraceLens format"},
           {"mlflow_tracelens_cleanup_after_upload", kB, "false", "delete reports after upload"},
           {"mlflow_tracelens_auto_install", kB, "true", "install TraceLens when missing"}});

  t.group("profiling");
  t.add(impl("profile", kB, "false",
             "write a Chrome/Perfetto trace per profiled rank (trace/rank<r>.json in the run directory) of "
             "iterations profile_step_start..profile_step_end, and print the GPU timeline after them"));
  t.add(impl("profile_ranks", kL, "[0]", "ranks that write a trace"));
  t.add(impl("profile_step_start", kI, "10", "first profiled iteration").non_null().check(non_negative()));
  t.add(impl("profile_step_end", kI, "12", "last profiled iteration").non_null().check(non_negative()));
  add_all(t, kWhyProfile,
          {{"use_pytorch_profiler", kB, "false", "PyTorch profiler instead of nsys ranges"},
           {"disable_profiler_activity_cpu", kB, "false", "no CPU activity in traces"},
           {"torch_profiler_record_shapes", kB, "true", "record shapes"},
           {"torch_profiler_with_stack", kB, "true", "record stacks"},
           {"torch_profiler_use_gzip", kB, "true", "gzip traces"},
           {"record_memory_history", kB, "false", "PyTorch memory history"},
           {"memory_snapshot_path", kS, "snapshot.pickle", "PyTorch memory snapshot file"},
           {"profile_memory_iter", kI, "-1", "Primus: iteration to profile memory"}});
  add_all(t, kWhyRocm,
          {{"use_rocm_mem_info", kB, "false", "rocm-smi memory every iteration"},
           {"use_rocm_mem_info_iters", kL, "[1, 2]", "iterations with rocm-smi memory"}});

  t.group("resilience");
  t.add(unsup("error_injection_rate", kI, "0", "rerun state machine: inject errors at this rate"));
  add_all(t, kWhyResilience,
          {{"error_injection_type", kS, "transient_error", "kind of injected error"},
           {"rerun_mode", kS, "disabled", "rerun state machine: disabled | validate_results | report_stats"},
           {"result_rejected_tracker_filename", kS, "null", "rejected-result tracker file"},
           {"log_straggler", kB, "false", "straggler detection"},
           {"disable_straggler_on_startup", kB, "false", "start with straggler detection off"},
           {"straggler_ctrlr_port", kI, "65535", "straggler controller port"},
           {"straggler_minmax_count", kI, "1", "stragglers reported"},
           {"enable_ft_package", kB, "false", "NVIDIA fault-tolerance package"},
           {"calc_ft_timeouts", kB, "false", "compute fault-tolerance timeouts"},
           {"run_workload_inspector_server", kB, "false", "workload inspector server"},
           {"inprocess_restart", kB, "false", "in-process restart"}});
}

}  // namespace primus::config::keys
