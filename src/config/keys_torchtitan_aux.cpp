// TorchTitan-dialect keys of metrics, profiling, compilation, communication, fault tolerance, validation,
// Primus-Turbo and quantisation (Primus modules/torchtitan/pre_trainer.yaml, quantize.yaml), and the platform
// preset's keys.
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_torchtitan.h"

namespace primus::config::keys {

namespace {
constexpr const char* kWhyValidation = "applies only with validation.enable, which is not supported yet";
}  // namespace

void add_torchtitan_aux_keys(KeyTable& t) {
  t.group("metrics");
  t.add(section("metrics", "logging and metrics"));
  t.add(impl("metrics.log_freq", kI, "10", "print a log line every this many steps")
            .non_null()
            .check(positive()));
  t.add(impl("metrics.enable_tensorboard", kB, "false",
             "write TensorBoard event files (every log_freq steps)"));
  t.add(impl("metrics.save_tb_folder", kS, "tb", "TensorBoard folder inside the run directory"));
  t.add(noeff("metrics.enable_wandb", kB, "false", kWhyTracking, "W&B logging"));
  t.add(noeff("metrics.disable_color_printing", kB, "false", "log lines are plain text", "no colours"));
  t.add(noeff("metrics.save_for_all_ranks", kB, "false", kWhyLogExtra, "metrics from every rank"));

  t.group("profiling");
  t.add(section("profiling", "profiling"));
  add_all(t, kWhyProfile,
          {{"profiling.enable_profiling", kB, "false", "PyTorch profiler"},
           {"profiling.profile_freq", kI, "10", "profile period"},
           {"profiling.save_traces_folder", kS, "profile_traces", "trace folder"},
           {"profiling.enable_memory_snapshot", kB, "false", "memory snapshots"},
           {"profiling.save_memory_snapshot_folder", kS, "memory_snapshot", "snapshot folder"}});

  t.group("torch");
  t.add(section("compile", "torch.compile"));
  t.add(section("comm", "communication timeouts and tracing"));
  t.add(section("memory_estimation", "PyTorch memory estimation"));
  t.add(section("experimental", "Python extension hooks"));
  add_all(t, kWhyTorch,
          {{"compile.enable", kB, "false", "compile the model"},
           {"compile.components", kL, "[]", "what to compile: model, loss"},
           {"comm.trace_buf_size", kI, "20000", "NCCL flight-recorder buffer"},
           {"comm.save_traces_folder", kS, "comm_traces", "flight-recorder folder"},
           {"memory_estimation.enable", kB, "false", "estimate memory with fake tensors"},
           {"memory_estimation.disable_fake_mode", kB, "false", "estimate with real tensors"},
           {"experimental.custom_import", kS, "", "Python module imported at start"},
           {"experimental.custom_args_module", kS, "", "Python module extending the arguments"}});
  add_all(t, kWhyLauncher, {{"comm.init_timeout_seconds", kI, "300", "process-group start timeout"}});
  t.add(impl("comm.train_timeout_seconds", kI, "100",
             "collective timeout while training (the hang watchdog's "
             "limit)")
            .check(positive()));

  t.group("fault tolerance");
  t.add(section("fault_tolerance", "TorchFT fault tolerance"));
  t.add(unsup("fault_tolerance.enable", kB, "false", "TorchFT replica groups"));
  add_all(t, kWhyResilience,
          {{"fault_tolerance.process_group", kS, "gloo", "TorchFT process group"},
           {"fault_tolerance.process_group_timeout_ms", kI, "10000", "TorchFT timeout"},
           {"fault_tolerance.replica_id", kI, "0", "TorchFT replica id"},
           {"fault_tolerance.group_size", kI, "0", "TorchFT replica groups"},
           {"fault_tolerance.min_replica_size", kI, "1", "TorchFT minimum replicas"},
           {"fault_tolerance.semi_sync_method", kS, "null", "DiLoCo / local SGD"}});

  t.group("validation");
  t.add(section("validation", "validation on a separate dataset"));
  t.add(unsup("validation.enable", kB, "false", "validate on validation.dataset"));
  add_all(t, kWhyValidation,
          {{"validation.dataset", kS, "c4_validation", "validation dataset"},
           {"validation.dataset_path", kS, "null", "validation data folder"},
           {"validation.local_batch_size", kI, "8", "validation batch"},
           {"validation.seq_len", kI, "2048", "validation sequence length"},
           {"validation.freq", kI, "10", "validation period"},
           {"validation.steps", kI, "-1", "validation batches (-1: all)"}});

  t.group("primus-turbo");
  t.add(section("primus_turbo", "Primus-Turbo kernels"));
  t.add(unsup("primus_turbo.enable_attention_float8", kB, "false", "FP8 attention"));
  t.add(noeff("primus_turbo.use_moe_fp8", kB, "false", kWhyMoE, "FP8 MoE"));
  add_all(
      t, kWhyTurbo,
      {{"primus_turbo.enable_primus_turbo", kB, "false", "Primus-Turbo master switch"},
       {"primus_turbo.use_turbo_attention", kB, "false", "Turbo attention"},
       {"primus_turbo.use_classic_attention", kB, "false", "classic attention path"},
       {"primus_turbo.use_turbo_async_tp", kB, "false", "Turbo async TP"},
       {"primus_turbo.use_turbo_mx_linear", kB, "false", "Turbo MX linear (with the mx converter)"},
       {"primus_turbo.use_turbo_float8_linear", kB, "false", "Turbo FP8 linear (with the float8 converter)"},
       {"primus_turbo.use_turbo_grouped_mm", kB, "false", "Turbo grouped GEMM"},
       {"primus_turbo.enable_embedding_autocast", kB, "false", "embedding autocast"}});

  t.group("quantisation");
  for (const char* s : {"quantize", "quantize.linear", "quantize.linear.float8", "quantize.linear.mx",
                        "quantize.grouped_mm", "quantize.grouped_mm.float8", "quantize.grouped_mm.mx"})
    t.add(section(s, "quantised training (torchao)"));
  // FP8 linears (docs/fp8.md): the float8 converter turns them on.
  t.add(impl("quantize.linear.float8.recipe_name", kS, "null",
             "FP8 scaling with the float8 converter: tensorwise (null) | rowwise | rowwise_with_gw_hp")
            .check(one_of({"tensorwise", "rowwise", "rowwise_with_gw_hp"})));
  t.add(impl("quantize.linear.float8.filter_fqns", kL, "[]",
             "projections whose name contains one of these stay BF16 (the output layer always does)"));
  add_all(t,
          "FSDP gathers the BF16 weights and each projection casts after the gather, with the same scale "
          "(the whole weight's amax): the FP8 values are those of an FP8 all-gather",
          {{"quantize.linear.float8.enable_fsdp_float8_all_gather", kB, "false", "FP8 FSDP all-gather"},
           {"quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", kB, "false",
            "precomputed scales"}});
  t.add(noeff("quantize.linear.float8.emulate", kB, "false",
              "the GPU always runs real FP8 GEMMs (Hopper); the CPU backend always emulates them exactly",
              "emulated FP8"));
  add_all(t, kWhyQuantConverter,
          {{"quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", kS, "triton", "MXFP8 cast kernel"},
           {"quantize.linear.mx.recipe_name", kS, "mxfp8_cublas", "MX recipe"},
           {"quantize.linear.mx.filter_fqns", kL, "[]", "linears left in high precision"},
           {"quantize.grouped_mm.float8.fqns", kL, "[]", "MoE modules in FP8"},
           {"quantize.grouped_mm.mx.recipe_name", kS, "mxfp8", "grouped-GEMM MX recipe"},
           {"quantize.grouped_mm.mx.fqns", kL, "[]", "MoE modules in MXFP8"}});
}

void add_platform_keys(KeyTable& t) {
  t.group("platform");
  add_all(t, kWhyLauncher,
          {{"name", kS, "null", "platform name"},
           {"num_nodes_env_key", kS, "NNODES", "variable holding the node count"},
           {"node_rank_env_key", kS, "NODE_RANK", "variable holding the node rank"},
           {"master_addr_env_key", kS, "MASTER_ADDR", "variable holding the rendezvous host"},
           {"master_port_env_key", kS, "MASTER_PORT", "variable holding the rendezvous port"},
           {"gpus_per_node_env_key", kS, "GPUS_PER_NODE", "variable holding GPUs per node"},
           {"master_sink_level", kS, "INFO", "log level of the launcher"},
           {"workspace", kS, "./output", "platform workspace (the experiment's workspace is used)"}});
}

}  // namespace primus::config::keys
